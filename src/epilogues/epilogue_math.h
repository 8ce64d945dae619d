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

// nvcc unrolls the loops over a vector's elements (so that its arrays stay in registers); the
// host compiler has no such pragma.
#if defined(__CUDA_ARCH__)
#define CONVPLAN_UNROLL _Pragma("unroll")
#else
#define CONVPLAN_UNROLL
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

// One op of the chain on one value. The kernels call it with a compile-time op (the generic one
// through epilogue_op_on_span, the fixed ones through their chain), the element-wise path with the
// op read at run time: the same expression every way, so that all compile to the same arithmetic
// and their outputs agree byte for byte.
template <typename C>
CONVPLAN_HD C apply_epilogue_op(uint8_t op, C v, C bias, C residual, C add_scale) {
  const C zero = C(0), one = C(1), half = C(0.5);
  switch (op) {
    case kOpBias: return v + bias;
    case kOpAdd: return v + add_scale * residual;
    case kOpRelu: return v > zero ? v : zero;
    case kOpRelu6: return v > zero ? (v < C(6) ? v : C(6)) : zero;
    case kOpGelu: return half * v * (one + epilogue_erf(v * C(0.70710678118654752)));
    case kOpGeluTanh:
      return half * v *
             (one + epilogue_tanh(C(0.7978845608028654) * (v + C(0.044715) * v * v * v)));
    case kOpSilu: return v / (one + epilogue_exp(-v));
    case kOpSigmoid: return one / (one + epilogue_exp(-v));
    case kOpTanh: return epilogue_tanh(v);
    case kOpElu: return v > zero ? v : epilogue_expm1(v);
    default: return v;
  }
}

// The chain on one value (the element-wise path): bias is the element's channel's bias, residual
// its residual element (read by the caller only when the chain has that op).
template <typename C>
CONVPLAN_HD C apply_epilogue(const EpilogueParams& p, C v, C bias, C residual) {
  const C scale = C(p.add_scale);
  for (int i = 0; i < p.op_count; ++i) v = apply_epilogue_op<C>(p.ops[i], v, bias, residual, scale);
  return v;
}

CONVPLAN_HD bool epilogue_has(const EpilogueParams& p, uint8_t op) {
  for (int i = 0; i < p.op_count; ++i)
    if (p.ops[i] == op) return true;
  return false;
}

// A packed output goes a vector (Traits::kVector elements, 16 bytes) at a time, in steps that the
// kernel and its host twin share: load y's values (and the residual's), then apply the chain
// (finding the vector's biases at the bias op) and store (epilogue_finish_span). The kernel loads
// several vectors before it finishes any, to keep more loads in flight. A span is a whole vector
// or the last, partial one (count < kVector elements, moved one by one). Every loop runs over all
// kVector elements, so that the arrays stay in registers on the device (an index known only at
// run time would put them in local memory); a partial span's elements past its count are computed
// from whatever the caller put there and never stored.
template <typename Traits, typename Index>
CONVPLAN_HD void epilogue_load_span(Index start, int count, const typename Traits::T* y,
                                    const typename Traits::T* residual, typename Traits::T* vals,
                                    typename Traits::T* res) {
  constexpr int V = Traits::kVector;
  if (count == V) {
    Traits::load_vector(y + start, vals);
    if (residual != nullptr) Traits::load_vector(residual + start, res);
    return;
  }
  CONVPLAN_UNROLL
  for (int i = 0; i < V; ++i) {
    if (i < count) {
      vals[i] = y[start + i];
      if (residual != nullptr) res[i] = residual[start + i];
    }
  }
}

template <typename Traits, typename Index>
CONVPLAN_HD void epilogue_store_span(Index start, int count, typename Traits::T* y,
                                     const typename Traits::T* vals) {
  constexpr int V = Traits::kVector;
  if (count == V) {
    Traits::store_vector(y + start, vals);
    return;
  }
  CONVPLAN_UNROLL
  for (int i = 0; i < V; ++i)
    if (i < count) y[start + i] = vals[i];
}

