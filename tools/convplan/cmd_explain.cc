// convplan explain DESCRIPTOR: no GPU needed.
#include <iostream>

#include "commands.h"
#include "explain.h"

namespace convplan::cli {

int explain_command(const GlobalOptions& /*global*/, const ExplainOptions& o) {
  StatusOr<ConvProblem> p = make_problem(o.descriptor, o.problem.overrides());
  if (!p.ok()) return fail(kExitUsage, p.status().message());
  Rates rates;
  rates.matrix_tflops = o.peak_tflops;
  rates.copy_gbps = o.peak_gbps;
  rates.matrix_source = rates.copy_source = "flag";
  if (!o.json_path.empty()) {
    const Status s = write_text(o.json_path, explain_json(*p, rates).dump(2) + "\n");
    if (!s.ok()) return fail(kExitFailure, s.to_string());
    if (o.json_path == "-") return kExitOk;
  }
  std::cout << explain_text(*p, rates);
  return kExitOk;
}

}  // namespace convplan::cli
