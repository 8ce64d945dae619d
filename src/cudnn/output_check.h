// The tuner's output check on the device (output_check.cu): the poison scan over every element
// and the gather of the checked elements, so that only those come back to the host. Internal to
// src/cudnn.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan::cudnn_detail {

// Backend::read_output on `stream` (see backend.h), synchronized before it returns.
StatusOr<int64_t> read_output_on_device(cudaStream_t stream, const void* src,
                                        const TensorShape& shape, int64_t elem_bytes,
                                        bool scan_poison, const std::vector<int64_t>& offsets,
                                        void* dst);

}  // namespace convplan::cudnn_detail