// The biases of the vector from `start` (past the output's end too: the channel wraps, so every
// read is in bounds). The channel is found once, so that a vector costs one division however many
// channels it spans. Most vectors cross no plane (channels-first) and no wrap of the channel
// (channels-last): those take one bias, or consecutive ones, instead of stepping the channel per
// element (the bias is the costliest step of a vector in the common chains). Each way reads the
// same values.
template <typename Traits, typename Index>
CONVPLAN_HD void epilogue_span_bias(const EpilogueParams& p, Index start,
                                    const typename Traits::T* bias, typename Traits::C* out) {
  constexpr int V = Traits::kVector;
  const Index cs = static_cast<Index>(p.channel_stride), k = static_cast<Index>(p.channels);
  const Index bs = static_cast<Index>(p.bias_stride);
  const Index q = cs == 1 ? start : start / cs;  // channels-last: no division by one
  Index c = q % k, r = start - q * cs;
  if (r + V <= cs) {  // one channel's plane
    const typename Traits::C b = Traits::to_c(bias[c * bs]);
    CONVPLAN_UNROLL
    for (int i = 0; i < V; ++i) out[i] = b;
  } else if (cs == 1 && c + V <= k) {  // consecutive channels
    CONVPLAN_UNROLL
    for (int i = 0; i < V; ++i) out[i] = Traits::to_c(bias[(c + i) * bs]);
  } else {
    CONVPLAN_UNROLL
    for (int i = 0; i < V; ++i) {
      out[i] = Traits::to_c(bias[c * bs]);
      if (++r == cs) {
        r = 0;
        if (++c == k) c = 0;
      }
    }
  }
}

// One op, known at compile time, on a vector's values: each element gets the fixed kernels'
// expression. bias and res are read only by the op that needs them.
template <typename Traits, uint8_t kOp>
CONVPLAN_HD void epilogue_op_on_span(typename Traits::C* x, const typename Traits::C* bias,
                                     const typename Traits::T* res, typename Traits::C scale) {
  using C = typename Traits::C;
  CONVPLAN_UNROLL
  for (int i = 0; i < Traits::kVector; ++i) {
    const C b = kOp == kOpBias ? bias[i] : C(0);
    const C r = kOp == kOpAdd ? Traits::to_c(res[i]) : C(0);
    x[i] = apply_epilogue_op<C>(kOp, x[i], b, r, scale);
  }
}

// The chain on the values of the vector from `start`, op by op: one switch per op and vector rather
// than per op and element, each case the op compiled for the whole vector. The biases are found
// where the bias op is, so that they take no registers during the other ops. bias/residual are
// null where the chain has no bias/add (res is then never read).
template <typename Traits, typename Index>
CONVPLAN_HD void epilogue_chain_on_span(const EpilogueParams& p, Index start,
                                        const typename Traits::T* bias,
                                        const typename Traits::T* res, typename Traits::T* vals) {
  using C = typename Traits::C;
  constexpr int V = Traits::kVector;
  C x[V];
  CONVPLAN_UNROLL
  for (int i = 0; i < V; ++i) x[i] = Traits::to_c(vals[i]);
  const C s = C(p.add_scale);
  for (int o = 0; o < p.op_count; ++o) {
    switch (p.ops[o]) {
      case kOpBias: {
        C b[V];
        epilogue_span_bias<Traits, Index>(p, start, bias, b);
        epilogue_op_on_span<Traits, kOpBias>(x, b, res, s);
        break;
      }
      case kOpAdd: epilogue_op_on_span<Traits, kOpAdd>(x, nullptr, res, s); break;
      case kOpRelu: epilogue_op_on_span<Traits, kOpRelu>(x, nullptr, res, s); break;
      case kOpRelu6: epilogue_op_on_span<Traits, kOpRelu6>(x, nullptr, res, s); break;
      case kOpGelu: epilogue_op_on_span<Traits, kOpGelu>(x, nullptr, res, s); break;
      case kOpGeluTanh: epilogue_op_on_span<Traits, kOpGeluTanh>(x, nullptr, res, s); break;
      case kOpSilu: epilogue_op_on_span<Traits, kOpSilu>(x, nullptr, res, s); break;
      case kOpSigmoid: epilogue_op_on_span<Traits, kOpSigmoid>(x, nullptr, res, s); break;
      case kOpTanh: epilogue_op_on_span<Traits, kOpTanh>(x, nullptr, res, s); break;
      case kOpElu: epilogue_op_on_span<Traits, kOpElu>(x, nullptr, res, s); break;
      default: break;  // as apply_epilogue_op: an unknown op leaves the value
    }
  }
  CONVPLAN_UNROLL
  for (int i = 0; i < V; ++i) vals[i] = Traits::from_c(x[i]);
}

// A loaded span of elements [start, start + count): the chain on its values, stored back to y.
template <typename Traits, typename Index>
CONVPLAN_HD void epilogue_finish_span(const EpilogueParams& p, Index start, int count,
                                      typename Traits::T* y, const typename Traits::T* bias,
                                      const typename Traits::T* res, typename Traits::T* vals) {
  epilogue_chain_on_span<Traits, Index>(p, start, bias, res, vals);
  epilogue_store_span<Traits, Index>(start, count, y, vals);
}

