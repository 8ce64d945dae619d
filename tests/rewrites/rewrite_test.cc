// Each rewrite is exact: for random problems (strides 2-4, kernels 1-11, odd sizes, asymmetric
// padding, 1-3 spatial dimensions, both packed layouts, every direction, alpha and beta), the
// original problem's float64 reference equals the rewritten problem's reference composed with
// the host transforms, to rounding.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "convplan/reference.h"
#include "convplan/rewrite.h"

namespace convplan {
namespace {

std::vector<double> random_buffer(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& d : v) d = u(rng);
  return v;
}

// The rewritten computation on the host: transform the inputs, run the rewritten problem's
// reference, and map its output back (or write the user's output directly, as the plan does).
std::vector<double> run_rewritten(const Rewrite& r, std::vector<double> x, std::vector<double> w,
                                  std::vector<double> y) {
  const ConvProblem& p = r.original;
  const ConvProblem& q = r.rewritten;
  const TensorRole out = p.output_tensor();
  std::vector<double> bx, bw, by;
  for (TensorRole t : kTensorRoles) {
    std::vector<double>& b = by_role(t, bx, bw, by);
    if (!r.transforms(t)) {
      b = by_role(t, x, w, y);  // shared unchanged (the output too, with alpha and beta kept)
      continue;
    }
    b.assign(static_cast<size_t>(q.shape_of(t).span_elements()), t == out ? 7.0 : 0.0);
    if (t != out) {
      EXPECT_TRUE(
          transform_host(r, t, true, DataType::kDouble, by_role(t, x, w, y).data(), b.data()).ok());
    }
  }
  const Status s = reference_convolution(q, bx, bw, by);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<double> result = by_role(out, x, w, y);
  if (r.transforms(out)) {
    EXPECT_TRUE(transform_host(r, out, false, DataType::kDouble, by_role(out, bx, bw, by).data(),
                               result.data(), p.alpha, p.beta)
                    .ok());
  } else {
    result = by_role(out, bx, bw, by);
  }
  return result;
}

ConvProblem random_problem(std::mt19937_64& rng, int index) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  ConvProblem p;
  p.direction = static_cast<Direction>(index % 3);
  p.spatial_dims = 1 + static_cast<int>((index / 3) % 3);
  p.layout = uni(0, 1) == 0 ? Layout::kChannelsFirst : Layout::kChannelsLast;
  p.data_type = p.compute_type = DataType::kDouble;
  p.n = uni(1, 2);
  p.c = uni(1, 5);
  p.k = uni(1, 6);
  const int64_t max_filter = p.spatial_dims == 1 ? 11 : p.spatial_dims == 2 ? 7 : 4;
  for (int d = 0; d < p.spatial_dims; ++d) {
    p.stride[d] = uni(2, 4);
    p.filter[d] = uni(1, max_filter);
    p.pad_before[d] = uni(0, p.filter[d] - 1);
    p.pad_after[d] = uni(0, p.filter[d] - 1);
    const int64_t extent = p.spatial_dims == 1 ? 41 : p.spatial_dims == 2 ? 19 : 9;
    p.input[d] = uni(std::max<int64_t>(1, p.filter[d] - p.pad_before[d] - p.pad_after[d]), extent);
  }
  if (uni(0, 2) == 0) {
    p.alpha = 0.75;
    p.beta = -0.5;
  }
  return p;
}

TEST(RewriteProof, EveryRewriteOfRandomProblemsMatchesTheReference) {
  std::mt19937_64 rng(20261203);
  int problems = 0, rewrites = 0, space_to_depth = 0, unfolded = 0;
  for (int i = 0; problems < 240; ++i) {
    ConvProblem p = random_problem(rng, i);
    if (!p.validate().ok()) continue;
    ++problems;
    std::vector<double> x = random_buffer(rng, p.x_shape().span_elements());
    std::vector<double> w = random_buffer(rng, p.w_shape().span_elements());
    std::vector<double> y = random_buffer(rng, p.y_shape().span_elements());
    std::vector<double> rx = x, rw = w, ry = y;
    ASSERT_TRUE(reference_convolution(p, rx, rw, ry).ok());
    const std::vector<double>& expected = by_role(p.output_tensor(), rx, rw, ry);
    // Every block dividing the strides and a padding, beyond what applicable_rewrites() offers.
    std::vector<Rewrite> all = applicable_rewrites(p);
    for (int64_t b : {1, 2, 3, 4}) {
      for (int64_t cm : {1, 8}) {
        for (bool unfold : {false, true}) {
          StatusOr<Rewrite> r = make_rewrite(p, {b, cm, p.k % 4 == 0 ? 1 : 4, unfold});
          if (r.ok()) all.push_back(*r);
        }
      }
    }
    for (const Rewrite& r : all) {
      ++rewrites;
      space_to_depth += r.spec.block > 1 ? 1 : 0;
      unfolded += r.spec.unfold ? 1 : 0;
      EXPECT_EQ(r.rewritten.output(), p.output()) << r.name();
      const std::vector<double> got = run_rewritten(r, x, w, y);
      EXPECT_LT(relative_l2_error(got, expected), 1e-13)
          << r.name() << " of " << p.to_string() << " -> " << r.rewritten.to_string();
    }
  }
  EXPECT_GE(problems, 200);
  EXPECT_GE(space_to_depth, 300);  // the proof covers space-to-depth, not only padding
  EXPECT_GE(unfolded, 200);        // and unfolding (forward problems only)
  EXPECT_GT(rewrites, space_to_depth);
}

