// The float64 reference convolution: hand-computed cases for each direction, a 1x1 convolution
// as a matrix product, the adjoint identities that tie the three directions together, beta,
// layouts, the element-wise variant, and its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "convplan/problem.h"
#include "convplan/reference.h"

namespace convplan {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ConvProblem problem(const std::string& text) {
  StatusOr<ConvProblem> p = parse_problem(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status().to_string();
  return p.ok() ? *p : ConvProblem{};
}

// Calls f(logical_index, buffer_offset) for every element of the tensor, in row-major logical
// order (N, C, spatial...).
void for_each_element(const TensorShape& s, const std::function<void(int64_t, int64_t)>& f) {
  int64_t idx[kMaxTensorRank] = {0, 0, 0, 0, 0};
  const int64_t total = s.elements();
  for (int64_t e = 0; e < total; ++e) {
    int64_t rem = e, off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      idx[d] = rem % s.dims[d];
      rem /= s.dims[d];
      off += idx[d] * s.strides[d];
    }
    f(e, off);
  }
}

// A buffer of the tensor's span holding `values` (logical order) and NaN in the strided gaps.
std::vector<double> to_buffer(const TensorShape& s, const std::vector<double>& values) {
  std::vector<double> buf(static_cast<size_t>(s.span_elements()), kNaN);
  for_each_element(s, [&](int64_t e, int64_t off) { buf[off] = values[e]; });
  return buf;
}

std::vector<double> to_logical(const TensorShape& s, const std::vector<double>& buf) {
  std::vector<double> values(static_cast<size_t>(s.elements()));
  for_each_element(s, [&](int64_t e, int64_t off) { values[e] = buf[off]; });
  return values;
}

std::vector<double> random_values(int64_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<size_t>(count));
  for (double& e : v) e = u(rng);
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

double norm(const std::vector<double>& a) { return std::sqrt(dot(a, a)); }

// Logical values of x, w, y; run() lays them out in the problem's layout (gaps NaN), runs the
// reference, and returns the logical values of all three afterwards.
struct Tensors {
  std::vector<double> x, w, y;
};

Tensors random_tensors(const ConvProblem& p, std::mt19937_64& rng) {
  return {random_values(p.x_shape().elements(), rng), random_values(p.w_shape().elements(), rng),
          random_values(p.y_shape().elements(), rng)};
}

Tensors run(const ConvProblem& p, const Tensors& in) {
  std::vector<double> x = to_buffer(p.x_shape(), in.x);
  std::vector<double> w = to_buffer(p.w_shape(), in.w);
  std::vector<double> y = to_buffer(p.y_shape(), in.y);
  const Status s = reference_convolution(p, x, w, y);
  EXPECT_TRUE(s.ok()) << p.to_string() << ": " << s.to_string();
  return {to_logical(p.x_shape(), x), to_logical(p.w_shape(), w), to_logical(p.y_shape(), y)};
}

const std::vector<double>& written(const ConvProblem& p, const Tensors& t) {
  return by_role(p.output_tensor(), t.x, t.w, t.y);
}

std::vector<double>& written(const ConvProblem& p, Tensors& t) {
  return by_role(p.output_tensor(), t.x, t.w, t.y);
}

// Runs p with the written tensor poisoned (beta = 0 must not read it) and returns it.
std::vector<double> compute(ConvProblem p, Tensors in) {
  const TensorRole which = p.output_tensor();
  const TensorShape shape = p.shape_of(which);
  written(p, in).assign(static_cast<size_t>(shape.elements()), kNaN);
  return written(p, run(p, in));
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want,
                     double tol = 1e-14) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// ---------------------------------------------------------------------------------------------
// Hand-computed cases.

TEST(ReferenceByHand, Forward1dWithPaddingAndStride) {
  // x padded: 0 1 2 3 4 5 0; w = 1 0 -1; outputs at 0, 2, 4.
  const ConvProblem p = problem("dt:f64/mb1ic1iw5oc1kw3sw2pw1");
  ASSERT_EQ(p.output()[0], 3);
  expect_near_all(compute(p, {{1, 2, 3, 4, 5}, {1, 0, -1}, {}}), {-2, -2, 4});
}

TEST(ReferenceByHand, Forward1dWithDilationAndAsymmetricPadding) {
  // Dilation 3 reads x[o], x[o+3]; one zero before, two after: x = 0 1 2 3 4 5 0 0.
  const ConvProblem p = problem("dt:f64/mb1ic1iw5oc1kw2sw1pw1rw2dw2");
  ASSERT_EQ(p.output()[0], 5);
  expect_near_all(compute(p, {{1, 2, 3, 4, 5}, {1, 10}, {}}), {30, 41, 52, 3, 4});
}

TEST(ReferenceByHand, Forward2dSumsChannelsWithAlphaAndBeta) {
  // x: c0 = [1 2; 3 4], c1 = [5 6; 7 8]; w: c0 = identity, c1 = anti-diagonal -> 5 + 13 = 18.
  ConvProblem p = problem("dt:f64,alpha:2,beta:0.5/mb1ic2ih2iw2oc1kh2kw2");
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<double> w = {1, 0, 0, 1, 0, 1, 1, 0};
  expect_near_all(written(p, run(p, {x, w, {4}})), {2 * 18 + 0.5 * 4});
}

TEST(ReferenceByHand, ForwardGroupsSeeOnlyTheirOwnChannels) {
  // Two groups: y0 from x0 with [1 1], y1 from x1 with [2 -1].
  const ConvProblem p = problem("dt:f64/g2mb1ic2iw3oc2kw2");
  expect_near_all(compute(p, {{1, 2, 3, 4, 5, 6}, {1, 1, 2, -1}, {}}), {3, 5, 3, 4});
}

TEST(ReferenceByHand, BackwardDataWithStride) {
  // y[o] = x[2o] - x[2o+1]: the adjoint spreads dy[o] to dx[2o] and -dy[o] to dx[2o+1].
  const ConvProblem p = problem("dir:bwd_data,dt:f64/mb1ic1iw4oc1kw2sw2");
  expect_near_all(compute(p, {{}, {1, -1}, {1, 2}}), {1, -1, 2, -2});
}

TEST(ReferenceByHand, BackwardDataWithPadding) {
  // y[o] = x[o-1] + 2 x[o] + 3 x[o+1]; with dy = 1 1 1: dx = 2+1, 3+2+1, 3+2.
  const ConvProblem p = problem("dir:bwd_data,dt:f64/mb1ic1iw3oc1kw3pw1");
  expect_near_all(compute(p, {{}, {1, 2, 3}, {1, 1, 1}}), {3, 6, 5});
}

TEST(ReferenceByHand, BackwardDataGroupedAndTwoOutputChannels) {
  // One group, c=1, k=2: dx = w0 * dy0 + w1 * dy1 (1x1 filters).
  const ConvProblem p = problem("dir:bwd_data,dt:f64/mb1ic1iw2oc2kw1");
  expect_near_all(compute(p, {{}, {2, -3}, {1, 2, 10, 20}}), {2 * 1 - 3 * 10, 2 * 2 - 3 * 20});
}

TEST(ReferenceByHand, BackwardFilterSumsOverOutputsAndBatch) {
  // dw[r] = sum_n sum_o x[n, o + r] dy[n, o].
  const ConvProblem p = problem("dir:bwd_filter,dt:f64/mb2ic1iw4oc1kw2");
  // n=0: x = 1 2 3 4, dy = 1 -1 2 -> dw = 1-2+6, 2-3+8 = 5, 7.
  // n=1: x = 1 1 1 1, dy = 1 1 1   -> dw = 3, 3.
  expect_near_all(compute(p, {{1, 2, 3, 4, 1, 1, 1, 1}, {}, {1, -1, 2, 1, 1, 1}}), {8, 10});
}

TEST(ReferenceByHand, BackwardFilterWithStrideAndBeta) {
  // y[o] = sum_r x[2o + r] w[r], o = 0, 1: dw[r] = x[r] dy0 + x[2+r] dy1; beta = 1 adds old w.
  const ConvProblem p = problem("dir:bwd_filter,dt:f64,beta:1/mb1ic1iw5oc1kw2sw2");
  ASSERT_EQ(p.output()[0], 2);
  expect_near_all(written(p, run(p, {{1, 2, 3, 4, 5}, {100, 200}, {1, 10}})),
                  {100 + 1 + 30, 200 + 2 + 40});
}

// ---------------------------------------------------------------------------------------------
// A 1x1 convolution is a matrix product per image: Y_n = W X_n, dX_n = W^T dY_n,
// dW = sum_n dY_n X_n^T, with X_n of (c, pixels).

TEST(ReferenceAlgebra, OneByOneConvolutionIsAMatrixProduct) {
  const ConvProblem fwd = problem("dt:f64/mb2ic3ih3iw5oc4kh1kw1");
  const int64_t n = 2, c = 3, k = 4, pix = 15;
  std::mt19937_64 rng(1);
  const Tensors t = random_tensors(fwd, rng);
  auto X = [&](int64_t i, int64_t ch, int64_t q) { return t.x[(i * c + ch) * pix + q]; };
  auto W = [&](int64_t kc, int64_t ch) { return t.w[kc * c + ch]; };
  auto DY = [&](int64_t i, int64_t kc, int64_t q) { return t.y[(i * k + kc) * pix + q]; };

  std::vector<double> y(n * k * pix, 0.0), dx(n * c * pix, 0.0), dw(k * c, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t kc = 0; kc < k; ++kc)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t q = 0; q < pix; ++q) {
          y[(i * k + kc) * pix + q] += W(kc, ch) * X(i, ch, q);
          dx[(i * c + ch) * pix + q] += W(kc, ch) * DY(i, kc, q);
          dw[kc * c + ch] += DY(i, kc, q) * X(i, ch, q);
        }
  EXPECT_LT(relative_l2_error(compute(fwd, t), y), 1e-15);
  ConvProblem bwd_data = fwd;
  bwd_data.direction = Direction::kBackwardData;
  EXPECT_LT(relative_l2_error(compute(bwd_data, t), dx), 1e-15);
  ConvProblem bwd_filter = fwd;
  bwd_filter.direction = Direction::kBackwardFilter;
  EXPECT_LT(relative_l2_error(compute(bwd_filter, t), dw), 1e-15);
}