// Elements [start, start + count) of a packed output, count <= Traits::kVector, loaded and
// finished (the host twin's every vector, the kernel's partial last one).
template <typename Traits, typename Index>
CONVPLAN_HD void epilogue_packed_span(const EpilogueParams& p, Index start, int count,
                                      typename Traits::T* y, const typename Traits::T* bias,
                                      const typename Traits::T* residual) {
  using T = typename Traits::T;
  constexpr int V = Traits::kVector;
  // Zeroed: a partial span's other elements are computed too, and GCC 12 with -fsanitize=thread
  // reports -Wmaybe-uninitialized for res otherwise (it is read only where it was loaded).
  alignas(16) T vals[V]{};
  alignas(16) T res[V]{};
  epilogue_load_span<Traits, Index>(start, count, y, residual, vals, res);
  epilogue_finish_span<Traits, Index>(p, start, count, y, bias, res, vals);
}

// Which kernel runs a chain. kGeneric interprets the chain op by op per vector (every chain, layout
// and alignment); kFixed is compiled for one of the common chains below (16-byte vectors, several
// in flight per thread, the bias read once per vector where the layout allows) and falls back to
// kGeneric where the chain, the data type, the layout or the alignment has none. Both give the
// same bytes: they share apply_epilogue_op().
enum class EpilogueKernel { kGeneric, kFixed };
inline constexpr EpilogueKernel kDefaultEpilogueKernel = EpilogueKernel::kFixed;

// The storage types the kernels are built for.
enum class EpilogueType { kFloat, kHalf, kBFloat16, kDouble };

// The chains with a fixed kernel (kFixedChainOps lists their ops, in this order).
enum class FixedChain : int {
  kNone = -1,
  kBias,
  kBiasRelu,
  kBiasAdd,
  kBiasAddRelu,
  kAddRelu,
  kRelu,
  kBiasGelu,
  kBiasSilu,
};
inline constexpr int kFixedChains = 8;
struct FixedChainOps {
  int count;
  uint8_t ops[3];
};
inline constexpr FixedChainOps kFixedChainOps[kFixedChains] = {
    {1, {kOpBias}},          {2, {kOpBias, kOpRelu}},
    {2, {kOpBias, kOpAdd}},  {3, {kOpBias, kOpAdd, kOpRelu}},
    {2, {kOpAdd, kOpRelu}},  {1, {kOpRelu}},
    {2, {kOpBias, kOpGelu}}, {2, {kOpBias, kOpSilu}}};

// The fixed chain equal to p's chain (op for op; the add's scale is a parameter), or kNone.
inline FixedChain fixed_chain(const EpilogueParams& p) {
  for (int f = 0; f < kFixedChains; ++f) {
    const FixedChainOps& c = kFixedChainOps[f];
    bool same = c.count == p.op_count;
    for (int i = 0; same && i < c.count; ++i) same = c.ops[i] == p.ops[i];
    if (same) return static_cast<FixedChain>(f);
  }
  return FixedChain::kNone;
}

// How a fixed kernel finds a vector's bias: one 16-byte load (channels-last with a channel count
// that is a multiple of the vector, a contiguous, aligned bias), one value per vector (each vector
// within one channel's plane: channels-first with a plane size that is a multiple of the vector),
// or element by element, stepping the channel as the generic kernel does.
enum class FixedBiasMode { kVector, kPlane, kStep };

inline int epilogue_vector(EpilogueType t) {
  return t == EpilogueType::kDouble ? 2 : (t == EpilogueType::kFloat ? 4 : 8);
}

inline FixedBiasMode fixed_bias_mode(const EpilogueParams& p, EpilogueType t, uintptr_t bias) {
  const int v = epilogue_vector(t);
  if (!epilogue_has(p, kOpBias)) return FixedBiasMode::kVector;  // no bias to find
  if (p.channel_stride == 1 && p.channels % v == 0 && p.bias_stride == 1 && bias % 16 == 0)
    return FixedBiasMode::kVector;
  if (p.channel_stride % v == 0) return FixedBiasMode::kPlane;
  return FixedBiasMode::kStep;
}

// The kernel that runs `requested` on these pointers: kFixed only for a fixed chain over a packed
// fp32/fp16/bf16 output of fewer than 2^31 elements whose y (and residual) are 16-byte aligned.
inline EpilogueKernel select_epilogue_kernel(EpilogueKernel requested, const EpilogueParams& p,
                                             EpilogueType t, uintptr_t y, uintptr_t residual) {
  if (requested != EpilogueKernel::kFixed || t == EpilogueType::kDouble || !p.packed) {
    return EpilogueKernel::kGeneric;
  }
  if (p.elements <= 0 || p.elements >= (int64_t{1} << 31) || y % 16 != 0) {
    return EpilogueKernel::kGeneric;
  }
  if (epilogue_has(p, kOpAdd) && residual % 16 != 0) return EpilogueKernel::kGeneric;
  return fixed_chain(p) == FixedChain::kNone ? EpilogueKernel::kGeneric : EpilogueKernel::kFixed;
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
