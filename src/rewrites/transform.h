// One transform of a rewrite, as plain data shared by the CUDA kernel and its host twin: a gather
// between an original tensor A (logical dims d0, channels, spatial...) and the rewritten tensor B
// (d0', channels', spatial'...), where B's channel index is m * A.channels + c, m the row-major
// flat index of the offsets (m_0, m_1, m_2) over the spatial dimensions (m_d < window[d]), and
// spatial index j of B with offset m_d covers A's index j * step[d] + m_d - offset[d].
// Space-to-depth has step = window = block; an unfolded dimension has step = the stride and
// window = the filter's width, so that windows overlap (only to_rewritten, then). B's channels
// beyond A.channels * prod(window), d0 beyond A's d0 and the positions that fall outside A are
// zeros.
//
// C++17 and free of convplan's C++20 headers, so that nvcc compiles it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CONVPLAN_HD __host__ __device__ __forceinline__
#define CONVPLAN_UNROLL _Pragma("unroll")
#else
#define CONVPLAN_HD inline
#define CONVPLAN_UNROLL
#endif

namespace convplan::rewrites {

inline constexpr int kMaxRank = 5;

// Division by a fixed 32-bit divisor as a multiply-high and a shift (Granlund and Montgomery, as
// in CUTLASS's FastDivmod): the transform kernel divides several times per element, and a
// hardware-free 32-bit division costs about 20 instructions. REQUIRES: dividends < 2^31.
struct FastDiv {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;
};

inline FastDiv make_fast_div(uint32_t d) {
  FastDiv f;
  f.divisor = d;
  uint32_t s = 0;
  while ((uint64_t{1} << s) < d) ++s;
  f.shift = s;
  f.multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
  return f;
}

CONVPLAN_HD uint32_t fast_div(const FastDiv& f, uint32_t n) {
#if defined(__CUDA_ARCH__)
  const uint32_t hi = __umulhi(n, f.multiplier);
#else
  const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * f.multiplier) >> 32);
#endif
  return (hi + n) >> f.shift;
}

// Element type of a transform: what alpha and beta are applied in (copies move bytes only).
enum class ElemType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3 };

struct TransformDesc {
  bool to_rewritten = true;  // true: dst = B gathered from A; false: dst = A gathered from B
  ElemType elem = ElemType::kF32;
  int32_t elem_bytes = 4;
  int32_t spatial_dims = 2;
  // Per spatial dimension: the stride of B's index in A's, how many offsets it takes (the factor
  // of the channels), and the shift, >= 0. !to_rewritten requires step == window.
  int32_t step[3] = {1, 1, 1};
  int32_t window[3] = {1, 1, 1};
  int64_t offset[3] = {0, 0, 0};
  // Logical dims (d0, channels, spatial...) and element strides of A and B; both packed.
  int64_t a_dims[kMaxRank] = {1, 1, 1, 1, 1};
  int64_t a_strides[kMaxRank] = {0, 0, 0, 0, 0};
  int64_t b_dims[kMaxRank] = {1, 1, 1, 1, 1};
  int64_t b_strides[kMaxRank] = {0, 0, 0, 0, 0};
  // The destination's dims in memory order (outermost first) and the logical index of each.
  int64_t dst_mem_dims[kMaxRank] = {1, 1, 1, 1, 1};
  int32_t dst_mem_to_logical[kMaxRank] = {0, 1, 2, 3, 4};
  int64_t dst_elements = 0;
  // Only for !to_rewritten: dst = alpha * gathered + beta * dst (plain copy when 1 and 0).
  double alpha = 1.0;
  double beta = 0.0;
  // The fast path's divisors (prepare_fast()): the destination's memory-order dims, A's
  // channels, each dimension's step and window.
  FastDiv mem_div[kMaxRank];
  FastDiv channel_div;
  FastDiv step_div[3];
  FastDiv window_div[3];
  bool scaled() const { return alpha != 1.0 || beta != 0.0; }
};

// Fills the fast path's divisors. REQUIRES: every dim and offset fits in 31 bits.
inline void prepare_fast(TransformDesc& t) {
  for (int i = 0; i < kMaxRank; ++i)
    t.mem_div[i] = make_fast_div(static_cast<uint32_t>(t.dst_mem_dims[i]));
  t.channel_div = make_fast_div(static_cast<uint32_t>(t.a_dims[1]));
  for (int d = 0; d < 3; ++d) {
    t.step_div[d] = make_fast_div(static_cast<uint32_t>(t.step[d]));
    t.window_div[d] = make_fast_div(static_cast<uint32_t>(t.window[d]));
  }
}

