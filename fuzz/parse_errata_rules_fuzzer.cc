// parse_errata_rules on arbitrary bytes (the contents of a CONVPLAN_ERRATA_FILE). What parses is
// then used the way the tuner uses it: every rule is matched against a few problems and
// configurations, one of them built from the rule itself.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "convplan/engine_config.h"
#include "convplan/problem.h"
#include "convplan/tune_policy.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convplan;
  const std::string_view text = fuzz::as_text(data, size);
  StatusOr<std::vector<ErrataRule>> rules = parse_errata_rules(text, "<fuzz>");
  if (!rules.ok()) {
    CONVPLAN_FUZZ_CHECK(!rules.status().message().empty(), "an error without a message");
    return 0;
  }
  ConvProblem plain;  // the defaults: a valid 1x1 problem
  ConvProblem big = plain;
  big.spatial_dims = 3;
  big.n = 32;
  big.c = big.k = 256;
  big.input = {7, 56, 56};
  big.filter = {3, 3, 3};
  for (const ErrataRule& rule : *rules) {
    const EngineConfig own{rule.engine_id, rule.knobs};
    for (const ConvProblem* p : {&plain, &big}) {
      (void)rule.matches(*p, own);
      (void)rule.matches(*p, EngineConfig{});
    }
    // A rule with no condition but its engine and knobs drops exactly that configuration.
    if (!rule.direction && !rule.data_type && rule.ranges.empty() && rule.engine_id >= 0) {
      CONVPLAN_FUZZ_CHECK(rule.matches(plain, own),
                          "errata rule '" + rule.id +
                              "' does not match its own engine and knobs\n" + std::string(text));
    }
  }
  return 0;
}