TEST(RewriteProof, ResNetStemBecomesTheFourByFourStrideOneProblem) {
  auto p =
      parse_problem("dt:bf16,layout:nhwc/g1mb256ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3");
  ASSERT_TRUE(p.ok());
  auto r = make_rewrite(*p, {2, 1, 1});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // The measured form: [N,112,112,12], a 4x4 filter, stride 1, padding 2 before, 1 after.
  EXPECT_EQ(r->rewritten.to_string(),
            "dt:bf16,layout:nhwc/g1mb256ic12ih112iw112oc64oh112ow112kh4kw4sh1sw1ph2pw2rh1rw1");
  EXPECT_EQ(r->filter_offset[0], 1);
  EXPECT_EQ(r->name(), "s2d2");
}

TEST(RewriteProof, StemOffersSpaceToDepthAndChannelPadding) {
  auto p =
      parse_problem("dt:bf16,layout:nhwc/g1mb256ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3");
  ASSERT_TRUE(p.ok());
  std::vector<std::string> names;
  for (const Rewrite& r : applicable_rewrites(*p)) names.push_back(r.name());
  EXPECT_EQ(names, (std::vector<std::string>{"s2d2", "s2d2c8", "c8", "uc32", "s2d2uc32"}));
}

TEST(RewriteProof, UnfoldedStemIsTheFourByOneProblemOnSixtyFourChannels) {
  auto p =
      parse_problem("dt:bf16,layout:nhwc/g1mb256ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3");
  ASSERT_TRUE(p.ok());
  auto spec = RewriteSpec::parse("s2d2uc32");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(*spec, (RewriteSpec{2, 32, 1, true}));
  auto r = make_rewrite(*p, *spec);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Measured on the H200 at b256 before it was built: 0.285 ms in cuDNN against 0.630 ms for
  // s2d2c8's 4x4 problem on 16 channels.
  EXPECT_EQ(r->rewritten.to_string(),
            "dt:bf16,layout:nhwc/g1mb256ic64ih112iw112oc64oh112ow112kh4kw1sh1sw1ph2pw0rh1rw0");
  EXPECT_EQ(r->name(), "s2d2uc32");
}

TEST(RewriteProof, ProblemsWithManyChannelsOrNoStrideGetNoSpaceToDepth) {
  auto wide = parse_problem("dt:bf16,layout:nhwc/mb32ic64ih56iw56oc128kh3kw3sh2sw2ph1pw1");
  ASSERT_TRUE(wide.ok());
  EXPECT_TRUE(applicable_rewrites(*wide).empty());
  auto unit = parse_problem("mb2ic3ih9iw9oc8kh3kw3ph1pw1");
  ASSERT_TRUE(unit.ok());
  for (const Rewrite& r : applicable_rewrites(*unit)) EXPECT_EQ(r.spec.block, 1) << r.name();
}

