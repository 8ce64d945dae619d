// The one way convplan turns a failed cuDNN or CUDA call into a Status.
//
//   CONVPLAN_CUDNN_CHECK(expr)  expr yields a cudnnStatus_t
//   CONVPLAN_CUDA_CHECK(expr)   expr yields a cudaError_t
//
// Each returns, from the enclosing function (which returns Status or StatusOr<T>), a Status whose
// message names the expression, file:line, the status name and the library's own words
// (cudnnGetLastErrorString for cuDNN; cudaGetErrorString for CUDA), e.g.
//   "cudnnBackendFinalize(plan) failed with CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002) at
//    src/cudnn/plan.cc:88: <cuDNN's message>"
// Codes: CUDNN_STATUS_NOT_SUPPORTED* -> kNotSupported; cuDNN's host or device allocation failure
// and cudaErrorMemoryAllocation -> kOutOfMemory; any other failure -> kCudnnError / kCudaError.
//
// Internal to src/cudnn (and its tests). Thread-safe: cuDNN's last-error string is per thread.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "convplan/status.h"

namespace convplan::cudnn_detail {

StatusCode status_code_for(cudnnStatus_t status);
StatusCode status_code_for(cudaError_t error);

// The Status for a failed call; `expression`, `file` and `line` say where. Reads (and so clears)
// cuDNN's last-error string, or CUDA's last (non-sticky) error.
Status cudnn_failure(cudnnStatus_t status, const char* expression, const char* file, int line);
Status cuda_failure(cudaError_t error, const char* expression, const char* file, int line);

// `file` from the project root ("src/cudnn/plan.cc"), or its base name.
const char* short_file_name(const char* file);

}  // namespace convplan::cudnn_detail

#define CONVPLAN_CUDNN_CHECK(expr)                                                            \
  do {                                                                                        \
    const cudnnStatus_t convplan_cudnn_status_ = (expr);                                      \
    if (convplan_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                     \
      return ::convplan::cudnn_detail::cudnn_failure(convplan_cudnn_status_, #expr, __FILE__, \
                                                     __LINE__);                               \
    }                                                                                         \
  } while (0)

#define CONVPLAN_CUDA_CHECK(expr)                                                          \
  do {                                                                                     \
    const cudaError_t convplan_cuda_error_ = (expr);                                       \
    if (convplan_cuda_error_ != cudaSuccess) {                                             \
      return ::convplan::cudnn_detail::cuda_failure(convplan_cuda_error_, #expr, __FILE__, \
                                                    __LINE__);                             \
    }                                                                                      \
  } while (0)
