// Kernels of the tuner's output check: one grid-stride pass over the tensor's elements that keeps
// the smallest offset holding the poison (every byte 0xFF), and one gather of the checked elements.
#include "cudnn/output_check_kernels.h"

#include "core/hashed_values.h"

#include <algorithm>

namespace convplan::cudnn_detail {
namespace {

constexpr unsigned kThreads = 256;

__device__ bool poisoned(const unsigned char* p, int elem) {
  for (int b = 0; b < elem; ++b) {
    if (p[b] != 0xFF) return false;
  }
  return true;
}

__global__ void scan_poison(const unsigned char* data, CheckShape s, int elem,
                            unsigned long long* first) {
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < s.elements;
       e += step) {
    long long rest = e;
    long long off = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      off += (rest % s.dims[d]) * s.strides[d];
      rest /= s.dims[d];
    }
    if (poisoned(data + off * elem, elem)) atomicMin(first, static_cast<unsigned long long>(off));
  }
}

__global__ void gather(const unsigned char* data, const long long* offsets, long long count,
                       int elem, unsigned char* out) {
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += step) {
    for (int b = 0; b < elem; ++b) out[i * elem + b] = data[offsets[i] * elem + b];
  }
}

__global__ void fill_hashed(void* dst, int type, long long elements, unsigned long long seed) {
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < elements;
       i += step) {
    detail::store_hashed(dst, type, i, seed);
  }
}

unsigned blocks_for(long long work) {
  return static_cast<unsigned>(std::clamp<long long>((work + kThreads - 1) / kThreads, 1, 4096));
}

}  // namespace

cudaError_t output_check_kernels_loadable() {
  cudaFuncAttributes a{};
  cudaError_t e = cudaFuncGetAttributes(&a, scan_poison);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, gather);
  return e;
}

// Scratch: [first poisoned offset][offsets][gathered elements].
size_t output_check_scratch_bytes(size_t count, int elem) {
  return sizeof(unsigned long long) + count * (sizeof(int64_t) + static_cast<size_t>(elem));
}

cudaError_t enqueue_output_check(cudaStream_t stream, const void* data, const CheckShape& shape,
                                 int elem, bool scan, const int64_t* offsets, size_t count,
                                 void* scratch, void* dst, unsigned long long* found) {
  auto* first = static_cast<unsigned long long*>(scratch);
  auto* dev_offsets = reinterpret_cast<long long*>(first + 1);
  auto* dev_out = reinterpret_cast<unsigned char*>(dev_offsets + count);
  const auto* bytes = static_cast<const unsigned char*>(data);
  cudaError_t e = cudaMemcpyAsync(first, found, sizeof(*found), cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess && scan && shape.elements > 0) {
    scan_poison<<<blocks_for(shape.elements), kThreads, 0, stream>>>(bytes, shape, elem, first);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess && count > 0) {
    e = cudaMemcpyAsync(dev_offsets, offsets, count * sizeof(int64_t), cudaMemcpyHostToDevice,
                        stream);
    if (e == cudaSuccess) {
      const auto n = static_cast<long long>(count);
      gather<<<blocks_for(n), kThreads, 0, stream>>>(bytes, dev_offsets, n, elem, dev_out);
      e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(dst, dev_out, count * static_cast<size_t>(elem), cudaMemcpyDeviceToHost,
                          stream);
    }
  }
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(found, first, sizeof(*found), cudaMemcpyDeviceToHost, stream);
  }
  return e;
}

cudaError_t enqueue_fill_hashed(cudaStream_t stream, void* dst, int type, int64_t elements,
                                uint64_t seed) {
  if (elements <= 0) return cudaSuccess;
  fill_hashed<<<blocks_for(elements), kThreads, 0, stream>>>(dst, type, elements, seed);
  return cudaGetLastError();
}

}  // namespace convplan::cudnn_detail
