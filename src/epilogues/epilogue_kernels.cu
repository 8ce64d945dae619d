// The epilogue kernels: one pass over the output in 16-byte vectors (8 fp16/bf16, 4 fp32, 2 fp64
// values per thread), each read once and written once, the residual read alongside, kUnroll
// vectors in flight per thread. The generic kernel interprets any chain, op by op over a vector;
// outputs of other strides, or pointers not 16-byte aligned, take its element-wise variant. The
// fixed kernels are compiled per common chain (FixedChain), data type and bias mode: no loop over
// the chain, and the bias read once per vector where the layout allows (FixedBiasMode).
#include "epilogues/epilogue_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace convplan::epilogue_detail {
namespace {

constexpr unsigned kThreads = 256;
constexpr long long kMaxBlocks = 1 << 20;

// __host__ __device__ because epilogue_math.h's functions are; only device code calls them.
template <typename Storage>
__host__ __device__ __forceinline__ void load16(const Storage* src, Storage* dst) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
template <typename Storage>
__host__ __device__ __forceinline__ void store16(Storage* dst, const Storage* src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

struct F32 {
  using T = float;
  using C = float;
  static constexpr int kVector = 4;
  __host__ __device__ static C to_c(T v) { return v; }
  __host__ __device__ static T from_c(C v) { return v; }
  __host__ __device__ static void load_vector(const T* s, T* d) { load16(s, d); }
  __host__ __device__ static void store_vector(T* d, const T* s) { store16(d, s); }
};
struct F64 {
  using T = double;
  using C = double;
  static constexpr int kVector = 2;
  __host__ __device__ static C to_c(T v) { return v; }
  __host__ __device__ static T from_c(C v) { return v; }
  __host__ __device__ static void load_vector(const T* s, T* d) { load16(s, d); }
  __host__ __device__ static void store_vector(T* d, const T* s) { store16(d, s); }
};
struct F16 {
  using T = __half;
  using C = float;
  static constexpr int kVector = 8;
  __host__ __device__ static C to_c(T v) { return __half2float(v); }
  __host__ __device__ static T from_c(C v) { return __float2half_rn(v); }
  __host__ __device__ static void load_vector(const T* s, T* d) { load16(s, d); }
  __host__ __device__ static void store_vector(T* d, const T* s) { store16(d, s); }
};
struct BF16 {
  using T = __nv_bfloat16;
  using C = float;
  static constexpr int kVector = 8;
  __host__ __device__ static C to_c(T v) { return __bfloat162float(v); }
  __host__ __device__ static T from_c(C v) { return __float2bfloat16_rn(v); }
  __host__ __device__ static void load_vector(const T* s, T* d) { load16(s, d); }
  __host__ __device__ static void store_vector(T* d, const T* s) { store16(d, s); }
};

// Vectors in flight per thread: all loaded before any is computed, so that a thread keeps
// kUnroll * 16 bytes (twice that with a residual) of loads outstanding.
constexpr unsigned kUnroll = 4;

// Whole vectors by a grid-stride loop, kUnroll per thread at a time as fixed_kernel takes them,
// with epilogue_math.h's span steps (those of the host twin); the last partial vector (fewer than
// kVector elements) by thread 0.
template <typename Traits, typename Index>
__global__ void __launch_bounds__(kThreads)
    packed_kernel(EpilogueParams p, typename Traits::T* __restrict__ y,
                  const typename Traits::T* __restrict__ bias,
                  const typename Traits::T* __restrict__ residual, Index vectors, int tail) {
  using T = typename Traits::T;
  constexpr int V = Traits::kVector;
  constexpr Index kPerBlock = kThreads * kUnroll;
  for (Index base = static_cast<Index>(blockIdx.x) * kPerBlock + threadIdx.x; base < vectors;
       base += static_cast<Index>(gridDim.x) * kPerBlock) {
    alignas(16) T vals[kUnroll][V];
    alignas(16) T res[kUnroll][V];  // read only where loaded (a chain with an add)
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) {
      const Index v = base + u * kThreads;
      if (v < vectors) epilogue_load_span<Traits, Index>(v * V, V, y, residual, vals[u], res[u]);
    }
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) {
      const Index v = base + u * kThreads;
      if (v < vectors) epilogue_finish_span<Traits, Index>(p, v * V, V, y, bias, res[u], vals[u]);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && tail > 0) {
    epilogue_packed_span<Traits, Index>(p, vectors * V, tail, y, bias, residual);
  }
}

template <typename Traits>
__global__ void __launch_bounds__(kThreads)
    strided_kernel(EpilogueParams p, typename Traits::T* y, const typename Traits::T* bias,
                   const typename Traits::T* residual, long long elements) {
  const long long step = static_cast<long long>(gridDim.x) * kThreads;
  for (long long e = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; e < elements;
       e += step) {
    epilogue_strided_element<Traits>(p, e, y, bias, residual);
  }
}

// A chain as a compile-time list of ops: the fold applies them in order through the generic
// kernel's own apply_epilogue_op().
template <uint8_t... kOps>
struct Chain {
  template <typename C>
  __device__ __forceinline__ static C apply(C v, C bias, C residual, C scale) {
    ((v = apply_epilogue_op<C>(kOps, v, bias, residual, scale)), ...);
    return v;
  }
  static constexpr bool kBias = ((kOps == kOpBias) || ...);
  static constexpr bool kAdd = ((kOps == kOpAdd) || ...);
  // The host table that selection reads names the same ops.
  static constexpr bool matches(const FixedChainOps& c) {
    const uint8_t ops[] = {kOps...};
    if (c.count != static_cast<int>(sizeof...(kOps))) return false;
    for (int i = 0; i < c.count; ++i)
      if (c.ops[i] != ops[i]) return false;
    return true;
  }
};

template <FixedChain kChain>
struct ChainOf;
template <>
struct ChainOf<FixedChain::kBias> : Chain<kOpBias> {};
template <>
struct ChainOf<FixedChain::kBiasRelu> : Chain<kOpBias, kOpRelu> {};
template <>
struct ChainOf<FixedChain::kBiasAdd> : Chain<kOpBias, kOpAdd> {};
template <>
struct ChainOf<FixedChain::kBiasAddRelu> : Chain<kOpBias, kOpAdd, kOpRelu> {};
template <>
struct ChainOf<FixedChain::kAddRelu> : Chain<kOpAdd, kOpRelu> {};
template <>
struct ChainOf<FixedChain::kRelu> : Chain<kOpRelu> {};
template <>
struct ChainOf<FixedChain::kBiasGelu> : Chain<kOpBias, kOpGelu> {};
template <>
struct ChainOf<FixedChain::kBiasSilu> : Chain<kOpBias, kOpSilu> {};

template <FixedChain kChain>
constexpr bool chain_matches_table() {
  return ChainOf<kChain>::matches(kFixedChainOps[static_cast<int>(kChain)]);
}
static_assert(chain_matches_table<FixedChain::kBias>() &&
              chain_matches_table<FixedChain::kBiasRelu>() &&
              chain_matches_table<FixedChain::kBiasAdd>() &&
              chain_matches_table<FixedChain::kBiasAddRelu>() &&
              chain_matches_table<FixedChain::kAddRelu>() &&
              chain_matches_table<FixedChain::kRelu>() &&
              chain_matches_table<FixedChain::kBiasGelu>() &&
              chain_matches_table<FixedChain::kBiasSilu>() && kFixedChains == 8);

struct FixedArgs {
  unsigned vectors;   // whole vectors
  unsigned elements;  // all elements (the last partial vector's too)
  unsigned channels;  // K
  unsigned channel_stride;
  unsigned bias_stride;
  float add_scale;
};

// Vector `v`'s biases (in compute type), found as kMode says.
template <typename Traits, typename Ch, FixedBiasMode kMode>
__device__ __forceinline__ void vector_bias(const FixedArgs& a, const typename Traits::T* bias,
                                            unsigned v, typename Traits::C* out) {
  using T = typename Traits::T;
  constexpr int V = Traits::kVector;
  if constexpr (!Ch::kBias) {
    (void)a, (void)bias, (void)v, (void)out;
  } else if constexpr (kMode == FixedBiasMode::kVector) {
    alignas(16) T b[V];
    Traits::load_vector(bias + (v * V) % a.channels, b);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = Traits::to_c(b[i]);
  } else if constexpr (kMode == FixedBiasMode::kPlane) {
    const auto b =
        Traits::to_c(__ldg(bias + ((v * V) / a.channel_stride) % a.channels * a.bias_stride));
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = b;
  } else {
    const unsigned start = v * V, q = start / a.channel_stride;
    unsigned c = q % a.channels, r = start - q * a.channel_stride;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      out[i] = Traits::to_c(__ldg(bias + c * a.bias_stride));
      if (++r == a.channel_stride) {
        r = 0;
        if (++c == a.channels) c = 0;
      }
    }
  }
}

