// The host twin of the transform kernels against naive loops written the other way round: a
// scatter from every original element to where space-to-depth puts it (the twin gathers).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "convplan/rewrite.h"
#include "rewrites/rewrite_internal.h"

namespace convplan {
namespace {

// Offset of logical element (i0, c, s0, s1, s2) in `shape` (a 1-3 D tensor; missing dims are 0).
int64_t at(const TensorShape& shape, int64_t i0, int64_t c, const int64_t s[3]) {
  int64_t o = i0 * shape.strides[0] + c * shape.strides[1];
  for (int d = 0; d + 2 < shape.rank; ++d) o += s[d] * shape.strides[2 + d];
  return o;
}

TensorShape shape_of(const ConvProblem& p, char t) {
  return t == 'x' ? p.x_shape() : t == 'w' ? p.w_shape() : p.y_shape();
}

// B (rewritten) from A (original) by scattering each element of A.
std::vector<double> naive_to_rewritten(const Rewrite& r, char t, const std::vector<double>& a) {
  const TensorShape as = shape_of(r.original, t), bs = shape_of(r.rewritten, t);
  const int dims = r.original.spatial_dims;
  const int64_t b = t == 'y' ? 1 : r.spec.block;
  std::vector<double> out(static_cast<size_t>(bs.span_elements()), 0.0);
  int64_t s[3] = {0, 0, 0};
  for (int64_t i0 = 0; i0 < as.dims[0]; ++i0)
    for (int64_t c = 0; c < as.dims[1]; ++c)
      for (s[0] = 0; s[0] < (dims > 0 ? as.dims[2] : 1); ++s[0])
        for (s[1] = 0; s[1] < (dims > 1 ? as.dims[3] : 1); ++s[1])
          for (s[2] = 0; s[2] < (dims > 2 ? as.dims[4] : 1); ++s[2]) {
            int64_t j[3] = {0, 0, 0};
            int64_t m = 0;
            bool inside = true;
            for (int d = 0; d < dims; ++d) {
              const int64_t pos = s[d] + (t == 'w' ? r.filter_offset[d] : 0);
              j[d] = pos / b;
              m = m * b + pos % b;
              inside = inside && j[d] < bs.dims[2 + d];
            }
            if (inside) out[at(bs, i0, m * as.dims[1] + c, j)] = a[at(as, i0, c, s)];
          }
  return out;
}

class TransformTwin : public ::testing::TestWithParam<const char*> {};

TEST_P(TransformTwin, MatchesNaiveLoopsBothWays) {
  auto p = parse_problem(GetParam());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const Rewrite& r : applicable_rewrites(*p)) {
    for (char t : {'x', 'w', 'y'}) {
      if (!r.transforms(t)) continue;
      const TensorShape as = shape_of(r.original, t);
      std::vector<double> a(static_cast<size_t>(as.span_elements()));
      for (double& v : a) v = u(rng);
      std::vector<double> b(static_cast<size_t>(shape_of(r.rewritten, t).span_elements()), 9.0);
      ASSERT_TRUE(transform_host(r, t, true, DataType::kDouble, a.data(), b.data()).ok());
      EXPECT_EQ(b, naive_to_rewritten(r, t, a)) << r.name() << " " << t;
      // Back: every original element that the rewritten tensor holds comes back, scaled; the
      // ones cropped away (never read by the rewritten problem) get alpha * 0 + beta * old.
      std::vector<double> back = a;
      ASSERT_TRUE(transform_host(r, t, false, DataType::kDouble, b.data(), back.data(), 2.0, 0.5).ok());
      std::vector<double> marks(a.size(), 1.0), marks_b;
      marks_b = naive_to_rewritten(r, t, marks);  // 1 where an original element landed
      double landed = 0;
      for (double v : marks_b) landed += v;
      int64_t held = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const bool same = back[i] == 2.5 * a[i];
        const bool cropped = back[i] == 0.5 * a[i];
        EXPECT_TRUE(same || cropped) << r.name() << " " << t << " at " << i;
        held += same ? 1 : 0;
      }
      EXPECT_EQ(static_cast<double>(held), landed) << r.name() << " " << t;
    }
  }
}

