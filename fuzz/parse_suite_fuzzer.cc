// parse_suite on arbitrary bytes (a `convplan bench --file` suite), then suite_problems with the
// bench's defaults, as the CLI does. Properties: every entry's count is in [1, kMaxSuiteCount],
// its descriptor parses to the entry's problem, the total is the sum of the counts, and merging
// keeps the total (no count is lost or wrapped).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "suite.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convplan;
  using namespace convplan::cli;
  const std::string_view text = fuzz::as_text(data, size);
  StatusOr<Suite> suite = parse_suite(text, "fuzz.txt");
  if (!suite.ok()) {
    CONVPLAN_FUZZ_CHECK(suite.status().code() == StatusCode::kInvalidArgument,
                        "parse_suite failed with another code: " + suite.status().to_string());
    CONVPLAN_FUZZ_CHECK(suite.status().message().rfind("fuzz.txt", 0) == 0,
                        "the message does not name the file: " + suite.status().message());
    return 0;
  }
  CONVPLAN_FUZZ_CHECK(!suite->entries.empty(), "a suite without entries parsed");
  int64_t sum = 0;
  for (const SuiteEntry& e : suite->entries) {
    CONVPLAN_FUZZ_CHECK(e.count >= 1 && e.count <= kMaxSuiteCount,
                        "count out of range: " + std::to_string(e.count));
    sum += e.count;
    StatusOr<ConvProblem> again = parse_problem(e.descriptor);
    CONVPLAN_FUZZ_CHECK(again.ok() && *again == e.problem,
                        "descriptor '" + e.descriptor + "' does not parse to its entry's problem");
  }
  CONVPLAN_FUZZ_CHECK(sum == suite->total_count(), "total_count is not the sum of the counts");
  StatusOr<std::vector<SuiteProblem>> problems = suite_problems(*suite, {}, bench_defaults());
  if (problems.ok()) {
    int64_t merged = 0;
    for (const SuiteProblem& p : *problems) merged += p.count;
    CONVPLAN_FUZZ_CHECK(merged == sum, "merging changed the total count");
    CONVPLAN_FUZZ_CHECK(problems->size() <= suite->entries.size(), "merging added problems");
  }
  return 0;
}