// The last partial vector, element by element (the generic kernel's tail, with this chain).
template <typename Traits, typename Ch>
__device__ void fixed_tail(const FixedArgs& a, typename Traits::T* y,
                           const typename Traits::T* bias, const typename Traits::T* residual) {
  using C = typename Traits::C;
  for (unsigned e = a.vectors * Traits::kVector; e < a.elements; ++e) {
    const C b =
        Ch::kBias ? Traits::to_c(bias[(e / a.channel_stride) % a.channels * a.bias_stride]) : C(0);
    const C r = Ch::kAdd ? Traits::to_c(residual[e]) : C(0);
    y[e] = Traits::from_c(Ch::apply(Traits::to_c(y[e]), b, r, C(a.add_scale)));
  }
}

template <typename Traits, typename Ch, FixedBiasMode kMode>
__global__ void __launch_bounds__(kThreads)
    fixed_kernel(FixedArgs a, typename Traits::T* __restrict__ y,
                 const typename Traits::T* __restrict__ bias,
                 const typename Traits::T* __restrict__ residual) {
  using T = typename Traits::T;
  using C = typename Traits::C;
  constexpr int V = Traits::kVector;
  constexpr unsigned kPerBlock = kThreads * kUnroll;
  const C scale = C(a.add_scale);
  for (unsigned base = blockIdx.x * kPerBlock + threadIdx.x; base < a.vectors;
       base += gridDim.x * kPerBlock) {
    alignas(16) T vals[kUnroll][V];
    [[maybe_unused]] alignas(16) T res[kUnroll][V];
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) {
      const unsigned v = base + u * kThreads;
      if (v < a.vectors) {
        Traits::load_vector(y + static_cast<size_t>(v) * V, vals[u]);
        if constexpr (Ch::kAdd) Traits::load_vector(residual + static_cast<size_t>(v) * V, res[u]);
      }
    }
#pragma unroll
    for (unsigned u = 0; u < kUnroll; ++u) {
      const unsigned v = base + u * kThreads;
      if (v < a.vectors) {
        C b[V] = {};  // unread where the chain has no bias
        vector_bias<Traits, Ch, kMode>(a, bias, v, b);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const C r = Ch::kAdd ? Traits::to_c(res[u][i]) : C(0);
          vals[u][i] = Traits::from_c(Ch::apply(Traits::to_c(vals[u][i]), b[i], r, scale));
        }
        Traits::store_vector(y + static_cast<size_t>(v) * V, vals[u]);
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) fixed_tail<Traits, Ch>(a, y, bias, residual);
}