// ---------------------------------------------------------------------------------------------
// Random problems with groups, stride, dilation and asymmetric padding.

ConvProblem random_problem(std::mt19937_64& rng, Layout layout = Layout::kChannelsFirst) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  ConvProblem p = ConvProblem::with_data_type(ConvProblem{}, DataType::kDouble);
  p.spatial_dims = static_cast<int>(pick(1, 3));
  p.groups = pick(1, 3);
  p.c = p.groups * pick(1, 3);
  p.k = p.groups * pick(1, 3);
  p.n = pick(1, 3);
  const int64_t max_input = p.spatial_dims == 3 ? 5 : p.spatial_dims == 2 ? 8 : 16;
  for (int d = 0; d < p.spatial_dims; ++d) {
    p.filter[d] = pick(1, 3);
    p.dilation[d] = pick(1, 3);
    p.stride[d] = pick(1, 3);
    p.pad_before[d] = pick(0, 2);
    p.pad_after[d] = pick(0, 2);
    const int64_t extent = p.dilation[d] * (p.filter[d] - 1) + 1;
    p.input[d] =
        std::max<int64_t>(1, extent - p.pad_before[d] - p.pad_after[d]) + pick(0, max_input);
  }
  p.layout = layout;
  return p;
}

// Strides of a random dimension order with random gaps.
TensorStrides random_strides(const TensorShape& s, std::mt19937_64& rng) {
  std::vector<int> order(static_cast<size_t>(s.rank));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  TensorStrides st{};
  int64_t acc = 1;
  for (int d : order) {
    st[d] = acc;
    acc = acc * s.dims[d] + static_cast<int64_t>(rng() % 3);
  }
  return st;
}

