// The epilogue kernel: one pass over the output in 16-byte vectors (8 fp16/bf16, 4 fp32, 2 fp64
// values per thread), each read once and written once, the residual read alongside. Outputs of
// other strides, or pointers not 16-byte aligned, take an element-wise kernel.
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

// Whole vectors by a grid-stride loop; the last partial vector (fewer than kVector elements) by
// thread 0.
template <typename Traits, typename Index>
__global__ void __launch_bounds__(kThreads)
    packed_kernel(EpilogueParams p, typename Traits::T* y, const typename Traits::T* bias,
                  const typename Traits::T* residual, Index vectors, int tail) {
  constexpr int V = Traits::kVector;
  const Index first = static_cast<Index>(blockIdx.x) * kThreads + threadIdx.x;
  const Index step = static_cast<Index>(gridDim.x) * kThreads;
  for (Index v = first; v < vectors; v += step) {
    epilogue_packed_span<Traits, Index>(p, v * V, V, y, bias, residual);
  }
  if (first == 0 && tail > 0) {
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

unsigned blocks_for(long long work) {
  return static_cast<unsigned>(
      std::clamp<long long>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename Traits>
cudaError_t enqueue(cudaStream_t stream, const EpilogueParams& p, void* y_raw, const void* bias_raw,
                    const void* residual_raw) {
  using T = typename Traits::T;
  auto* y = static_cast<T*>(y_raw);
  const auto* bias = epilogue_has(p, kOpBias) ? static_cast<const T*>(bias_raw) : nullptr;
  const auto* residual = epilogue_has(p, kOpAdd) ? static_cast<const T*>(residual_raw) : nullptr;
  long long elements = 1;
  for (int d = 0; d < p.rank; ++d) elements *= p.dims[d];
  if (elements == 0 || p.op_count == 0) return cudaSuccess;
  const bool vectorized = p.packed && aligned16(y) && (residual == nullptr || aligned16(residual));
  if (!vectorized) {
    strided_kernel<Traits>
        <<<blocks_for(elements), kThreads, 0, stream>>>(p, y, bias, residual, elements);
    return cudaGetLastError();
  }
  constexpr int V = Traits::kVector;
  const long long vectors = p.elements / V;
  const int tail = static_cast<int>(p.elements % V);
  // 32-bit index arithmetic where every index fits: the division per vector is the costly part.
  if (p.elements < (1ll << 31)) {
    packed_kernel<Traits, unsigned><<<blocks_for(vectors), kThreads, 0, stream>>>(
        p, y, bias, residual, static_cast<unsigned>(vectors), tail);
  } else {
    packed_kernel<Traits, long long>
        <<<blocks_for(vectors), kThreads, 0, stream>>>(p, y, bias, residual, vectors, tail);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t enqueue_epilogue(cudaStream_t stream, EpilogueType type, const EpilogueParams& params,
                             void* y, const void* bias, const void* residual) {
  switch (type) {
    case EpilogueType::kFloat: return enqueue<F32>(stream, params, y, bias, residual);
    case EpilogueType::kHalf: return enqueue<F16>(stream, params, y, bias, residual);
    case EpilogueType::kBFloat16: return enqueue<BF16>(stream, params, y, bias, residual);
    case EpilogueType::kDouble: return enqueue<F64>(stream, params, y, bias, residual);
  }
  return cudaErrorInvalidValue;
}

}  // namespace convplan::epilogue_detail