// The source element offset of destination element `linear` (its offset in the packed
// destination), or -1 where the destination element is a zero.
// Index is int64_t, or uint32_t where every offset fits (the kernel's fast path: 32-bit division
// costs a third of 64-bit division on the GPU).
template <typename Index = int64_t>
CONVPLAN_HD int64_t source_offset(const TransformDesc& t, Index linear) {
  const int rank = t.spatial_dims + 2;
  Index coord[kMaxRank] = {0, 0, 0, 0, 0};
  for (int i = rank - 1; i >= 0; --i) {
    const Index d = static_cast<Index>(t.dst_mem_dims[i]);
    coord[t.dst_mem_to_logical[i]] = linear % d;
    linear /= d;
  }
  const Index a_channels = static_cast<Index>(t.a_dims[1]);
  int64_t src = 0;
  if (t.to_rewritten) {
    if (coord[0] >= static_cast<Index>(t.a_dims[0])) return -1;
    Index m = coord[1] / a_channels;
    const Index c = coord[1] - m * a_channels;
    // m is row-major over the spatial dims: the last dimension's offset varies fastest.
    int64_t h[3] = {0, 0, 0};
    for (int d = t.spatial_dims - 1; d >= 0; --d) {
      const Index window = static_cast<Index>(t.window[d]);
      const Index md = m % window;
      m /= window;
      h[d] = static_cast<int64_t>(coord[2 + d] * static_cast<Index>(t.step[d]) + md) - t.offset[d];
      if (h[d] < 0 || h[d] >= t.a_dims[2 + d]) return -1;
    }
    if (m != 0) return -1;  // a padding channel beyond channels * prod(window)
    src =
        static_cast<int64_t>(coord[0]) * t.a_strides[0] + static_cast<int64_t>(c) * t.a_strides[1];
    for (int d = 0; d < t.spatial_dims; ++d) src += h[d] * t.a_strides[2 + d];
    return src;
  }
  Index m = 0;
  src = static_cast<int64_t>(coord[0]) * t.b_strides[0];
  for (int d = 0; d < t.spatial_dims; ++d) {
    const Index block = static_cast<Index>(t.step[d]);  // == window[d] here
    const Index pos = coord[2 + d] + static_cast<Index>(t.offset[d]);
    const Index j = pos / block;
    if (j >= static_cast<Index>(t.b_dims[2 + d])) return -1;  // cropped: no gradient reaches it
    m = m * block + (pos - j * block);
    src += static_cast<int64_t>(j) * t.b_strides[2 + d];
  }
  return src + static_cast<int64_t>(m * a_channels + coord[1]) * t.b_strides[1];
}

// The fast path, what the kernel runs where every offset fits in 31 bits: a thread walks
// consecutive destination elements with an odometer over the memory-order coordinates (one
// decomposition per thread) and divides by multiplication. kRank and kLast (channels-last) are
// compile-time so that the coordinates stay in registers. Equal to source_offset() (a CPU test
// checks every element of several transforms).
template <int kRank, bool kLast>
struct FastWalk {
  uint32_t mem[kRank];  // destination coordinates in memory order

  CONVPLAN_HD void start(const TransformDesc& t, uint32_t linear) {
    CONVPLAN_UNROLL
    for (int i = kRank - 1; i >= 0; --i) {
      const uint32_t q = fast_div(t.mem_div[i], linear);
      mem[i] = linear - q * t.mem_div[i].divisor;
      linear = q;
    }
  }
  CONVPLAN_HD void next(const TransformDesc& t) {
    ++mem[kRank - 1];
    CONVPLAN_UNROLL
    for (int i = kRank - 1; i > 0; --i) {
      if (mem[i] == t.mem_div[i].divisor) {
        mem[i] = 0;
        ++mem[i - 1];
      }
    }
  }
  // Logical index l's coordinate: memory order is (d0, c, s...) or (d0, s..., c).
  CONVPLAN_HD uint32_t logical(int l) const {
    if (!kLast || l == 0) return mem[l];
    return l == 1 ? mem[kRank - 1] : mem[l - 1];
  }
  CONVPLAN_HD int64_t source(const TransformDesc& t) const {
    constexpr int kSpatial = kRank - 2;
    if (t.to_rewritten) {
      if (logical(0) >= static_cast<uint32_t>(t.a_dims[0])) return -1;
      uint32_t m = fast_div(t.channel_div, logical(1));
      const uint32_t c = logical(1) - m * t.channel_div.divisor;
      int64_t src = static_cast<int64_t>(logical(0)) * t.a_strides[0] +
                    static_cast<int64_t>(c) * t.a_strides[1];
      CONVPLAN_UNROLL
      for (int d = kSpatial - 1; d >= 0; --d) {
        const uint32_t q = fast_div(t.window_div[d], m);
        const int64_t h = static_cast<int64_t>(logical(2 + d) * t.step_div[d].divisor +
                                               (m - q * t.window_div[d].divisor)) -
                          t.offset[d];
        m = q;
        if (h < 0 || h >= t.a_dims[2 + d]) return -1;
        src += h * t.a_strides[2 + d];
      }
      return m != 0 ? -1 : src;
    }
    uint32_t m = 0;
    int64_t src = static_cast<int64_t>(logical(0)) * t.b_strides[0];
    CONVPLAN_UNROLL
    for (int d = 0; d < kSpatial; ++d) {
      const uint32_t block = t.step_div[d].divisor;  // == window[d] here
      const uint32_t pos = logical(2 + d) + static_cast<uint32_t>(t.offset[d]);
      const uint32_t j = fast_div(t.step_div[d], pos);
      if (j >= static_cast<uint32_t>(t.b_dims[2 + d])) return -1;
      m = m * block + (pos - j * block);
      src += static_cast<int64_t>(j) * t.b_strides[2 + d];
    }
    return src + static_cast<int64_t>(m * t.channel_div.divisor + logical(1)) * t.b_strides[1];
  }
};

}  // namespace convplan::rewrites