unsigned blocks_for(long long work) {
  return static_cast<unsigned>(
      std::clamp<long long>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename Traits, FixedChain kChain>
cudaError_t launch_fixed(cudaStream_t stream, const EpilogueParams& p, FixedBiasMode mode,
                         typename Traits::T* y, const typename Traits::T* bias,
                         const typename Traits::T* residual) {
  using Ch = ChainOf<kChain>;
  FixedArgs a;
  a.elements = static_cast<unsigned>(p.elements);
  a.vectors = a.elements / Traits::kVector;
  a.channels = static_cast<unsigned>(p.channels);
  a.channel_stride = static_cast<unsigned>(p.channel_stride);
  a.bias_stride = static_cast<unsigned>(p.bias_stride);
  a.add_scale = static_cast<float>(p.add_scale);
  const unsigned grid = blocks_for((static_cast<long long>(a.vectors) + kUnroll - 1) / kUnroll);
  if (!Ch::kBias || mode == FixedBiasMode::kVector) {
    fixed_kernel<Traits, Ch, FixedBiasMode::kVector>
        <<<grid, kThreads, 0, stream>>>(a, y, bias, residual);
  } else if (mode == FixedBiasMode::kPlane) {
    fixed_kernel<Traits, Ch, FixedBiasMode::kPlane>
        <<<grid, kThreads, 0, stream>>>(a, y, bias, residual);
  } else {
    fixed_kernel<Traits, Ch, FixedBiasMode::kStep>
        <<<grid, kThreads, 0, stream>>>(a, y, bias, residual);
  }
  return cudaGetLastError();
}

template <typename Traits>
cudaError_t enqueue_fixed(cudaStream_t stream, const EpilogueParams& p, EpilogueType type,
                          typename Traits::T* y, const typename Traits::T* bias,
                          const typename Traits::T* residual) {
  const FixedBiasMode mode = fixed_bias_mode(p, type, reinterpret_cast<uintptr_t>(bias));
  switch (fixed_chain(p)) {
    case FixedChain::kBias:
      return launch_fixed<Traits, FixedChain::kBias>(stream, p, mode, y, bias, residual);
    case FixedChain::kBiasRelu:
      return launch_fixed<Traits, FixedChain::kBiasRelu>(stream, p, mode, y, bias, residual);
    case FixedChain::kBiasAdd:
      return launch_fixed<Traits, FixedChain::kBiasAdd>(stream, p, mode, y, bias, residual);
    case FixedChain::kBiasAddRelu:
      return launch_fixed<Traits, FixedChain::kBiasAddRelu>(stream, p, mode, y, bias, residual);
    case FixedChain::kAddRelu:
      return launch_fixed<Traits, FixedChain::kAddRelu>(stream, p, mode, y, bias, residual);
    case FixedChain::kRelu:
      return launch_fixed<Traits, FixedChain::kRelu>(stream, p, mode, y, bias, residual);
    case FixedChain::kBiasGelu:
      return launch_fixed<Traits, FixedChain::kBiasGelu>(stream, p, mode, y, bias, residual);
    case FixedChain::kBiasSilu:
      return launch_fixed<Traits, FixedChain::kBiasSilu>(stream, p, mode, y, bias, residual);
    case FixedChain::kNone: break;
  }
  return cudaErrorInvalidValue;  // select_epilogue_kernel() returned kFixed for no fixed chain
}

template <typename Traits>
cudaError_t enqueue(cudaStream_t stream, EpilogueType type, EpilogueKernel kernel,
                    const EpilogueParams& p, void* y_raw, const void* bias_raw,
                    const void* residual_raw) {
  using T = typename Traits::T;
  auto* y = static_cast<T*>(y_raw);
  const auto* bias = epilogue_has(p, kOpBias) ? static_cast<const T*>(bias_raw) : nullptr;
  const auto* residual = epilogue_has(p, kOpAdd) ? static_cast<const T*>(residual_raw) : nullptr;
  long long elements = 1;
  for (int d = 0; d < p.rank; ++d) elements *= p.dims[d];
  if (elements == 0 || p.op_count == 0) return cudaSuccess;
  (void)type, (void)kernel;
  if constexpr (Traits::kVector > 2) {  // no fixed kernels for fp64
    if (select_epilogue_kernel(kernel, p, type, reinterpret_cast<uintptr_t>(y),
                               reinterpret_cast<uintptr_t>(residual)) == EpilogueKernel::kFixed) {
      return enqueue_fixed<Traits>(stream, p, type, y, bias, residual);
    }
  }
  const bool vectorized = p.packed && aligned16(y) && (residual == nullptr || aligned16(residual));
  if (!vectorized) {
    strided_kernel<Traits>
        <<<blocks_for(elements), kThreads, 0, stream>>>(p, y, bias, residual, elements);
    return cudaGetLastError();
  }
  constexpr int V = Traits::kVector;
  const long long vectors = p.elements / V;
  const int tail = static_cast<int>(p.elements % V);
  const unsigned grid = blocks_for((vectors + kUnroll - 1) / kUnroll);
  // 32-bit index arithmetic where every index fits: the division per vector is the costly part.
  if (p.elements < (1ll << 31)) {
    packed_kernel<Traits, unsigned>
        <<<grid, kThreads, 0, stream>>>(p, y, bias, residual, static_cast<unsigned>(vectors), tail);
  } else {
    packed_kernel<Traits, long long>
        <<<grid, kThreads, 0, stream>>>(p, y, bias, residual, vectors, tail);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t enqueue_epilogue(cudaStream_t stream, EpilogueType type, const EpilogueParams& params,
                             void* y, const void* bias, const void* residual,
                             EpilogueKernel kernel) {
  switch (type) {
    case EpilogueType::kFloat: return enqueue<F32>(stream, type, kernel, params, y, bias, residual);
    case EpilogueType::kHalf: return enqueue<F16>(stream, type, kernel, params, y, bias, residual);
    case EpilogueType::kBFloat16:
      return enqueue<BF16>(stream, type, kernel, params, y, bias, residual);
    case EpilogueType::kDouble:
      return enqueue<F64>(stream, type, kernel, params, y, bias, residual);
  }
  return cudaErrorInvalidValue;
}

}  // namespace convplan::epilogue_detail