ConvProblem with_direction(ConvProblem p, Direction d) {
  p.direction = d;
  return p;
}

TEST(ReferenceAlgebra, BackwardDataAndFilterAreTheAdjointsOfForward) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 300; ++i) {
    const ConvProblem p = random_problem(rng);
    ASSERT_TRUE(p.validate().ok()) << p.to_string();
    const Tensors t = random_tensors(p, rng);  // x, w, and dy in t.y
    const std::vector<double> y = compute(with_direction(p, Direction::kForward), t);
    const std::vector<double> dx = compute(with_direction(p, Direction::kBackwardData), t);
    const std::vector<double> dw = compute(with_direction(p, Direction::kBackwardFilter), t);
    const double lhs = dot(y, t.y);  // <fwd(x, w), dy>
    const double scale = norm(y) * norm(t.y) + 1e-300;
    EXPECT_LT(std::abs(lhs - dot(t.x, dx)) / scale, 1e-13)
        << "<x, bwd_data(dy, w)> of " << p.to_string();
    EXPECT_LT(std::abs(lhs - dot(t.w, dw)) / scale, 1e-13)
        << "<w, bwd_filter(x, dy)> of " << p.to_string();
  }
}

TEST(ReferenceAlgebra, BetaOneAccumulatesIntoTheOutput) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 60; ++i) {
    for (Direction d :
         {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
      ConvProblem p = with_direction(random_problem(rng), d);
      p.alpha = 1.5;
      const Tensors t = random_tensors(p, rng);
      const std::vector<double> fresh = compute(p, t);
      p.beta = 1.0;
      const std::vector<double> accumulated = written(p, run(p, t));
      const std::vector<double>& old = written(p, t);
      std::vector<double> want(old.size());
      for (size_t e = 0; e < old.size(); ++e) want[e] = fresh[e] + old[e];
      EXPECT_LT(relative_l2_error(accumulated, want), 1e-15) << p.to_string();
    }
  }
}

