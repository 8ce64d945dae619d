// The host twin of the transform kernels against naive loops written the other way round: a
// scatter from every original element to where space-to-depth puts it (the twin gathers).
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "convplan/rewrite.h"
#include "rewrites/rewrite_internal.h"
#include "rewrites/row_stage.h"

namespace convplan {
namespace {

// Elements a tensor of these dims and strides spans.
int64_t span_of(const int64_t* dims, const int64_t* strides) {
  int64_t last = 0;
  for (int i = 0; i < rewrites::kMaxRank; ++i) last += (dims[i] - 1) * strides[i];
  return last + 1;
}

// Offset of logical element (i0, c, s0, s1, s2) in `shape` (a 1-3 D tensor; missing dims are 0).
int64_t at(const TensorShape& shape, int64_t i0, int64_t c, const int64_t s[3]) {
  int64_t o = i0 * shape.strides[0] + c * shape.strides[1];
  for (int d = 0; d + 2 < shape.rank; ++d) o += s[d] * shape.strides[2 + d];
  return o;
}

// Where the element at original position `pos` of spatial dimension d lands in B: (j, m) pairs.
// Blocked: one; unfolded x: every output position whose window holds it; unfolded w: its tap.
std::vector<std::pair<int64_t, int64_t>> landings(const Rewrite& r, TensorRole t, int d,
                                                  int64_t pos) {
  const ConvProblem& p = r.original;
  if (t == TensorRole::kY) return {{pos, 0}};
  if (!r.spec.unfold || d != p.spatial_dims - 1) {
    const int64_t b = r.spec.block;
    const int64_t shifted = pos + (t == TensorRole::kW ? r.filter_offset[d] : 0);
    return {{shifted / b, shifted % b}};
  }
  if (t == TensorRole::kW) return {{0, pos}};
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t o = 0; o < p.output()[d]; ++o) {
    const int64_t tap = pos + p.pad_before[d] - o * p.stride[d];
    if (tap >= 0 && tap < p.filter[d]) out.push_back({o, tap});
  }
  return out;
}

// The factor of the channels that dimension d contributes (the m_d's extent).
int64_t window_of(const Rewrite& r, TensorRole t, int d) {
  if (t == TensorRole::kY) return 1;
  return r.spec.unfold && d == r.original.spatial_dims - 1 ? r.original.filter[d] : r.spec.block;
}

// B (rewritten) from A (original) by scattering each element of A to every place it lands.
std::vector<double> naive_to_rewritten(const Rewrite& r, TensorRole t,
                                       const std::vector<double>& a) {
  const TensorShape as = r.original.shape_of(t), bs = r.rewritten.shape_of(t);
  const int dims = r.original.spatial_dims;
  std::vector<double> out(static_cast<size_t>(bs.span_elements()), 0.0);
  int64_t s[3] = {0, 0, 0};
  for (int64_t i0 = 0; i0 < as.dims[0]; ++i0)
    for (int64_t c = 0; c < as.dims[1]; ++c)
      for (s[0] = 0; s[0] < (dims > 0 ? as.dims[2] : 1); ++s[0])
        for (s[1] = 0; s[1] < (dims > 1 ? as.dims[3] : 1); ++s[1])
          for (s[2] = 0; s[2] < (dims > 2 ? as.dims[4] : 1); ++s[2]) {
            std::vector<std::pair<int64_t, int64_t>> l[3] = {{{0, 0}}, {{0, 0}}, {{0, 0}}};
            for (int d = 0; d < dims; ++d) l[d] = landings(r, t, d, s[d]);
            for (const auto& l0 : l[0])
              for (const auto& l1 : l[1])
                for (const auto& l2 : l[2]) {
                  const std::pair<int64_t, int64_t> at_d[3] = {l0, l1, l2};
                  int64_t j[3] = {0, 0, 0};
                  int64_t m = 0;
                  bool inside = true;
                  for (int d = 0; d < dims; ++d) {
                    j[d] = at_d[d].first;
                    m = m * window_of(r, t, d) + at_d[d].second;
                    inside = inside && j[d] < bs.dims[2 + d];
                  }
                  if (inside) out[at(bs, i0, m * as.dims[1] + c, j)] = a[at(as, i0, c, s)];
                }
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
    for (TensorRole t : kTensorRoles) {
      if (!r.transforms(t)) continue;
      const TensorShape as = r.original.shape_of(t);
      std::vector<double> a(static_cast<size_t>(as.span_elements()));
      for (double& v : a) v = u(rng);
      std::vector<double> b(static_cast<size_t>(r.rewritten.shape_of(t).span_elements()), 9.0);
      ASSERT_TRUE(transform_host(r, t, true, DataType::kDouble, a.data(), b.data()).ok());
      EXPECT_EQ(b, naive_to_rewritten(r, t, a)) << r.name() << " " << to_string(t);
      if (r.spec.unfold) continue;  // windows overlap: nothing is mapped back (forward only)
      // Back: every original element that the rewritten tensor holds comes back, scaled; the
      // ones cropped away (never read by the rewritten problem) get alpha * 0 + beta * old.
      std::vector<double> back = a;
      ASSERT_TRUE(
          transform_host(r, t, false, DataType::kDouble, b.data(), back.data(), 2.0, 0.5).ok());
      std::vector<double> marks(a.size(), 1.0), marks_b;
      marks_b = naive_to_rewritten(r, t, marks);  // 1 where an original element landed
      double landed = 0;
      for (double v : marks_b) landed += v;
      int64_t held = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const bool same = back[i] == 2.5 * a[i];
        const bool cropped = back[i] == 0.5 * a[i];
        EXPECT_TRUE(same || cropped) << r.name() << " " << to_string(t) << " at " << i;
        held += same ? 1 : 0;
      }
      EXPECT_EQ(static_cast<double>(held), landed) << r.name() << " " << to_string(t);
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
    for (TensorRole t : kTensorRoles) {
      if (!r.transforms(t)) continue;
      for (bool to : {true, false}) {
        if (!to && r.spec.unfold) continue;  // forward only
        const rewrites::TransformDesc d = rewrites::transform_desc(r, t, to, 1.0, 0.0);
        const std::string what = r.name() + " " + to_string(t) + (to ? " to" : " from");
        if (p->layout == Layout::kChannelsLast) {
          expect_fast_walk_matches<true>(d, what);
        } else {
          expect_fast_walk_matches<false>(d, what);
        }
      }
    }
  }
}

// The row-staged kernel (row_stage.h), emulated on the host tile by tile through the kernel's own
// index functions, writes every destination element as source_offset() says, for element sizes
// 2, 4 and 8 (16-byte vectors of 8, 4 and 2 elements). Returns whether the fast path applied.
bool expect_row_staged_matches(const rewrites::TransformDesc& desc, int32_t elem_bytes,
                               const std::string& what, int32_t min_tiles = 1) {
  rewrites::TransformDesc t = desc;
  t.elem_bytes = elem_bytes;
  rewrites::prepare_fast(t);
  rewrites::RowPlan plan;
  if (!rewrites::make_row_plan(t, 0x1000, 0x2000, &plan, min_tiles)) return false;
  const int64_t src_elements =
      t.to_rewritten ? span_of(t.a_dims, t.a_strides) : span_of(t.b_dims, t.b_strides);
  std::vector<unsigned char> src(static_cast<size_t>(src_elements * elem_bytes));
  std::mt19937 rng(11);
  for (unsigned char& b : src) b = static_cast<unsigned char>(rng() | 1);  // no zero bytes
  std::vector<unsigned char> got(static_cast<size_t>(t.dst_elements * elem_bytes), 0xee);
  rewrites::emulate_row_staged(t, plan, src.data(), got.data());
  int64_t mismatches = 0;
  for (int64_t i = 0; i < t.dst_elements; ++i) {
    const int64_t from = rewrites::source_offset(t, i);
    for (int32_t k = 0; k < elem_bytes; ++k) {
      const unsigned char want = from < 0 ? 0 : src[static_cast<size_t>(from * elem_bytes + k)];
      mismatches += got[static_cast<size_t>(i * elem_bytes + k)] != want ? 1 : 0;
    }
  }
  EXPECT_EQ(mismatches, 0) << what << " elem_bytes=" << elem_bytes << " rows=" << plan.rows
                           << " R=" << plan.rows_per_tile << " S=" << plan.staged;
  return true;
}

TEST_P(TransformTwin, RowStagedFastPathMatchesTheGenericGather) {
  auto p = parse_problem(GetParam());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  int applied = 0;
  for (const Rewrite& r : applicable_rewrites(*p)) {
    for (TensorRole t : kTensorRoles) {
      if (!r.transforms(t)) continue;
      for (bool to : {true, false}) {
        if (!to && r.spec.unfold) continue;  // forward only
        const rewrites::TransformDesc d = rewrites::transform_desc(r, t, to, 1.0, 0.0);
        for (int32_t e : {2, 4, 8}) {
          applied += expect_row_staged_matches(
                         d, e, r.name() + " " + to_string(t) + (to ? " to" : " from"))
                         ? 1
                         : 0;
        }
      }
    }
  }
  // Channels-last problems all have some transform whose rows split into vectors of 2.
  if (p->layout == Layout::kChannelsLast) {
    EXPECT_GT(applied, 0) << "the row-staged path never applied";
  } else {
    EXPECT_EQ(applied, 0) << "channels-first is not row-staged";
  }
}

// The bench's cases (the stems, small batch) take the row-staged path and stay exact; a
// misaligned destination, alpha/beta or channels-first fall back to the gather.
TEST(RowStaged, CoversTheStemsAndFallsBackElsewhere) {
  struct Case {
    const char* problem;
    const char* rewrite;
    bool to;
  };
  const Case cases[] = {
      {"dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2", true},
      {"dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2c8", true},
      {"dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "c4", true},
      {"dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2uc32", true},
      {"dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh11kw11sh4sw4ph2pw2", "s2d2uc32", true},
      {"dir:bwd_data,dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3", "s2d2", false},
      {"dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh11kw11sh4sw4ph2pw2", "s2d4", true},
      {"dir:bwd_data,dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh11kw11sh4sw4ph2pw2", "s2d4", false},
      {"dt:bf16,layout:nhwc/mb1ic3id16ih56iw56oc32kd3kh7kw7sd2sh2sw2pd1ph3pw3", "s2d2", true},
      {"dir:bwd_data,dt:bf16,layout:nhwc/mb1ic3id16ih56iw56oc32kd3kh7kw7sd2sh2sw2pd1ph3pw3", "s2d2",
       false},
  };
  for (const Case& c : cases) {
    auto p = parse_problem(c.problem);
    auto spec = RewriteSpec::parse(c.rewrite);
    ASSERT_TRUE(p.ok() && spec.ok()) << c.problem;
    auto r = make_rewrite(*p, *spec);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const rewrites::TransformDesc d = rewrites::transform_desc(*r, TensorRole::kX, c.to, 1.0, 0.0);
    EXPECT_TRUE(expect_row_staged_matches(d, 2, std::string(c.problem) + " " + c.rewrite))
        << c.problem << " " << c.rewrite << ": not row-staged";
    rewrites::TransformDesc t = d;
    rewrites::prepare_fast(t);
    rewrites::RowPlan plan;
    EXPECT_FALSE(rewrites::make_row_plan(t, 0x1000, 0x2002, &plan)) << "misaligned destination";
    EXPECT_TRUE(rewrites::make_row_plan(t, 0x1002, 0x2000, &plan));
    EXPECT_EQ(plan.load_unit, 2) << "a misaligned source is staged element by element";
  }
  auto p = parse_problem("dir:bwd_data,dt:bf16,layout:nhwc/mb2ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3");
  ASSERT_TRUE(p.ok());
  auto r = make_rewrite(*p, {2, 1, 1});
  ASSERT_TRUE(r.ok());
  rewrites::TransformDesc scaled = rewrites::transform_desc(*r, TensorRole::kX, false, 1.0, 1.0);
  rewrites::prepare_fast(scaled);
  rewrites::RowPlan plan;
  EXPECT_FALSE(rewrites::make_row_plan(scaled, 0x1000, 0x2000, &plan)) << "alpha/beta";
  auto nchw = parse_problem("dt:bf16/mb2ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3");
  ASSERT_TRUE(nchw.ok());
  auto rn = make_rewrite(*nchw, {2, 1, 1});
  ASSERT_TRUE(rn.ok());
  rewrites::TransformDesc first = rewrites::transform_desc(*rn, TensorRole::kX, true, 1.0, 0.0);
  rewrites::prepare_fast(first);
  EXPECT_FALSE(rewrites::make_row_plan(first, 0x1000, 0x2000, &plan)) << "channels-first";
}

// A small tensor (the stem's filter: 256 rows that made 2 tiles) is spread over min_tiles tiles
// (the launch passes twice the multiprocessors) and stays exact; a large one keeps its tile size.
TEST(RowStaged, FewRowsSpreadOverMinTiles) {
  auto p = parse_problem("dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3");
  ASSERT_TRUE(p.ok());
  auto r = make_rewrite(*p, {2, 1, 1});
  ASSERT_TRUE(r.ok());
  rewrites::TransformDesc w = rewrites::transform_desc(*r, TensorRole::kW, true, 1.0, 0.0);
  rewrites::prepare_fast(w);
  rewrites::RowPlan one, spread;
  ASSERT_TRUE(rewrites::make_row_plan(w, 0x1000, 0x2000, &one));
  ASSERT_TRUE(rewrites::make_row_plan(w, 0x1000, 0x2000, &spread, 264));
  EXPECT_LE((one.rows + one.rows_per_tile - 1) / one.rows_per_tile, 2);
  EXPECT_GE((spread.rows + spread.rows_per_tile - 1) / spread.rows_per_tile, 256);
  for (int32_t tiles : {7, 264}) {
    EXPECT_TRUE(
        expect_row_staged_matches(w, 2, "stem w, min_tiles " + std::to_string(tiles), tiles));
  }
  rewrites::TransformDesc x = rewrites::transform_desc(*r, TensorRole::kX, true, 1.0, 0.0);
  rewrites::prepare_fast(x);
  ASSERT_TRUE(rewrites::make_row_plan(x, 0x1000, 0x2000, &one));
  ASSERT_TRUE(rewrites::make_row_plan(x, 0x1000, 0x2000, &spread, 264));
  EXPECT_EQ(one.rows_per_tile, spread.rows_per_tile);
}

// The pipelined kernel's layout: for the stems' inputs (16-byte loads), two buffers and the
// column map within 48 KB; not where the loads would be narrower (a misaligned source, the stem's
// filter with rows of 42 bytes): those take the staged kernel.
TEST(RowStaged, PipelinedLayoutWhereLoadsAreSixteenBytes) {
  for (const char* text : {"dt:bf16,layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3",
                           "dt:bf16,layout:nhwc/mb64ic3ih224iw224oc64kh11kw11sh4sw4ph2pw2",
                           "layout:nhwc/mb256ic3ih224iw224oc64kh7kw7sh2sw2ph3pw3"}) {
    auto p = parse_problem(text);
    ASSERT_TRUE(p.ok());
    auto r = make_rewrite(*p, {2, 1, 1});
    ASSERT_TRUE(r.ok());
    rewrites::TransformDesc x = rewrites::transform_desc(*r, TensorRole::kX, true, 1.0, 0.0);
    rewrites::prepare_fast(x);
    rewrites::RowPlan plan;
    rewrites::PipeLayout l;
    ASSERT_TRUE(rewrites::make_row_plan(x, 0x1000, 0x2000, &plan, 264)) << text;
    ASSERT_TRUE(rewrites::make_pipe_layout(plan, x.elem_bytes, &l)) << text;
    EXPECT_LE(l.smem_bytes, rewrites::kMaxStageSmemBytes);
    EXPECT_GE(l.buffer_at, plan.dst_len * 4);  // the column map comes first
    EXPECT_EQ(l.buffer_bytes % 16, 0);
    EXPECT_EQ(l.stage_at % 16, 0);
    EXPECT_GE(l.buffer_bytes - l.stage_at,
              plan.rows_per_tile * plan.staged * plan.src_len * x.elem_bytes);
    ASSERT_TRUE(rewrites::make_row_plan(x, 0x1002, 0x2000, &plan, 264)) << text;
    EXPECT_FALSE(rewrites::make_pipe_layout(plan, x.elem_bytes, &l)) << "misaligned source";
    rewrites::TransformDesc w = rewrites::transform_desc(*r, TensorRole::kW, true, 1.0, 0.0);
    rewrites::prepare_fast(w);
    ASSERT_TRUE(rewrites::make_row_plan(w, 0x1000, 0x2000, &plan, 264)) << text;
    EXPECT_FALSE(rewrites::make_pipe_layout(plan, w.elem_bytes, &l)) << "the filter's rows";
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
                      "dir:bwd_filter/mb2ic5ih8iw8oc3kh2kw2sh2sw2",
                      // Rows that split into 16-byte vectors, so the row-staged path applies.
                      "layout:nhwc/mb3ic4ih10iw8oc6kh5kw3sh2sw2ph2pw1",
                      "dir:bwd_data,layout:nhwc/mb2ic2ih13iw16oc8kh7kw5sh2sw2ph3pw1",
                      "dir:bwd_filter,layout:nhwc/mb2ic1ih12iw16oc5kh4kw4sh4sw4ph1pw2",
                      "layout:nhwc/mb2ic3iw32oc4kw9sw4pw3",
                      "dir:bwd_data,layout:nhwc/mb1ic2id6ih8iw8oc4kd3kh3kw3sd2sh2sw2pd1ph1pw1"));

TEST(TransformTwin, HalfTypesRoundOnceAndZeroFill) {
  auto p = parse_problem("dt:bf16,layout:nhwc/mb1ic3ih5iw5oc4kh3kw3sh2sw2ph1pw1");
  ASSERT_TRUE(p.ok());
  auto r = make_rewrite(*p, {2, 1, 1});
  ASSERT_TRUE(r.ok());
  std::vector<uint16_t> x(static_cast<size_t>(p->x_shape().span_elements()), 0x3f80);  // 1.0
  std::vector<uint16_t> b(static_cast<size_t>(r->rewritten.x_shape().span_elements()), 0xffff);
  ASSERT_TRUE(
      transform_host(*r, TensorRole::kX, true, DataType::kBFloat16, x.data(), b.data()).ok());
  int64_t ones = 0, zeros = 0, others = 0;
  for (uint16_t v : b) ++(v == 0x3f80 ? ones : v == 0 ? zeros : others);
  EXPECT_EQ(ones, p->x_shape().elements());  // every element once, the rest zeros
  EXPECT_EQ(others, 0);
}

}  // namespace
}  // namespace convplan
