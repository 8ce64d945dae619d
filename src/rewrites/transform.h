// One transform of a rewrite, as plain data shared by the CUDA kernel and its host twin: a gather
// between an original tensor A (logical dims d0, channels, spatial...) and the rewritten tensor B
// (d0', channels', spatial'...), where B's channel index is m * A.channels + c, m the row-major
// flat index of the block offsets (m_0, m_1, m_2) over the spatial dimensions, and spatial index
// j of B covers A's index j * block + m - offset. B's channels beyond A.channels * block^D, d0
// beyond A's d0 and the positions that fall outside A are zeros.
//
// C++17 and free of convplan's C++20 headers, so that nvcc compiles it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CONVPLAN_HD __host__ __device__ __forceinline__
#else
#define CONVPLAN_HD inline
#endif

namespace convplan::rewrites {

inline constexpr int kMaxRank = 5;

// Element type of a transform: what alpha and beta are applied in (copies move bytes only).
enum class ElemType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3 };

struct TransformDesc {
  bool to_rewritten = true;  // true: dst = B gathered from A; false: dst = A gathered from B
  ElemType elem = ElemType::kF32;
  int32_t elem_bytes = 4;
  int32_t spatial_dims = 2;
  int32_t block = 1;
  int64_t offset[3] = {0, 0, 0};  // per spatial dimension, >= 0
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
  bool scaled() const { return alpha != 1.0 || beta != 0.0; }
};

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
  const Index block = static_cast<Index>(t.block);
  int64_t src = 0;
  if (t.to_rewritten) {
    if (coord[0] >= static_cast<Index>(t.a_dims[0])) return -1;
    Index m = coord[1] / a_channels;
    const Index c = coord[1] - m * a_channels;
    // m is row-major over the spatial dims: the last dimension's offset varies fastest.
    int64_t h[3] = {0, 0, 0};
    for (int d = t.spatial_dims - 1; d >= 0; --d) {
      const Index md = m % block;
      m /= block;
      h[d] = static_cast<int64_t>(coord[2 + d] * block + md) - t.offset[d];
      if (h[d] < 0 || h[d] >= t.a_dims[2 + d]) return -1;
    }
    if (m != 0) return -1;  // a padding channel beyond channels * block^D
    src = static_cast<int64_t>(coord[0]) * t.a_strides[0] + static_cast<int64_t>(c) * t.a_strides[1];
    for (int d = 0; d < t.spatial_dims; ++d) src += h[d] * t.a_strides[2 + d];
    return src;
  }
  Index m = 0;
  src = static_cast<int64_t>(coord[0]) * t.b_strides[0];
  for (int d = 0; d < t.spatial_dims; ++d) {
    const Index pos = coord[2 + d] + static_cast<Index>(t.offset[d]);
    const Index j = pos / block;
    if (j >= static_cast<Index>(t.b_dims[2 + d])) return -1;  // cropped: no gradient reaches it
    m = m * block + (pos - j * block);
    src += static_cast<int64_t>(j) * t.b_strides[2 + d];
  }
  return src + static_cast<int64_t>(m * a_channels + coord[1]) * t.b_strides[1];
}

}  // namespace convplan::rewrites