TEST(ReferenceAlgebra, BetaZeroIgnoresAPoisonedOutput) {
  std::mt19937_64 rng(4);
  for (int i = 0; i < 30; ++i) {
    for (Direction d :
         {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
      const ConvProblem p = with_direction(random_problem(rng), d);
      for (double v : compute(p, random_tensors(p, rng)))
        ASSERT_TRUE(std::isfinite(v)) << p.to_string();
    }
  }
}

TEST(ReferenceLayouts, EveryLayoutGivesTheSameNumbers) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100; ++i) {
    for (Direction d :
         {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
      ConvProblem first = with_direction(random_problem(rng), d);
      first.alpha = 0.75;
      first.beta = -0.5;
      const Tensors t = random_tensors(first, rng);
      const std::vector<double> want = written(first, run(first, t));
      ConvProblem last = first;
      last.layout = Layout::kChannelsLast;
      ConvProblem strided = first;
      strided.layout = Layout::kExplicit;
      strided.x_strides = random_strides(first.x_shape(), rng);
      strided.w_strides = random_strides(first.w_shape(), rng);
      strided.y_strides = random_strides(first.y_shape(), rng);
      for (const ConvProblem& p : {last, strided}) {
        ASSERT_TRUE(p.validate().ok()) << p.to_string() << ": " << p.validate().to_string();
        EXPECT_LT(relative_l2_error(written(p, run(p, t)), want), 1e-15) << p.to_string();
      }
    }
  }
}

TEST(ReferenceLayouts, ChannelsLastStridesAreNhwcAndKrsc) {
  const ConvProblem p = problem("layout:nhwc/mb2ic3ih4iw5oc6kh2kw3");
  EXPECT_EQ(p.x_shape().strides, (TensorStrides{4 * 5 * 3, 1, 5 * 3, 3, 0}));
  EXPECT_EQ(p.w_shape().strides, (TensorStrides{2 * 3 * 3, 1, 3 * 3, 3, 0}));
  const ConvProblem q = problem("mb2ic3ih4iw5oc6kh2kw3");
  EXPECT_EQ(q.x_shape().strides, (TensorStrides{3 * 4 * 5, 4 * 5, 5, 1, 0}));
}

