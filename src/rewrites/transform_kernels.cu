// The transform kernel: a gather with the destination written in 16-byte vectors, indices in
// 32 bits where every offset fits.
#include "rewrites/transform_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace convplan::rewrites {
namespace {

constexpr int kThreads = 256;

template <int kBytes>
struct Bits;
template <>
struct Bits<2> { using type = uint16_t; };
template <>
struct Bits<4> { using type = uint32_t; };
template <>
struct Bits<8> { using type = uint64_t; };

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

__device__ __forceinline__ double load_as_double(ElemType e, const void* p, int64_t i) {
  switch (e) {
    case ElemType::kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case ElemType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case ElemType::kF64: return static_cast<const double*>(p)[i];
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_from_double(ElemType e, void* p, int64_t i, double v) {
  switch (e) {
    case ElemType::kF16: static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v)); break;
    case ElemType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    case ElemType::kF64: static_cast<double*>(p)[i] = v; break;
    default: static_cast<float*>(p)[i] = static_cast<float>(v); break;
  }
}

// Copies: V elements per thread, loaded one by one (a gather), stored as one vector.
template <typename T, typename Index, int V>
__global__ void __launch_bounds__(kThreads) copy_kernel(TransformDesc t, const T* __restrict__ src,
                                                        T* __restrict__ dst) {
  const int64_t groups = t.dst_elements / V;
  for (int64_t g = int64_t{blockIdx.x} * kThreads + threadIdx.x; g < groups;
       g += int64_t{gridDim.x} * kThreads) {
    Vec<T, V> out;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t s = source_offset<Index>(t, static_cast<Index>(g * V + i));
      out.v[i] = s < 0 ? T(0) : __ldg(src + s);
    }
    reinterpret_cast<Vec<T, V>*>(dst)[g] = out;
  }
}

// alpha * gathered + beta * dst, in fp64 for fp64 data and rounded once per element otherwise.
template <typename Index>
__global__ void __launch_bounds__(kThreads) scaled_kernel(TransformDesc t, const void* src,
                                                          void* dst) {
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < t.dst_elements;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t s = source_offset<Index>(t, static_cast<Index>(i));
    double v = s < 0 ? 0.0 : t.alpha * load_as_double(t.elem, src, s);
    if (t.beta != 0.0) v += t.beta * load_as_double(t.elem, dst, i);
    store_from_double(t.elem, dst, i, v);
  }
}

// The fast path (FastWalk): V consecutive destination elements per thread, one decomposition.
template <typename T, int V, int kRank, bool kLast>
__global__ void __launch_bounds__(kThreads) fast_copy_kernel(TransformDesc t, const T* __restrict__ src,
                                                             T* __restrict__ dst) {
  const uint32_t groups = static_cast<uint32_t>(t.dst_elements / V);
  for (uint32_t g = blockIdx.x * kThreads + threadIdx.x; g < groups; g += gridDim.x * kThreads) {
    FastWalk<kRank, kLast> walk;
    walk.start(t, g * V);
    Vec<T, V> out;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t s = walk.source(t);
      out.v[i] = s < 0 ? T(0) : __ldg(src + s);
      walk.next(t);
    }
    reinterpret_cast<Vec<T, V>*>(dst)[g] = out;
  }
}

template <int kRank, bool kLast>
__global__ void __launch_bounds__(kThreads) fast_scaled_kernel(TransformDesc t, const void* src,
                                                               void* dst) {
  const uint32_t n = static_cast<uint32_t>(t.dst_elements);
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < n; i += gridDim.x * kThreads) {
    FastWalk<kRank, kLast> walk;
    walk.start(t, i);
    const int64_t s = walk.source(t);
    double v = s < 0 ? 0.0 : t.alpha * load_as_double(t.elem, src, s);
    if (t.beta != 0.0) v += t.beta * load_as_double(t.elem, dst, i);
    store_from_double(t.elem, dst, i, v);
  }
}

