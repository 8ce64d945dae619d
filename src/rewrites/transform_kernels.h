// The CUDA side of the rewrite transforms: one launch per transform, on the caller's stream.
// C++17, so that nvcc compiles it without convplan's C++20 headers.
#pragma once

#include "rewrites/transform.h"

typedef struct CUstream_st* cudaStream_t;

namespace convplan::rewrites {

// Enqueues dst[i] = src[source_offset(t, i)] (0 where -1; alpha/beta applied when t.scaled())
// for every destination element. Allocates and synchronizes nothing, so it may be captured into a
// CUDA graph. Returns the cudaError_t of the launch (0 = cudaSuccess). REQUIRES: dst does not
// overlap src.
int launch_transform(const TransformDesc& t, const void* src, void* dst, cudaStream_t stream);

}  // namespace convplan::rewrites
