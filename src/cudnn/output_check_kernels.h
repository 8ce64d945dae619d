// The kernels of the tuner's output check (output_check_kernels.cu), in plain C++17 types so that
// nvcc never sees convplan's C++20 headers. output_check.h wraps them. Internal to src/cudnn.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace convplan::cudnn_detail {

inline constexpr int kCheckMaxRank = 5;  // kMaxTensorRank; output_check.cc asserts they agree

struct CheckShape {
  int rank = 0;
  int64_t dims[kCheckMaxRank] = {};
  int64_t strides[kCheckMaxRank] = {};
  int64_t elements = 0;
};

// Bytes of device scratch that enqueue_output_check needs for `count` offsets of `elem` bytes.
size_t output_check_scratch_bytes(size_t count, int elem);

// Enqueues on `stream`: when `scan`, the smallest element offset of `shape` at `data` whose `elem`
// bytes are all 0xFF into *found (left as it was when there is none; *found is copied to the
// device first and back last, so it must stay valid until the stream is synchronized); and the
// elements at offsets[0..count) into dst on the host. Returns the first launch or copy error.
cudaError_t enqueue_output_check(cudaStream_t stream, const void* data, const CheckShape& shape,
                                 int elem, bool scan, const int64_t* offsets, size_t count,
                                 void* scratch, void* dst, unsigned long long* found);

// cudaSuccess when the current device can run these kernels (their code for its architecture, or
// PTX it can compile); cudaErrorNoKernelImageForDevice when this build has neither.
cudaError_t output_check_kernels_loadable();

}  // namespace convplan::cudnn_detail

namespace convplan::cudnn_detail {

// Enqueues on `stream` the tuner's input data: element i of `elements` at dst (type code of
// core/hashed_values.h) = hashed_input_value(seed, i). Returns the launch error.
cudaError_t enqueue_fill_hashed(cudaStream_t stream, void* dst, int type, int64_t elements,
                                uint64_t seed);

}  // namespace convplan::cudnn_detail
