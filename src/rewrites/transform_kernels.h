// The CUDA side of the rewrite transforms: one launch per transform, on the caller's stream.
// C++17, so that nvcc compiles it without convplan's C++20 headers.
#pragma once

#include "rewrites/transform.h"

typedef struct CUstream_st* cudaStream_t;

namespace convplan::rewrites {

// Which kernel moves a channels-last transform whose rows split into 16-byte vectors (row_stage.h):
// kStaged stages a tile of rows through shared memory, then writes it; kPipelined keeps its blocks
// resident and copies the next tile in (cp.async on sm_80 and later) while it writes this one, and
// falls back to kStaged where its loads would not be 16 bytes or its two buffers do not fit.
// Both write the same bytes (the gather's). Other transforms take the gather kernels either way.
enum class TransformKernel { kStaged, kPipelined };
inline constexpr TransformKernel kDefaultTransformKernel = TransformKernel::kPipelined;

// Enqueues dst[i] = src[source_offset(t, i)] (0 where -1; alpha/beta applied when t.scaled())
// for every destination element. Allocates and synchronizes nothing, so it may be captured into a
// CUDA graph. Returns the cudaError_t of the launch (0 = cudaSuccess). REQUIRES: dst does not
// overlap src.
int launch_transform(const TransformDesc& t, const void* src, void* dst, cudaStream_t stream,
                     TransformKernel kernel = kDefaultTransformKernel);

}  // namespace convplan::rewrites