TEST(RewriteProof, UnsupportedRewritesSayWhy) {
  auto p = parse_problem("mb2ic3ih9iw9oc8kh3kw3sh3sw3dh1dw0");
  ASSERT_TRUE(p.ok());
  auto dilated = make_rewrite(*p, {3, 1, 1});
  EXPECT_EQ(dilated.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(dilated.status().message().find("dilation[0]=2"), std::string::npos)
      << dilated.status().message();
  auto q = parse_problem("mb2ic3ih9iw9oc8kh3kw3sh3sw3");
  ASSERT_TRUE(q.ok());
  auto bad_block = make_rewrite(*q, {2, 1, 1});
  EXPECT_NE(bad_block.status().message().find("block 2 does not divide stride[0]=3"),
            std::string::npos)
      << bad_block.status().message();
  auto identity = make_rewrite(*q, {1, 1, 1});
  EXPECT_EQ(identity.status().code(), StatusCode::kNotSupported);
  auto back = parse_problem("dir:bwd_data/mb2ic3ih9iw9oc8kh3kw3sh3sw3");
  ASSERT_TRUE(back.ok());
  auto unfolded = make_rewrite(*back, {1, 8, 1, true});
  EXPECT_EQ(unfolded.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(unfolded.status().message().find("unfold with dir=bwd_data (forward only)"),
            std::string::npos)
      << unfolded.status().message();
  EXPECT_FALSE(RewriteSpec::parse("s2du").ok());
  EXPECT_FALSE(RewriteSpec::parse("uu").ok());
}

}  // namespace
}  // namespace convplan

namespace convplan {
namespace {

// A forward problem with a post-op chain keeps its chain in the rewritten problem, which reads the
// user's bias and residual: exact as long as y is not transformed (k not padded).
TEST(RewriteProof, ChainsStayOnTheRewrittenProblemAndMatchTheReference) {
  std::mt19937_64 rng(20261204);
  int problems = 0, checked = 0;
  for (int i = 0; problems < 200 && i < 5000; ++i) {
    ConvProblem p = random_problem(rng, 3 * i);  // forward
    p.beta = 0.0;                                // a chain needs beta 0
    StatusOr<PostOps> chain = PostOps::parse("bias+add*0.5+elu");
    ASSERT_TRUE(chain.ok()) << chain.status().to_string();
    p.post_ops = *chain;
    if (!p.validate().ok()) continue;
    ++problems;
    std::vector<double> x = random_buffer(rng, p.x_shape().span_elements());
    std::vector<double> w = random_buffer(rng, p.w_shape().span_elements());
    const std::vector<double> bias = random_buffer(rng, p.bias_shape().span_elements());
    const std::vector<double> residual = random_buffer(rng, p.residual_shape().span_elements());
    std::vector<double> y(static_cast<size_t>(p.y_shape().span_elements()), 0.0);
    std::vector<double> rx = x, rw = w, expected = y;
    ASSERT_TRUE(reference_convolution(p, rx, rw, expected, bias, residual).ok());
    for (const Rewrite& r : applicable_rewrites(p)) {
      ASSERT_FALSE(r.transforms(TensorRole::kY)) << r.name();
      EXPECT_EQ(r.rewritten.post_ops, p.post_ops) << r.name();
      std::vector<double> bx(static_cast<size_t>(r.rewritten.x_shape().span_elements()));
      std::vector<double> bw(static_cast<size_t>(r.rewritten.w_shape().span_elements()));
      ASSERT_TRUE(
          transform_host(r, TensorRole::kX, true, DataType::kDouble, x.data(), bx.data()).ok());
      ASSERT_TRUE(
          transform_host(r, TensorRole::kW, true, DataType::kDouble, w.data(), bw.data()).ok());
      std::vector<double> got = y;
      ASSERT_TRUE(reference_convolution(r.rewritten, bx, bw, got, bias, residual).ok());
      EXPECT_LT(relative_l2_error(got, expected), 1e-13) << r.name() << " of " << p.to_string();
      ++checked;
    }
  }
  EXPECT_EQ(problems, 200);
  EXPECT_GE(checked, 60);
}

// The ResNet-50 stem with its inference chain gets its space-to-depth rewrites; a padded k (which
// would change the bias and residual the chain reads) is refused, naming the chain.
TEST(RewriteProof, ChainedStemGetsSpaceToDepthButNoPaddedK) {
  const char* stem =
      "dt:bf16,layout:nhwc,post:bias+relu/g1mb32ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3";
  StatusOr<ConvProblem> p = parse_problem(stem);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(applicable_rewrites(*p).size(), applicable_rewrites(p->without_post_ops()).size());
  StatusOr<Rewrite> s2d = make_rewrite(*p, RewriteSpec{2, 8, 1});
  ASSERT_TRUE(s2d.ok()) << s2d.status().to_string();
  EXPECT_EQ(s2d->rewritten.post_ops, p->post_ops);
  StatusOr<Rewrite> padded = make_rewrite(*p, RewriteSpec{2, 1, 128});
  ASSERT_FALSE(padded.ok());
  EXPECT_NE(padded.status().message().find("post:bias+relu with k padded"), std::string::npos)
      << padded.status().message();
}

}  // namespace
}  // namespace convplan
