// The transform kernels. Channels-last copies whose rows split into 16-byte vectors (the stems)
// take the row-staged kernel (row_stage.h: whole source rows through shared memory, 16-byte loads
// and stores), or its pipelined variant (the next tile's rows copied in while this one's are
// written; TransformKernel); the rest take a gather with the destination written in 16-byte
// vectors, indices in 32 bits where every offset fits.
#include "rewrites/transform_kernels.h"

#include "rewrites/row_stage.h"

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
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};
template <>
struct Bits<8> {
  using type = uint64_t;
};

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
__global__ void __launch_bounds__(kThreads)
    copy_kernel(TransformDesc t, const T* __restrict__ src, T* __restrict__ dst) {
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
__global__ void __launch_bounds__(kThreads)
    scaled_kernel(TransformDesc t, const void* src, void* dst) {
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
__global__ void __launch_bounds__(kThreads)
    fast_copy_kernel(TransformDesc t, const T* __restrict__ src, T* __restrict__ dst) {
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
__global__ void __launch_bounds__(kThreads)
    fast_scaled_kernel(TransformDesc t, const void* src, void* dst) {
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

// Writes destination rows [row0, row0 + n) from their staged source rows, in 16-byte vectors. The
// column map is read as 16-byte vectors too, so that a warp's reads of it do not conflict.
template <typename T>
__device__ __forceinline__ void write_rows(const RowPlan& p, const int32_t* columns,
                                           const int32_t* addend, const T* stage,
                                           T* __restrict__ dst, int32_t row0, int32_t n) {
  constexpr int V = 16 / sizeof(T);
  T* out = dst + static_cast<int64_t>(row0) * p.dst_len;
  const uint32_t vectors = static_cast<uint32_t>(n * p.dst_len / V);
  for (uint32_t g = threadIdx.x; g < vectors; g += kStageThreads) {
    const uint32_t at = g * V;
    const uint32_t r = fast_div(p.dst_len_div, at);
    const uint32_t i = at - r * static_cast<uint32_t>(p.dst_len);
    int32_t col[V];
    if constexpr (V >= 4) {
#pragma unroll
      for (int q = 0; q < V / 4; ++q) {
        const int4 c4 = reinterpret_cast<const int4*>(columns + i)[q];
        col[4 * q] = c4.x;
        col[4 * q + 1] = c4.y;
        col[4 * q + 2] = c4.z;
        col[4 * q + 3] = c4.w;
      }
    } else {
      const int2 c2 = *reinterpret_cast<const int2*>(columns + i);
      col[0] = c2.x;
      col[1] = c2.y;
    }
    const T* row = stage + static_cast<int32_t>(r) * p.staged * p.src_len + addend[r];
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = col[j] < 0 ? T(0) : row[col[j]];
    reinterpret_cast<Vec<T, V>*>(out)[g] = o;
  }
}

// The row-staged fast path (row_stage.h): a block stages the source rows of R destination rows
// with coalesced loads of kUnit bytes, then writes the R rows (contiguous) in 16-byte vectors.
template <typename T, typename Unit>
__global__ void __launch_bounds__(kStageThreads)
    staged_copy_kernel(TransformDesc t, RowPlan p, const T* __restrict__ src, T* __restrict__ dst) {
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* columns = reinterpret_cast<int32_t*>(smem);
  int32_t* addend = reinterpret_cast<int32_t*>(smem + p.addend_at);
  int64_t* source = reinterpret_cast<int64_t*>(smem + p.source_at);
  T* stage = reinterpret_cast<T*>(smem + p.stage_at);
  const int32_t tid = static_cast<int32_t>(threadIdx.x);
  for (int32_t i = tid; i < p.dst_len; i += kStageThreads) columns[i] = column_source(t, p, i);
  const uint32_t units = p.load_div.divisor;  // loads per source row
  const int32_t tiles = (p.rows + p.rows_per_tile - 1) / p.rows_per_tile;
  for (int32_t tile = static_cast<int32_t>(blockIdx.x); tile < tiles;
       tile += static_cast<int32_t>(gridDim.x)) {
    const int32_t row0 = tile * p.rows_per_tile;
    const int32_t n = min(p.rows_per_tile, p.rows - row0);
    __syncthreads();  // the previous tile's reads of the stage are done
    if (tid < n * p.staged) {
      const int32_t r = tid / p.staged;
      int32_t add = 0;
      source[tid] = staged_row_source(t, p, row0 + r, tid - r * p.staged, &add);
      if (tid == r * p.staged) addend[r] = add;
    }
    __syncthreads();
    Unit* staged = reinterpret_cast<Unit*>(stage);
    const uint32_t loads = static_cast<uint32_t>(n * p.staged) * units;
    // kBatch loads in flight per thread before their stores: one block's stage is 16 KB.
    constexpr uint32_t kBatch = 4;
    for (uint32_t u0 = tid; u0 < loads; u0 += kBatch * kStageThreads) {
      Unit v[kBatch];
#pragma unroll
      for (uint32_t q = 0; q < kBatch; ++q) {
        const uint32_t u = u0 + q * kStageThreads;
        v[q] = Unit{};
        if (u < loads) {
          const uint32_t k = fast_div(p.load_div, u);
          const int64_t from = source[k];
          if (from >= 0) v[q] = __ldg(reinterpret_cast<const Unit*>(src + from) + (u - k * units));
        }
      }
#pragma unroll
      for (uint32_t q = 0; q < kBatch; ++q) {
        if (u0 + q * kStageThreads < loads) staged[u0 + q * kStageThreads] = v[q];
      }
    }
    __syncthreads();
    write_rows<T>(p, columns, addend, stage, dst, row0, n);
  }
}

// Tile `tile` (its first row and its count of rows) of the plan.
__device__ __forceinline__ int32_t tile_rows(const RowPlan& p, int32_t tile, int32_t* row0) {
  *row0 = tile * p.rows_per_tile;
  return min(p.rows_per_tile, p.rows - *row0);
}

// One 16-byte copy into shared memory, zeros where !valid: cp.async (sm_80 and later: the copy
// bypasses the registers and runs while the thread goes on), else a load and a store.
__device__ __forceinline__ void copy16_async(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  *static_cast<uint4*>(smem) = valid ? __ldg(static_cast<const uint4*>(gmem)) : uint4{0, 0, 0, 0};
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most one committed group (the next tile's) is in flight.
__device__ __forceinline__ void copy_async_wait_all_but_one() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
#endif
}

// Starts copying tile `tile`'s source rows into buffer `buf` (PipeLayout): the staged kernel's
// source offsets and addends, then 16-byte copies in flight. Every thread of the block calls it.
template <typename T>
__device__ __forceinline__ void issue_tile(const TransformDesc& t, const RowPlan& p,
                                           const PipeLayout& l, const T* __restrict__ src,
                                           unsigned char* buf, int32_t tile) {
  constexpr int V = 16 / sizeof(T);
  int32_t* addend = reinterpret_cast<int32_t*>(buf + l.addend_at);
  int64_t* source = reinterpret_cast<int64_t*>(buf + l.source_at);
  unsigned char* stage = buf + l.stage_at;
  const int32_t tid = static_cast<int32_t>(threadIdx.x);
  int32_t row0 = 0;
  const int32_t n = tile_rows(p, tile, &row0);
  if (tid < n * p.staged) {
    const int32_t r = tid / p.staged;
    int32_t add = 0;
    source[tid] = staged_row_source(t, p, row0 + r, tid - r * p.staged, &add);
    if (tid == r * p.staged) addend[r] = add;
  }
  __syncthreads();
  const uint32_t units = p.load_div.divisor;
  const uint32_t loads = static_cast<uint32_t>(n * p.staged) * units;
  for (uint32_t u = tid; u < loads; u += kStageThreads) {
    const uint32_t k = fast_div(p.load_div, u);
    const int64_t from = source[k];
    const T* at = from >= 0 ? src + from + static_cast<int64_t>(u - k * units) * V : src;
    copy16_async(stage + static_cast<size_t>(u) * 16, at, from >= 0);
  }
  copy_async_commit();
}

// The pipelined variant of the staged kernel (PipeLayout): resident blocks, each computing the
// column map once and taking tiles blockIdx.x, + gridDim.x, ...; tile i + 1's rows are in flight
// while tile i is written. Same index functions, so the same bytes.
template <typename T>
__global__ void __launch_bounds__(kStageThreads)
    pipelined_copy_kernel(TransformDesc t, RowPlan p, PipeLayout l, const T* __restrict__ src,
                          T* __restrict__ dst) {
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* columns = reinterpret_cast<int32_t*>(smem);
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < p.dst_len; i += kStageThreads)
    columns[i] = column_source(t, p, i);
  const int32_t tiles = (p.rows + p.rows_per_tile - 1) / p.rows_per_tile;
  const int32_t step = static_cast<int32_t>(gridDim.x);
  int32_t tile = static_cast<int32_t>(blockIdx.x);
  if (tile < tiles) issue_tile<T>(t, p, l, src, smem + l.buffer_at, tile);
  for (int32_t b = 0; tile < tiles; tile += step, b ^= 1) {
    unsigned char* buf = smem + l.buffer_at + b * l.buffer_bytes;
    if (tile + step < tiles) {
      issue_tile<T>(t, p, l, src, smem + l.buffer_at + (b ^ 1) * l.buffer_bytes, tile + step);
    } else {
      copy_async_commit();  // an empty group: the wait below then covers this tile's copies
    }
    copy_async_wait_all_but_one();
    __syncthreads();  // every thread's copies of this tile have landed
    int32_t row0 = 0;
    const int32_t n = tile_rows(p, tile, &row0);
    write_rows<T>(p, columns, reinterpret_cast<const int32_t*>(buf + l.addend_at),
                  reinterpret_cast<const T*>(buf + l.stage_at), dst, row0, n);
    __syncthreads();  // this buffer is read before the next iteration refills it
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
    fast_scaled_kernel<kRank, kLast>
        <<<blocks_for(t.dst_elements), kThreads, 0, stream>>>(t, src, dst);
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

// The device's multiprocessors and shared memory per multiprocessor (the resident grid).
void device_shape(int* sms, int* smem_per_sm) {
  int device = 0;
  *sms = 0;
  *smem_per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;
  cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
}

// The pipelined kernel where its layout applies: a grid of the blocks that fit at once.
bool try_launch_pipelined(const TransformDesc& t, const RowPlan& p, int sms, int smem_per_sm,
                          const void* src, void* dst, cudaStream_t stream) {
  PipeLayout l;
  if (!make_pipe_layout(p, t.elem_bytes, &l)) return false;
  int resident = smem_per_sm / (l.smem_bytes + 1024);  // 1 KB reserved per block
  const int by_threads = 2048 / kStageThreads;
  resident = resident < 1 ? 1 : (resident > by_threads ? by_threads : resident);
  const int32_t tiles = (p.rows + p.rows_per_tile - 1) / p.rows_per_tile;
  const int64_t want = int64_t{sms > 0 ? sms : 1} * resident;
  const int32_t grid = static_cast<int32_t>(tiles < want ? tiles : want);
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    pipelined_copy_kernel<T><<<grid, kStageThreads, l.smem_bytes, stream>>>(
        t, p, l, static_cast<const T*>(src), static_cast<T*>(dst));
  };
  switch (t.elem_bytes) {
    case 2: launch(uint16_t{}); break;
    case 8: launch(uint64_t{}); break;
    default: launch(uint32_t{}); break;
  }
  return true;
}

// The row-staged path where it applies (make_row_plan), pipelined where asked and possible;
// false: use the gather.
bool try_launch_staged(const TransformDesc& t, const void* src, void* dst, cudaStream_t stream,
                       TransformKernel kernel, int* error) {
  int sms = 0, smem_per_sm = 0;
  device_shape(&sms, &smem_per_sm);
  RowPlan p;
  if (!make_row_plan(t, reinterpret_cast<uintptr_t>(src), reinterpret_cast<uintptr_t>(dst), &p,
                     2 * sms)) {
    return false;
  }
  if (kernel == TransformKernel::kPipelined &&
      try_launch_pipelined(t, p, sms, smem_per_sm, src, dst, stream)) {
    *error = static_cast<int>(cudaPeekAtLastError());
    return true;
  }
  const int32_t tiles = (p.rows + p.rows_per_tile - 1) / p.rows_per_tile;
  const int32_t grid = tiles < 8192 ? tiles : 8192;
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    if (p.load_unit == 16) {
      staged_copy_kernel<T, uint4><<<grid, kStageThreads, p.smem_bytes, stream>>>(
          t, p, static_cast<const T*>(src), static_cast<T*>(dst));
    } else {
      staged_copy_kernel<T, T><<<grid, kStageThreads, p.smem_bytes, stream>>>(
          t, p, static_cast<const T*>(src), static_cast<T*>(dst));
    }
  };
  switch (t.elem_bytes) {
    case 2: launch(uint16_t{}); break;
    case 8: launch(uint64_t{}); break;
    default: launch(uint32_t{}); break;
  }
  *error = static_cast<int>(cudaPeekAtLastError());
  return true;
}

}  // namespace

int launch_transform(const TransformDesc& desc, const void* src, void* dst, cudaStream_t stream,
                     TransformKernel kernel) {
  if (desc.dst_elements == 0) return 0;
  if (!fits_32(desc)) return launch_indexed<int64_t>(desc, src, dst, stream);
  TransformDesc t = desc;
  prepare_fast(t);
  int error = 0;
  if (try_launch_staged(t, src, dst, stream, kernel, &error)) return error;
  const bool last = t.dst_mem_to_logical[t.spatial_dims + 1] == 1 && t.spatial_dims > 0;
  return last ? launch_fast_layout<true>(t, src, dst, stream)
              : launch_fast_layout<false>(t, src, dst, stream);
}

}  // namespace convplan::rewrites
