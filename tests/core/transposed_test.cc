// TransposedConvProblem: its output size, validation, and the ordinary convolution that computes
// each pass, checked for shapes and, through the reference, against a direct deconvolution.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "convplan/problem.h"
#include "convplan/reference.h"

namespace convplan {
namespace {

TransposedConvProblem deconv_2d() {
  TransposedConvProblem t;
  t.n = 2;
  t.c = 6;  // deconvolution input channels
  t.k = 4;  // its output channels
  t.groups = 2;
  t.input = {5, 4, 1};
  t.filter = {3, 2, 1};
  t.stride = {2, 3, 1};
  t.pad_before = {1, 0, 0};
  t.pad_after = {1, 1, 0};
  t.output_padding = {1, 2, 0};
  return t;
}

StatusOr<ConvProblem> conv_of(const TransposedConvProblem& t, TransposedPass pass) {
  return t.to_conv(pass);
}

TEST(TransposedConv, OutputFollowsPyTorchsFormula) {
  const TransposedConvProblem t = deconv_2d();
  // (5-1)*2 - 1 - 1 + 1*(3-1) + 1 + 1 = 10;  (4-1)*3 - 0 - 1 + (2-1) + 2 + 1 = 12.
  EXPECT_EQ(t.output(), (SpatialDims{10, 12, 1}));
  EXPECT_TRUE(t.validate().ok()) << t.validate().to_string();
}

TEST(TransposedConv, EachPassMapsToTheDocumentedDirection) {
  const TransposedConvProblem t = deconv_2d();
  const std::pair<TransposedPass, Direction> passes[] = {
      {TransposedPass::kForward, Direction::kBackwardData},
      {TransposedPass::kBackwardData, Direction::kForward},
      {TransposedPass::kBackwardFilter, Direction::kBackwardFilter}};
  for (const auto& [pass, dir] : passes) {
    StatusOr<ConvProblem> conv = conv_of(t, pass);
    ASSERT_TRUE(conv.ok()) << conv.status().to_string();
    EXPECT_EQ(conv->direction, dir);
  }
}

TEST(TransposedConv, ConvSwapsChannelsAndTakesTheOutputAsItsInput) {
  TransposedConvProblem t = deconv_2d();
  t.data_type = DataType::kHalf;
  t.compute_type = DataType::kHalf;
  t.allow_tensor_cores = false;
  t.layout = Layout::kChannelsLast;
  t.alpha = 0.5;
  t.beta = 2;
  for (TransposedPass pass :
       {TransposedPass::kForward, TransposedPass::kBackwardData, TransposedPass::kBackwardFilter}) {
    StatusOr<ConvProblem> conv = conv_of(t, pass);
    ASSERT_TRUE(conv.ok()) << conv.status().to_string();
    EXPECT_EQ(conv->spatial_dims, 2);
    EXPECT_EQ(conv->n, t.n);
    EXPECT_EQ(conv->c, t.k);
    EXPECT_EQ(conv->k, t.c);
    EXPECT_EQ(conv->groups, t.groups);
    EXPECT_EQ(conv->input, t.output());
    EXPECT_EQ(conv->output(), t.input);
    EXPECT_EQ(conv->filter, t.filter);
    EXPECT_EQ(conv->stride, t.stride);
    EXPECT_EQ(conv->dilation, t.dilation);
    EXPECT_EQ(conv->pad_before, t.pad_before);
    EXPECT_EQ(conv->pad_after, t.pad_after);
    // The weight (c, k/groups, filter...) is the conv's (K, C/groups, filter...).
    const TensorShape w = conv->w_shape();
    EXPECT_EQ(w.dims[0], t.c);
    EXPECT_EQ(w.dims[1], t.k / t.groups);
    EXPECT_EQ(w.dims[2], 3);
    EXPECT_EQ(w.dims[3], 2);
    // x is the deconvolution's output side, y its input side.
    EXPECT_EQ(conv->x_shape().dims[1], t.k);
    EXPECT_EQ(conv->y_shape().dims[1], t.c);
    EXPECT_EQ(conv->data_type, DataType::kHalf);
    EXPECT_EQ(conv->compute_type, DataType::kHalf);
    EXPECT_FALSE(conv->allow_tensor_cores);
    EXPECT_EQ(conv->layout, Layout::kChannelsLast);
    EXPECT_EQ(conv->alpha, 0.5);
    EXPECT_EQ(conv->beta, 2.0);
  }
}

TEST(TransposedConv, OutputPaddingPastTheStrideShrinksTheConvsPadAfter) {
  TransposedConvProblem t;
  t.spatial_dims = 1;
  t.input = {4, 1, 1};
  t.filter = {3, 1, 1};
  t.dilation = {3, 1, 1};
  t.pad_after = {2, 0, 0};
  t.output_padding = {2, 0, 0};  // >= stride 1, but < dilation 3
  ASSERT_TRUE(t.validate().ok()) << t.validate().to_string();
  StatusOr<ConvProblem> conv = t.to_conv(TransposedPass::kForward);
  ASSERT_TRUE(conv.ok()) << conv.status().to_string();
  EXPECT_EQ(conv->input[0], t.output()[0]);
  EXPECT_EQ(conv->output()[0], 4);
  EXPECT_EQ(conv->pad_after[0], 0);
  t.pad_after = {1, 0, 0};
  t.output_padding = {2, 0, 0};
  conv = t.to_conv(TransposedPass::kForward);
  ASSERT_FALSE(conv.ok());
  EXPECT_EQ(conv.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(conv.status().message().find("output_padding[0]=2"), std::string::npos);
}

void expect_invalid(const TransposedConvProblem& t, const std::string& part) {
  const Status s = t.validate();
  ASSERT_FALSE(s.ok()) << part;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  EXPECT_FALSE(t.to_conv(TransposedPass::kForward).ok());
}

TEST(TransposedConv, ValidateRejectsImpossibleDeconvolutions) {
  TransposedConvProblem t = deconv_2d();
  t.output_padding = {2, 0, 0};
  expect_invalid(t, "output_padding[0]=2 must be < stride[0]=2 or < dilation[0]=1");
  t = deconv_2d();
  t.output_padding = {0, -1, 0};
  expect_invalid(t, "output_padding[1]=-1 must be >= 0");
  t = deconv_2d();
  t.output_padding[2] = 1;
  expect_invalid(t, "output_padding[2]=1 is past spatial_dims=2");
  t = deconv_2d();
  t.groups = 4;
  expect_invalid(t, "groups=4 does not divide c=6");
  t = deconv_2d();
  t.layout = Layout::kExplicit;
  expect_invalid(t, "layout=explicit");
  t = deconv_2d();
  t.stride[0] = 0;
  expect_invalid(t, "stride[0]=0");
  t = deconv_2d();
  t.spatial_dims = 0;
  expect_invalid(t, "spatial_dims=0");
  t = deconv_2d();
  t.data_type = DataType::kDouble;
  expect_invalid(t, "compute_type=f32 does not go with data_type=f64");
  TransposedConvProblem empty;
  empty.pad_before = {1, 0, 0};  // (1-1)*1 - 1 + 0 + 1 = 0
  expect_invalid(empty, "output[0]=0 is empty");
}

// ---------------------------------------------------------------------------------------------
// Numbers: each pass through the reference equals a deconvolution written out directly.

struct DeconvData {
  std::vector<double> in, w, out;  // NCHW-packed (n, c, input), (c, k/g, filter), (n, k, output)
};

// Calls f(in_offset, w_offset, out_offset) for every product of the deconvolution
// out[n, g*kg+kk, o] += in[n, g*cg+cc, i] * w[g*cg+cc, kk, r],  o = i*stride - pad + r*dilation.
template <typename F>
void for_each_product(const TransposedConvProblem& t, F f) {
  const SpatialDims out = t.output();
  int64_t I[3] = {1, 1, 1}, R[3] = {1, 1, 1}, O[3] = {1, 1, 1};
  int64_t S[3] = {1, 1, 1}, D[3] = {1, 1, 1}, P[3] = {0, 0, 0};
  for (int d = 0; d < t.spatial_dims; ++d) {
    I[d] = t.input[d];
    R[d] = t.filter[d];
    O[d] = out[d];
    S[d] = t.stride[d];
    D[d] = t.dilation[d];
    P[d] = t.pad_before[d];
  }
  const int64_t cg = t.c / t.groups, kg = t.k / t.groups;
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t g = 0; g < t.groups; ++g)
      for (int64_t cc = 0; cc < cg; ++cc)
        for (int64_t kk = 0; kk < kg; ++kk)
          for (int64_t i0 = 0; i0 < I[0]; ++i0)
            for (int64_t i1 = 0; i1 < I[1]; ++i1)
              for (int64_t i2 = 0; i2 < I[2]; ++i2)
                for (int64_t r0 = 0; r0 < R[0]; ++r0)
                  for (int64_t r1 = 0; r1 < R[1]; ++r1)
                    for (int64_t r2 = 0; r2 < R[2]; ++r2) {
                      const int64_t o0 = i0 * S[0] - P[0] + r0 * D[0];
                      const int64_t o1 = i1 * S[1] - P[1] + r1 * D[1];
                      const int64_t o2 = i2 * S[2] - P[2] + r2 * D[2];
                      if (o0 < 0 || o0 >= O[0] || o1 < 0 || o1 >= O[1] || o2 < 0 || o2 >= O[2])
                        continue;
                      const int64_t ci = g * cg + cc, ko = g * kg + kk;
                      const int64_t in_off = (((n * t.c + ci) * I[0] + i0) * I[1] + i1) * I[2] + i2;
                      const int64_t w_off = (((ci * kg + kk) * R[0] + r0) * R[1] + r1) * R[2] + r2;
                      const int64_t out_off =
                          (((n * t.k + ko) * O[0] + o0) * O[1] + o1) * O[2] + o2;
                      f(in_off, w_off, out_off);
                    }
}

std::vector<double> random_vector(size_t size, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(size);
  for (double& e : v) e = u(rng);
  return v;
}

TEST(TransposedConv, EveryPassThroughTheReferenceEqualsADirectDeconvolution) {
  std::vector<TransposedConvProblem> cases;
  cases.push_back(deconv_2d());
  TransposedConvProblem t1;
  t1.spatial_dims = 1;
  t1.n = 3;
  t1.c = 2;
  t1.k = 3;
  t1.input = {7, 1, 1};
  t1.filter = {4, 1, 1};
  t1.stride = {3, 1, 1};
  t1.dilation = {2, 1, 1};
  t1.pad_before = {2, 0, 0};
  t1.pad_after = {0, 0, 0};
  t1.output_padding = {2, 0, 0};
  cases.push_back(t1);
  TransposedConvProblem t3;
  t3.spatial_dims = 3;
  t3.c = 3;
  t3.k = 3;
  t3.groups = 3;  // depthwise
  t3.input = {3, 2, 3};
  t3.filter = {2, 3, 2};
  t3.stride = {2, 1, 2};
  t3.dilation = {1, 2, 1};
  t3.pad_before = {0, 1, 1};
  t3.pad_after = {1, 1, 0};
  t3.output_padding = {1, 1, 0};
  t3.alpha = 0.75;
  t3.beta = -0.5;
  cases.push_back(t3);
  TransposedConvProblem big_op = t1;  // output_padding >= stride (allowed by the dilation)
  big_op.stride = {1, 1, 1};
  big_op.dilation = {3, 1, 1};
  big_op.pad_after = {2, 0, 0};
  big_op.output_padding = {2, 0, 0};
  cases.push_back(big_op);

  std::mt19937_64 rng(11);
  for (TransposedConvProblem t : cases) {
    t.data_type = t.compute_type = DataType::kDouble;
    ASSERT_TRUE(t.validate().ok()) << t.validate().to_string();
    for (TransposedPass pass : {TransposedPass::kForward, TransposedPass::kBackwardData,
                                TransposedPass::kBackwardFilter}) {
      StatusOr<ConvProblem> conv = t.to_conv(pass);
      ASSERT_TRUE(conv.ok()) << conv.status().to_string();
      // Conv x = deconvolution output side, y = input side, w shared; all NCHW-packed.
      std::vector<double> x = random_vector(conv->x_shape().span_elements(), rng);
      std::vector<double> w = random_vector(conv->w_shape().span_elements(), rng);
      std::vector<double> y = random_vector(conv->y_shape().span_elements(), rng);
      std::vector<double> expected;
      switch (pass) {
        case TransposedPass::kForward:  // deconv output (conv x) from input (conv y)
          expected.assign(x.size(), 0.0);
          for_each_product(t, [&](int64_t i, int64_t r, int64_t o) { expected[o] += y[i] * w[r]; });
          for (size_t e = 0; e < x.size(); ++e) expected[e] = t.alpha * expected[e] + t.beta * x[e];
          break;
        case TransposedPass::kBackwardData:  // d input (conv y) from d output (conv x)
          expected.assign(y.size(), 0.0);
          for_each_product(t, [&](int64_t i, int64_t r, int64_t o) { expected[i] += x[o] * w[r]; });
          for (size_t e = 0; e < y.size(); ++e) expected[e] = t.alpha * expected[e] + t.beta * y[e];
          break;
        case TransposedPass::kBackwardFilter:  // dw from input (conv y) and d output (conv x)
          expected.assign(w.size(), 0.0);
          for_each_product(t, [&](int64_t i, int64_t r, int64_t o) { expected[r] += y[i] * x[o]; });
          for (size_t e = 0; e < w.size(); ++e) expected[e] = t.alpha * expected[e] + t.beta * w[e];
          break;
      }
      ASSERT_TRUE(reference_convolution(*conv, x, w, y).ok());
      const std::vector<double>& got = pass == TransposedPass::kForward        ? x
                                       : pass == TransposedPass::kBackwardData ? y
                                                                               : w;
      EXPECT_LT(relative_l2_error(got, expected), 1e-13)
          << "pass " << static_cast<int>(pass) << " of " << conv->to_string();
    }
  }
}

}  // namespace
}  // namespace convplan
