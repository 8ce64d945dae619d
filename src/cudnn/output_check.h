// The tuner's output check on the device (output_check.cu): the poison scan over every element
// and the gather of the checked elements, so that only those come back to the host. Internal to
// src/cudnn.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan::cudnn_detail {

// Backend::read_output on `stream` (see backend.h), synchronized before it returns.
StatusOr<int64_t> read_output_on_device(cudaStream_t stream, const void* src,
                                        const TensorShape& shape, int64_t elem_bytes,
                                        bool scan_poison, const std::vector<int64_t>& offsets,
                                        void* dst);

// ok when `device` can run convplan's kernels; else kNotSupported naming the device, its compute
// capability and the architectures this library was built for (CMAKE_CUDA_ARCHITECTURES), so
// that the first use of a device says so instead of a failed kernel launch in the tuner.
Status check_device_architecture(int device);

// The message of check_device_architecture, for a device `name` of compute capability
// major.minor and the architectures `built` ("80-real;86-real;89-real;90").
std::string unsupported_architecture_message(int device, const std::string& name, int major,
                                             int minor, const std::string& built);

}  // namespace convplan::cudnn_detail