int64_t blocks_for(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return b < 1 ? 1 : (b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b);
}

bool fits_32(const TransformDesc& t) {
  int64_t a = 1, b = 1;
  for (int i = 0; i < kMaxRank; ++i) {
    a *= t.a_dims[i];
    b *= t.b_dims[i];
  }
  const int64_t limit = int64_t{1} << 31;
  return a < limit && b < limit && t.dst_elements < limit;
}

template <int kBytes, typename Index>
int launch_copy(const TransformDesc& t, const void* src, void* dst, cudaStream_t stream) {
  using T = typename Bits<kBytes>::type;
  constexpr int V = 16 / kBytes;
  const bool vector = t.dst_elements % V == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  if (vector) {
    copy_kernel<T, Index, V><<<blocks_for(t.dst_elements / V), kThreads, 0, stream>>>(
        t, static_cast<const T*>(src), static_cast<T*>(dst));
  } else {
    copy_kernel<T, Index, 1><<<blocks_for(t.dst_elements), kThreads, 0, stream>>>(
        t, static_cast<const T*>(src), static_cast<T*>(dst));
  }
  return static_cast<int>(cudaPeekAtLastError());
}

template <typename Index>
int launch_indexed(const TransformDesc& t, const void* src, void* dst, cudaStream_t stream) {
  if (t.scaled()) {
    scaled_kernel<Index><<<blocks_for(t.dst_elements), kThreads, 0, stream>>>(t, src, dst);
    return static_cast<int>(cudaPeekAtLastError());
  }
  switch (t.elem_bytes) {
    case 2: return launch_copy<2, Index>(t, src, dst, stream);
    case 8: return launch_copy<8, Index>(t, src, dst, stream);
    default: return launch_copy<4, Index>(t, src, dst, stream);
  }
}

template <int kRank, bool kLast>
int launch_fast(const TransformDesc& t, const void* src, void* dst, cudaStream_t stream) {
  if (t.scaled()) {
    fast_scaled_kernel<kRank, kLast><<<blocks_for(t.dst_elements), kThreads, 0, stream>>>(t, src, dst);
    return static_cast<int>(cudaPeekAtLastError());
  }
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    if (t.dst_elements % V == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
      fast_copy_kernel<T, V, kRank, kLast><<<blocks_for(t.dst_elements / V), kThreads, 0, stream>>>(
          t, static_cast<const T*>(src), static_cast<T*>(dst));
    } else {
      fast_copy_kernel<T, 1, kRank, kLast><<<blocks_for(t.dst_elements), kThreads, 0, stream>>>(
          t, static_cast<const T*>(src), static_cast<T*>(dst));
    }
    return static_cast<int>(cudaPeekAtLastError());
  };
  switch (t.elem_bytes) {
    case 2: return launch(uint16_t{});
    case 8: return launch(uint64_t{});
    default: return launch(uint32_t{});
  }
}

template <bool kLast>
int launch_fast_layout(const TransformDesc& t, const void* src, void* dst, cudaStream_t stream) {
  switch (t.spatial_dims) {
    case 1: return launch_fast<3, kLast>(t, src, dst, stream);
    case 2: return launch_fast<4, kLast>(t, src, dst, stream);
    default: return launch_fast<5, kLast>(t, src, dst, stream);
  }
}

}  // namespace

int launch_transform(const TransformDesc& desc, const void* src, void* dst, cudaStream_t stream) {
  if (desc.dst_elements == 0) return 0;
  if (!fits_32(desc)) return launch_indexed<int64_t>(desc, src, dst, stream);
  TransformDesc t = desc;
  prepare_fast(t);
  const bool last = t.dst_mem_to_logical[t.spatial_dims + 1] == 1 && t.spatial_dims > 0;
  return last ? launch_fast_layout<true>(t, src, dst, stream)
              : launch_fast_layout<false>(t, src, dst, stream);
}

}  // namespace convplan::rewrites
