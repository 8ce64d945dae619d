// The epilogue kernel's launch (epilogue_kernels.cu), in plain C++17 types so that nvcc never
// sees convplan's C++20 headers; epilogue.h wraps it. Internal to src/epilogues.
#pragma once

#include <cuda_runtime_api.h>

#include "epilogues/epilogue_math.h"

namespace convplan::epilogue_detail {

// Enqueues the chain over the output y on `stream`, in place: one pass that reads y (and the
// residual) once and writes y once. bias/residual are null where the chain has no bias/add.
// Allocates nothing and synchronizes nothing (capture-safe). Returns the launch's error. `kernel`
// picks the fixed or the generic kernel (select_epilogue_kernel() says which one runs).
cudaError_t enqueue_epilogue(cudaStream_t stream, EpilogueType type, const EpilogueParams& params,
                             void* y, const void* bias, const void* residual,
                             EpilogueKernel kernel = kDefaultEpilogueKernel);

}  // namespace convplan::epilogue_detail