// The kernel's fast path (FastWalk: an odometer and division by multiplication) gives the same
// source as source_offset() for every element, walked as the kernel walks (start, then next).
template <int kRank, bool kLast>
void expect_fast_walk_matches(const rewrites::TransformDesc& desc, const std::string& what) {
  rewrites::TransformDesc t = desc;
  rewrites::prepare_fast(t);
  rewrites::FastWalk<kRank, kLast> walk;
  walk.start(t, 0);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < t.dst_elements; ++i) {
    if (i % 8 == 0) walk.start(t, static_cast<uint32_t>(i));  // a thread's first element
    mismatches += walk.source(t) != rewrites::source_offset(t, i) ? 1 : 0;
    walk.next(t);
  }
  EXPECT_EQ(mismatches, 0) << what;
}

template <bool kLast>
void expect_fast_walk_matches(const rewrites::TransformDesc& t, const std::string& what) {
  switch (t.spatial_dims) {
    case 1: return expect_fast_walk_matches<3, kLast>(t, what);
    case 2: return expect_fast_walk_matches<4, kLast>(t, what);
    default: return expect_fast_walk_matches<5, kLast>(t, what);
  }
}

TEST_P(TransformTwin, KernelFastPathMatchesTheGenericGather) {
  auto p = parse_problem(GetParam());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  for (const Rewrite& r : applicable_rewrites(*p)) {
    for (char t : {'x', 'w', 'y'}) {
      if (!r.transforms(t)) continue;
      for (bool to : {true, false}) {
        const rewrites::TransformDesc d = rewrites::transform_desc(r, t, to, 1.0, 0.0);
        const std::string what = r.name() + " " + t + (to ? " to" : " from");
        if (p->layout == Layout::kChannelsLast) {
          expect_fast_walk_matches<true>(d, what);
        } else {
          expect_fast_walk_matches<false>(d, what);
        }
      }
    }
  }
}

TEST(FastDiv, DividesLikeTheHardware) {
  std::mt19937_64 rng(5);
  for (uint32_t d : {1u, 2u, 3u, 5u, 7u, 12u, 48u, 112u, 224u, 1000u, 65537u, 123456789u}) {
    const rewrites::FastDiv f = rewrites::make_fast_div(d);
    for (int i = 0; i < 20000; ++i) {
      const uint32_t n = static_cast<uint32_t>(rng() % (uint64_t{1} << 31));
      ASSERT_EQ(rewrites::fast_div(f, n), n / d) << n << " / " << d;
    }
    for (uint32_t n : {0u, d - 1, d, 2 * d - 1, 0x7fffffffu}) {
      ASSERT_EQ(rewrites::fast_div(f, n), n / d) << n << " / " << d;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Problems, TransformTwin,
    ::testing::Values("mb2ic3ih9iw7oc5kh5kw3sh2sw2ph2pw1rh1rw0",
                      "layout:nhwc/mb2ic3ih9iw7oc5kh5kw3sh2sw2ph2pw1rh1rw0",
                      "layout:nhwc/mb1ic2id6ih5iw7oc3kd3kh3kw3sd2sh2sw2pd1ph0pw1",
                      "mb3ic1iw23oc4kw11sw4pw5rw2",
                      "dir:bwd_data,layout:nhwc/mb2ic3ih11iw11oc7kh7kw7sh4sw4ph3pw3",
                      "dir:bwd_filter/mb2ic5ih8iw8oc3kh2kw2sh2sw2"));

TEST(TransformTwin, HalfTypesRoundOnceAndZeroFill) {
  auto p = parse_problem("dt:bf16,layout:nhwc/mb1ic3ih5iw5oc4kh3kw3sh2sw2ph1pw1");
  ASSERT_TRUE(p.ok());
  auto r = make_rewrite(*p, {2, 1, 1});
  ASSERT_TRUE(r.ok());
  std::vector<uint16_t> x(static_cast<size_t>(p->x_shape().span_elements()), 0x3f80);  // 1.0
  std::vector<uint16_t> b(static_cast<size_t>(r->rewritten.x_shape().span_elements()), 0xffff);
  ASSERT_TRUE(transform_host(*r, 'x', true, DataType::kBFloat16, x.data(), b.data()).ok());
  int64_t ones = 0, zeros = 0, others = 0;
  for (uint16_t v : b) ++(v == 0x3f80 ? ones : v == 0 ? zeros : others);
  EXPECT_EQ(ones, p->x_shape().elements());  // every element once, the rest zeros
  EXPECT_EQ(others, 0);
}

}  // namespace
}  // namespace convplan
