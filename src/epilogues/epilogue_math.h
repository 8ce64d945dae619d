// The epilogue's element work, shared word for word by the CUDA kernel (epilogue_kernels.cu) and
// its host twin (epilogue.cc), so that CPU tests exercise the kernel's own indexing and math:
// which channel each element of a vector belongs to, the tail, and every op of the chain.
//
// Plain C++17 (nvcc compiles it too; no convplan C++20 header here). Traits supply the storage
// type T, the compute type C (float, or double for f64 data) and the conversions. Internal to
// src/epilogues.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define CONVPLAN_HD __host__ __device__ __forceinline__
#else
#define CONVPLAN_HD inline
#endif

namespace convplan::epilogue_detail {

// The same numbering as PostOpKind (epilogue.cc asserts it).
enum EpilogueOp : uint8_t {
  kOpBias,
  kOpAdd,
  kOpRelu,
  kOpRelu6,
  kOpGelu,
  kOpGeluTanh,
  kOpSilu,
  kOpSigmoid,
  kOpTanh,
  kOpElu
};
inline constexpr int kEpilogueMaxOps = 8;   // kMaxPostOps
inline constexpr int kEpilogueMaxRank = 5;  // kMaxTensorRank

struct EpilogueParams {
  int op_count = 0;
  uint8_t ops[kEpilogueMaxOps] = {};
  double add_scale = 1.0;
  // Packed layouts (channels-first or channels-last): y and the residual are `elements`
  // contiguous values; the channel of element e is (e / channel_stride) % channels.
  bool packed = true;
  int64_t elements = 0;
  int64_t channels = 1;
  int64_t channel_stride = 1;  // 1 channels-last, the spatial size channels-first
  int64_t bias_stride = 1;     // between consecutive channels of the bias
  // Any other layout: element e (logical order N, C, spatial..., row-major) sits at the offset
  // sum(index[d] * strides[d]); its channel is index[1].
  int rank = 0;
  int64_t dims[kEpilogueMaxRank] = {};
  int64_t strides[kEpilogueMaxRank] = {};
};

template <typename C>
CONVPLAN_HD C epilogue_exp(C v) {
  if constexpr (sizeof(C) == 4)
    return expf(v);
  else
    return exp(v);
}
template <typename C>
CONVPLAN_HD C epilogue_tanh(C v) {
  if constexpr (sizeof(C) == 4)
    return tanhf(v);
  else
    return tanh(v);
}
template <typename C>
CONVPLAN_HD C epilogue_erf(C v) {
  if constexpr (sizeof(C) == 4)
    return erff(v);
  else
    return erf(v);
}
template <typename C>
CONVPLAN_HD C epilogue_expm1(C v) {
  if constexpr (sizeof(C) == 4)
    return expm1f(v);
  else
    return expm1(v);
}

// The chain on one value: bias is the element's channel's bias, residual its residual element
// (read by the caller only when the chain has that op).
template <typename C>
CONVPLAN_HD C apply_epilogue(const EpilogueParams& p, C v, C bias, C residual) {
  const C zero = C(0), one = C(1), half = C(0.5);
  for (int i = 0; i < p.op_count; ++i) {
    switch (p.ops[i]) {
      case kOpBias: v += bias; break;
      case kOpAdd: v += C(p.add_scale) * residual; break;
      case kOpRelu: v = v > zero ? v : zero; break;
      case kOpRelu6: v = v > zero ? (v < C(6) ? v : C(6)) : zero; break;
      case kOpGelu: v = half * v * (one + epilogue_erf(v * C(0.70710678118654752))); break;
      case kOpGeluTanh:
        v = half * v * (one + epilogue_tanh(C(0.7978845608028654) * (v + C(0.044715) * v * v * v)));
        break;
      case kOpSilu: v = v / (one + epilogue_exp(-v)); break;
      case kOpSigmoid: v = one / (one + epilogue_exp(-v)); break;
      case kOpTanh: v = epilogue_tanh(v); break;
      case kOpElu: v = v > zero ? v : epilogue_expm1(v); break;
      default: break;
    }
  }
  return v;
}

CONVPLAN_HD bool epilogue_has(const EpilogueParams& p, uint8_t op) {
  for (int i = 0; i < p.op_count; ++i)
    if (p.ops[i] == op) return true;
  return false;
}

// Elements [start, start + count) of a packed output, count <= Traits::kVector: loaded as one
// vector when count is whole (Traits::load_vector / store_vector), else one by one. The channel is
// found once and then stepped, so a vector costs one division however many channels it spans.
template <typename Traits, typename Index>
CONVPLAN_HD void epilogue_packed_span(const EpilogueParams& p, Index start, int count,
                                      typename Traits::T* y, const typename Traits::T* bias,
                                      const typename Traits::T* residual) {
  using T = typename Traits::T;
  using C = typename Traits::C;
  constexpr int V = Traits::kVector;
  const bool whole = count == V;
  // Whole vectors move as one 16-byte word. Zeroed: GCC 12 with -fsanitize=thread reports
  // -Wmaybe-uninitialized for res otherwise (it is read only where it was loaded).
  alignas(16) T vals[V]{};
  alignas(16) T res[V]{};
  const bool has_bias = bias != nullptr, has_add = residual != nullptr;
  if (whole) {
    Traits::load_vector(y + start, vals);
    if (has_add) Traits::load_vector(residual + start, res);
  } else {
    for (int i = 0; i < count; ++i) {
      vals[i] = y[start + i];
      if (has_add) res[i] = residual[start + i];
    }
  }
  const Index cs = static_cast<Index>(p.channel_stride), k = static_cast<Index>(p.channels);
  const Index q = start / cs;
  Index c = q % k, r = start - q * cs;
  for (int i = 0; i < count; ++i) {
    const C b = has_bias ? Traits::to_c(bias[c * static_cast<Index>(p.bias_stride)]) : C(0);
    const C rv = has_add ? Traits::to_c(res[i]) : C(0);
    vals[i] = Traits::from_c(apply_epilogue<C>(p, Traits::to_c(vals[i]), b, rv));
    if (++r == cs) {
      r = 0;
      if (++c == k) c = 0;
    }
  }
  if (whole) {
    Traits::store_vector(y + start, vals);
  } else {
    for (int i = 0; i < count; ++i) y[start + i] = vals[i];
  }
}

// Element e (in logical row-major order) of an output of any strides.
template <typename Traits>
CONVPLAN_HD void epilogue_strided_element(const EpilogueParams& p, int64_t e, typename Traits::T* y,
                                          const typename Traits::T* bias,
                                          const typename Traits::T* residual) {
  using C = typename Traits::C;
  int64_t off = 0, channel = 0, rest = e;
  for (int d = p.rank - 1; d >= 0; --d) {
    const int64_t i = rest % p.dims[d];
    rest /= p.dims[d];
    off += i * p.strides[d];
    if (d == 1) channel = i;
  }
  const C b = bias != nullptr ? Traits::to_c(bias[channel * p.bias_stride]) : C(0);
  const C r = residual != nullptr ? Traits::to_c(residual[off]) : C(0);
  y[off] = Traits::from_c(apply_epilogue<C>(p, Traits::to_c(y[off]), b, r));
}

}  // namespace convplan::epilogue_detail
