// The cache's own problem hash and comparison agree with ConvProblem's ==.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cache/cache_test_support.h"
#include "cache/plan_key.h"

namespace convplan::cache_detail {
namespace {

std::vector<ConvProblem> variants(const ConvProblem& base) {
  std::vector<ConvProblem> v;
  auto add = [&](auto change) {
    ConvProblem p = base;
    change(p);
    v.push_back(p);
  };
  add([](ConvProblem& p) { p.direction = Direction::kBackwardFilter; });
  add([](ConvProblem& p) { p.n += 1; });
  add([](ConvProblem& p) { p.c += 2; });
  add([](ConvProblem& p) { p.k += 2; });
  add([](ConvProblem& p) { p.groups = 2; });
  add([](ConvProblem& p) { p.input[1] += 1; });
  add([](ConvProblem& p) { p.filter[0] += 1; });
  add([](ConvProblem& p) { p.pad_before[1] += 1; });
  add([](ConvProblem& p) { p.pad_after[0] += 1; });
  add([](ConvProblem& p) { p.stride[1] += 1; });
  add([](ConvProblem& p) { p.dilation[0] += 1; });
  add([](ConvProblem& p) { p.data_type = DataType::kHalf; });
  add([](ConvProblem& p) { p.compute_type = DataType::kDouble; });
  add([](ConvProblem& p) { p.allow_tensor_cores = !p.allow_tensor_cores; });
  add([](ConvProblem& p) { p.layout = Layout::kChannelsLast; });
  add([](ConvProblem& p) { p.x_strides[4] = 7; });
  add([](ConvProblem& p) { p.w_strides[0] = 7; });
  add([](ConvProblem& p) { p.y_strides[2] = 7; });
  add([](ConvProblem& p) { p.alpha = 0.5; });
  add([](ConvProblem& p) { p.beta = 1.0; });
  // Regression: the hit path's key ignored the chain, so a conv tuned plain (or with "bias") was
  // served for the same conv with "bias+relu" (found on the H200 through the Python package).
  add([](ConvProblem& p) { p.post_ops.push(PostOpKind::kBias); });
  add([](ConvProblem& p) { p.post_ops.push(PostOpKind::kRelu); });
  add([](ConvProblem& p) {
    p.post_ops.push(PostOpKind::kBias);
    p.post_ops.push(PostOpKind::kRelu);
  });
  add([](ConvProblem& p) { p.post_ops.push(PostOpKind::kAdd, 0.5); });
  return v;
}

TEST(PlanKey, SameProblemAgreesWithEqualityForEveryField) {
  const ConvProblem base = testing::small_problem(0);
  for (const ConvProblem& other : variants(base)) {
    EXPECT_EQ(same_problem(base, other), base == other) << other.to_string();
    EXPECT_FALSE(same_problem(base, other)) << other.to_string();
  }
  ConvProblem copy = base;
  EXPECT_TRUE(same_problem(base, copy));
  EXPECT_EQ(problem_hash(base), problem_hash(copy));
}

TEST(PlanKey, ChainsDifferingOnlyInOneOpOrScaleAreDifferentKeys) {
  ConvProblem a = testing::small_problem(2), b = a, c = a;
  a.post_ops.push(PostOpKind::kBias);
  a.post_ops.push(PostOpKind::kAdd, 0.5);
  a.post_ops.push(PostOpKind::kRelu);
  b = a;
  b.post_ops.ops[1].scale = 1.0;
  c = a;
  c.post_ops.ops[2].kind = PostOpKind::kGelu;
  for (const ConvProblem* other : {&b, &c}) {
    EXPECT_FALSE(same_problem(a, *other)) << other->to_string();
    EXPECT_NE(problem_hash(a), problem_hash(*other)) << other->to_string();
  }
  ConvProblem stale = a;  // entries past count are not part of the chain
  stale.post_ops.count = 2;
  stale.post_ops.ops[2].kind = PostOpKind::kTanh;
  ConvProblem two = a;
  two.post_ops.count = 2;
  EXPECT_TRUE(same_problem(stale, two));
  EXPECT_EQ(problem_hash(stale), problem_hash(two));
}

TEST(PlanKey, NegativeZeroScalingEqualsZeroAndHashesAlike) {
  ConvProblem a = testing::small_problem(1), b = a;
  a.beta = 0.0;
  b.beta = -0.0;
  ASSERT_TRUE(a == b);
  EXPECT_TRUE(same_problem(a, b));
  EXPECT_EQ(problem_hash(a), problem_hash(b));
}

TEST(PlanKey, DistinctSmallProblemsRarelyCollide) {
  const std::vector<ConvProblem> problems = testing::small_problems(200);
  std::vector<size_t> hashes;
  for (const ConvProblem& p : problems) hashes.push_back(PlanKeyHash::hash(p, 0));
  std::sort(hashes.begin(), hashes.end());
  EXPECT_EQ(std::unique(hashes.begin(), hashes.end()), hashes.end());
  EXPECT_NE(PlanKeyHash::hash(problems[0], 0), PlanKeyHash::hash(problems[0], 1));
}

}  // namespace
}  // namespace convplan::cache_detail
