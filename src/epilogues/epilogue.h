// convplan's own epilogue: a post-op chain (problem.h) applied in place to a convolution's output
// in one pass, on the device (the kernel of epilogue_kernels.cu, on a stream) or on the host (its
// twin, which runs the kernel's per-vector code serially, for CPU tests). Unfused plans run it
// after the plain convolution. Stateless functions; thread-safe. Internal to src/epilogues.
#pragma once

#include <cuda_runtime_api.h>

#include "convplan/problem.h"
#include "convplan/status.h"
#include "epilogues/epilogue_math.h"

namespace convplan::epilogue_detail {

// The kernel's parameters for the problem's chain and output. REQUIRES: problem.validate().ok().
EpilogueParams epilogue_params(const ConvProblem& problem);

// kInvalidArgument unless the problem is valid, forward, and has a chain; and naming the tensor
// when the chain needs bias or residual and its pointer is null.
Status check_epilogue(const ConvProblem& problem, const void* y, const void* bias,
                      const void* residual);

// Enqueues the chain over y (device memory, the problem's y layout) on `stream`; bias and
// residual in the layouts of bias_shape() and residual_shape(). Capture-safe: allocates and
// synchronizes nothing. `kernel`: the fixed kernel where one applies, else the generic one
// (select_epilogue_kernel(); both give the same bytes).
Status enqueue_epilogue(cudaStream_t stream, const ConvProblem& problem, void* y, const void* bias,
                        const void* residual, EpilogueKernel kernel = kDefaultEpilogueKernel);

// The kernel enqueue_epilogue() runs for `requested` on these pointers.
EpilogueKernel epilogue_kernel_for(const ConvProblem& problem, EpilogueKernel requested,
                                   const void* y, const void* residual);

// The host twin: the same chain over host buffers of the problem's data type, through the
// kernel's code: in 16-byte vectors plus a tail for packed layouts (`vectorized`), element by
// element otherwise (the kernel's path for other strides and unaligned pointers).
Status run_epilogue_on_host(const ConvProblem& problem, void* y, const void* bias,
                            const void* residual, bool vectorized = true);

}  // namespace convplan::epilogue_detail