TEST(ReferenceLayouts, StridedGapsAreLeftUntouched) {
  std::mt19937_64 rng(6);
  for (int i = 0; i < 50; ++i) {
    for (Direction d :
         {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
      ConvProblem p = with_direction(random_problem(rng), d);
      p.layout = Layout::kExplicit;
      p.x_strides = random_strides(p.x_shape(), rng);
      p.w_strides = random_strides(p.w_shape(), rng);
      p.y_strides = random_strides(p.y_shape(), rng);
      const Tensors t = random_tensors(p, rng);
      std::vector<double> bufs[3] = {to_buffer(p.x_shape(), t.x), to_buffer(p.w_shape(), t.w),
                                     to_buffer(p.y_shape(), t.y)};
      const std::vector<double> before[3] = {bufs[0], bufs[1], bufs[2]};
      ASSERT_TRUE(reference_convolution(p, bufs[0], bufs[1], bufs[2]).ok());
      const int out = static_cast<int>(p.output_tensor());
      const TensorShape shapes[3] = {p.x_shape(), p.w_shape(), p.y_shape()};
      for (int b = 0; b < 3; ++b) {
        std::vector<bool> element(bufs[b].size(), false);
        for_each_element(shapes[b], [&](int64_t, int64_t off) { element[off] = true; });
        for (size_t e = 0; e < bufs[b].size(); ++e) {
          if (b == out && element[e]) continue;
          ASSERT_EQ(std::bit_cast<uint64_t>(bufs[b][e]), std::bit_cast<uint64_t>(before[b][e]))
              << "tensor "
              << "xwy"[b] << " offset " << e << " of " << p.to_string();
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// reference_convolution_at: the same numbers at chosen output elements.

TEST(ReferenceAt, MatchesTheFullReferenceAtRandomElements) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 60; ++i) {
    for (Direction d :
         {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
      for (DataType type : {DataType::kDouble, DataType::kFloat, DataType::kHalf}) {
        ConvProblem p = ConvProblem::with_data_type(with_direction(random_problem(rng), d), type);
        p.alpha = 1.25;
        p.beta = 0.5;
        if (i % 2 == 1) {
          p.layout = Layout::kExplicit;
          p.x_strides = random_strides(p.x_shape(), rng);
          p.w_strides = random_strides(p.w_shape(), rng);
          p.y_strides = random_strides(p.y_shape(), rng);
        }
        const TensorShape shapes[3] = {p.x_shape(), p.w_shape(), p.y_shape()};
        const Tensors t = random_tensors(p, rng);
        std::vector<double> bufs[3] = {to_buffer(shapes[0], t.x), to_buffer(shapes[1], t.w),
                                       to_buffer(shapes[2], t.y)};
        // Typed host buffers, and the full reference on the values they really hold.
        std::vector<char> typed[3];
        for (int b = 0; b < 3; ++b) {
          typed[b].resize(bufs[b].size() * size_of(type));
          to_data_type(type, bufs[b].data(), typed[b].data(), static_cast<int64_t>(bufs[b].size()));
          from_data_type(type, typed[b].data(), bufs[b].data(),
                         static_cast<int64_t>(bufs[b].size()));
        }
        const int out = static_cast<int>(p.output_tensor());
        std::vector<int64_t> offsets;
        for_each_element(shapes[out], [&](int64_t, int64_t off) {
          if (rng() % 3 == 0) offsets.push_back(off);
        });
        std::vector<double> at;
        const Status s = reference_convolution_at(p, typed[0].data(), typed[1].data(),
                                                  typed[2].data(), offsets, at);
        ASSERT_TRUE(s.ok()) << p.to_string() << ": " << s.to_string();
        ASSERT_TRUE(reference_convolution(p, bufs[0], bufs[1], bufs[2]).ok());
        std::vector<double> want;
        for (int64_t off : offsets) want.push_back(bufs[out][off]);
        EXPECT_LT(relative_l2_error(at, want), 1e-14) << p.to_string();
      }
    }
  }
}

TEST(ReferenceAt, RejectsOffsetsThatAreNotElements) {
  // y (2, 3, 8) with strides (3, 1, 10): offsets 6..9 of each row are gaps.
  ConvProblem p = problem("dt:f64,xs:1x2x40,ws:6x3x1,ys:3x1x10/mb2ic2iw10oc3kw3");
  ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
  const std::vector<double> x(static_cast<size_t>(p.x_shape().span_elements()), 1.0);
  const std::vector<double> w(static_cast<size_t>(p.w_shape().span_elements()), 1.0);
  const std::vector<double> y(static_cast<size_t>(p.y_shape().span_elements()), 1.0);
  std::vector<double> out;
  for (int64_t bad : {int64_t{-1}, p.y_shape().span_elements(), int64_t{6}}) {
    const Status s = reference_convolution_at(p, x.data(), w.data(), y.data(), {bad}, out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  const Status s = reference_convolution_at(p, x.data(), w.data(), y.data(), {0, 1, 2, 10}, out);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(out, (std::vector<double>{6, 6, 6, 6}));
}

// ---------------------------------------------------------------------------------------------
// Refusals.

TEST(ReferenceErrors, RejectsInvalidProblemsAndShortBuffers) {
  ConvProblem p = problem("dt:f64/mb1ic2iw4oc2kw3");
  std::vector<double> x(8, 1.0), w(12, 1.0), y(4, 1.0);
  EXPECT_TRUE(reference_convolution(p, x, w, y).ok());
  std::vector<double> short_x(7, 1.0);
  const Status s = reference_convolution(p, short_x, w, y);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x holds 7 elements"), std::string::npos) << s.message();
  p.groups = 3;
  EXPECT_EQ(reference_convolution(p, x, w, y).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace convplan

namespace convplan {
namespace {

// Post-op chains in the reference (their numbers are checked against NumPy/SciPy by
// check_against_scipy.py): the formulas at known points, and the tensors a chain needs.
TEST(ReferencePostOps, KnownValues) {
  auto one = [](const char* chain, double v, double bias = 0, double residual = 0) {
    return apply_post_ops(*PostOps::parse(chain), v, bias, residual);
  };
  EXPECT_EQ(one("relu", -2), 0.0);
  EXPECT_EQ(one("relu", 3), 3.0);
  EXPECT_EQ(one("relu6", 7), 6.0);
  EXPECT_EQ(one("relu6", -1), 0.0);
  EXPECT_EQ(one("bias+relu", -1, 3), 2.0);
  EXPECT_EQ(one("relu+bias", -1, 3), 3.0);  // order matters
  EXPECT_EQ(one("add*0.5", 1, 0, 4), 3.0);
  EXPECT_EQ(one("bias+add+relu", 1, 2, -4), 0.0);
  EXPECT_NEAR(one("sigmoid", 0), 0.5, 1e-15);
  EXPECT_NEAR(one("silu", 1), 1.0 / (1.0 + std::exp(-1.0)), 1e-15);
  EXPECT_NEAR(one("gelu", 1), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(one("gelu_tanh", 1), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(one("tanh", 0.5), std::tanh(0.5), 1e-15);
  EXPECT_NEAR(one("elu", -1), std::exp(-1.0) - 1.0, 1e-15);
  EXPECT_EQ(one("elu", 2), 2.0);
}

TEST(ReferencePostOps, MissingTensorsAreNamed) {
  const ConvProblem p = *parse_problem("dt:f64,post:bias+add+relu/g1mb1ic2ih3iw3oc2oh3ow3kh1kw1");
  std::vector<double> x(18, 1.0), w(4, 1.0), y(18, 0.0), bias(2, 0.5), residual(18, 1.0);
  Status s = reference_convolution(p, x, w, y);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bias holds 0 elements"), std::string::npos) << s.message();
  s = reference_convolution(p, x, w, y, bias, {});
  EXPECT_NE(s.message().find("residual holds 0 elements"), std::string::npos) << s.message();
  ASSERT_TRUE(reference_convolution(p, x, w, y, bias, residual).ok());
  for (double v : y) EXPECT_EQ(v, 2.0 + 0.5 + 1.0);  // conv of ones over 2 channels
  std::vector<double> out;
  s = reference_convolution_at(p, x.data(), w.data(), y.data(), {0}, out);
  EXPECT_NE(s.message().find("needs the bias tensor"), std::string::npos) << s.message();
  // The sampled form agrees with the full one.
  std::vector<uint8_t> hb(bias.size() * 8), hr(residual.size() * 8);
  std::memcpy(hb.data(), bias.data(), hb.size());
  std::memcpy(hr.data(), residual.data(), hr.size());
  ASSERT_TRUE(reference_convolution_at(p, x.data(), w.data(), y.data(),
                                       PostOpTensors{hb.data(), hr.data()}, {0, 5, 17}, out)
                  .ok());
  EXPECT_EQ(out, (std::vector<double>{3.5, 3.5, 3.5}));
}

}  // namespace
}  // namespace convplan
