// Field checks shared by ConvProblem::validate() and TransposedConvProblem::validate(). Each
// returns kInvalidArgument naming the field and its value, or ok.
#pragma once

#include <cstdint>

#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan::detail {

// cuDNN refuses tensors of more than 2^31-1 elements.
inline constexpr int64_t kMaxTensorElements = (int64_t{1} << 31) - 1;

Status check_spatial_dims(int spatial_dims);
Status check_enums(Direction direction, DataType data_type, DataType compute_type, Layout layout);
// "n=0 must be >= 1".
Status check_at_least(const char* field, int64_t value, int64_t minimum);
// "dilation[1]=0 must be >= 1", for the first spatial_dims entries.
Status check_spatial_at_least(const char* field, const SpatialDims& v, int spatial_dims,
                              int64_t minimum);
// Entries past spatial_dims must equal default_value.
Status check_spatial_defaults(const char* field, const SpatialDims& v, int spatial_dims,
                              int64_t default_value);
// "groups=3 does not divide c=64".
Status check_groups(int64_t groups, int64_t c, int64_t k, const char* c_name, const char* k_name);
// fp64 data needs fp64 compute, fp32 needs fp32, the half types fp32 or their own type.
Status check_types(DataType data_type, DataType compute_type);
// alpha and beta finite.
Status check_scaling(double alpha, double beta);
// The product of dims[0..rank) against kMaxTensorElements (and int64 overflow).
Status check_element_count(const char* tensor, const TensorStrides& dims, int rank);
// (input + pads - dilation*(filter-1) - 1) / stride + 1, or 0 when empty; no overflow possible.
// REQUIRES: filter, stride, dilation >= 1; pads >= 0.
__int128 output_size_wide(int64_t input, int64_t pad_before, int64_t pad_after, int64_t filter,
                          int64_t stride, int64_t dilation);

}  // namespace convplan::detail
