// parse_problem on arbitrary bytes. Beyond "no crash, no sanitizer report", every input that
// parses must satisfy the header's contract: parse_problem(p.to_string()) == p, and the
// canonical text is a fixed point (printing the re-parsed problem gives the same text). A parsed
// problem is valid, so the shape methods that REQUIRE validate().ok() are exercised too (UBSan
// sees any overflow in them).
#include <cstddef>
#include <cstdint>
#include <string>

#include "convplan/problem.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convplan;
  const std::string_view text = fuzz::as_text(data, size);
  StatusOr<ConvProblem> parsed = parse_problem(text);
  if (!parsed.ok()) {
    CONVPLAN_FUZZ_CHECK(!parsed.status().message().empty(), "an error without a message");
    return 0;
  }
  const ConvProblem& p = *parsed;
  const Status valid = p.validate();
  CONVPLAN_FUZZ_CHECK(valid.ok(), "parse_problem returned a problem that fails validate(): " +
                                      valid.to_string() + "\ninput: " + std::string(text));

  const std::string canonical = p.to_string();
  StatusOr<ConvProblem> again = parse_problem(canonical);
  CONVPLAN_FUZZ_CHECK(again.ok(), "to_string() does not parse back\ninput: " + std::string(text) +
                                      "\nto_string: " + canonical +
                                      "\nerror: " + again.status().to_string());
  CONVPLAN_FUZZ_CHECK(
      *again == p, "parse_problem(p.to_string()) != p\ninput: " + std::string(text) +
                       "\nto_string: " + canonical + "\nre-parsed prints: " + again->to_string());
  CONVPLAN_FUZZ_CHECK(
      again->to_string() == canonical,
      "to_string is not stable\nfirst: " + canonical + "\nthen: " + again->to_string());
  CONVPLAN_FUZZ_CHECK(again->hash() == p.hash(), "equal problems hash differently: " + canonical);

  // The methods a valid problem offers; their results are only looked at by the sanitizers.
  volatile double sink = p.flops() + p.min_bytes();
  sink = sink + static_cast<double>(p.x_shape().span_elements() + p.w_shape().span_elements() +
                                    p.y_shape().span_elements() + p.output()[0]);
  (void)sink;
  (void)p.output_tensor();
  if (!p.post_ops.empty()) {
    sink = sink + static_cast<double>(p.bias_shape().span_elements());
    // The chain's own text round-trips as the whole problem does.
    StatusOr<PostOps> chain = PostOps::parse(p.post_ops.to_string());
    CONVPLAN_FUZZ_CHECK(chain.ok() && *chain == p.post_ops,
                        "the post-op chain does not parse back: " + p.post_ops.to_string());
    CONVPLAN_FUZZ_CHECK(
        p.without_post_ops().post_ops.empty() && p.direction == Direction::kForward,
        "a chain on a problem that is not forward, or that does not come off: " + canonical);
  }
  return 0;
}
