// The float64 CPU reference convolution for every problem: all three directions, 1-3 spatial
// dimensions, groups, padding (asymmetric), stride, dilation and any layout, with alpha/beta,
// and the forward direction's post-op chain (problem.h) in float64 too.
// Slow and simple by design; it is what every engine is checked against.
//
// Pure functions; safe from any number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "convplan/engine_config.h"
#include "convplan/export.h"
#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan {

// Buffers in the problem's memory layout (strides of x_shape(), w_shape(), y_shape()), each of
// its tensor's span_elements(). The direction's output tensor is read (for beta) and written;
// the others are only read. REQUIRES: problem.validate().ok() (else kInvalidArgument).
CONVPLAN_EXPORT Status reference_convolution(const ConvProblem& problem, std::vector<double>& x,
                                             std::vector<double>& w, std::vector<double>& y);
// The same with the post-op chain's tensors: bias of bias_shape().span_elements() values and
// residual of residual_shape().span_elements(), in their layouts; either may be empty when the
// chain does not use it (the overload above passes both empty). kInvalidArgument naming the
// tensor when the chain needs one that is too small.
CONVPLAN_EXPORT Status reference_convolution(const ConvProblem& problem, std::vector<double>& x,
                                             std::vector<double>& w, std::vector<double>& y,
                                             const std::vector<double>& bias,
                                             const std::vector<double>& residual);

// The chain's value at one output element: v the convolution's (alpha applied), bias the bias of
// the element's channel, residual the residual tensor's element (each read only when the chain
// has that op). Float64 throughout; the formulas are those of problem.h.
CONVPLAN_EXPORT double apply_post_ops(const PostOps& chain, double v, double bias, double residual);

// Host buffers of the chain's tensors for reference_convolution_at, of the problem's data type
// and in the layouts of bias_shape() and residual_shape(); null where the chain has no such op.
struct CONVPLAN_EXPORT PostOpTensors {
  const void* bias = nullptr;
  const void* residual = nullptr;
};

// The same convolution at chosen elements of the output tensor only, for problems too large for a
// full reference: out[i] = the value of the output element at offset offsets[i] (in elements,
// in the output tensor's layout) after the convolution. x, w and y are host buffers of the
// problem's data type and layout; the output tensor's buffer supplies the old value for beta.
// Cost per element: the products that make it (c/groups * filter for fwd, k/groups * filter for
// bwd_data, n * output size for bwd_filter). REQUIRES: problem.validate().ok().
CONVPLAN_EXPORT Status reference_convolution_at(const ConvProblem& problem, const void* x,
                                                const void* w, const void* y,
                                                const std::vector<int64_t>& offsets,
                                                std::vector<double>& out);
// The same with the chain's tensors (kInvalidArgument naming the tensor the chain needs and
// `post` lacks).
CONVPLAN_EXPORT Status reference_convolution_at(const ConvProblem& problem, const void* x,
                                                const void* w, const void* y, PostOpTensors post,
                                                const std::vector<int64_t>& offsets,
                                                std::vector<double>& out);

// The tuner's input data (the same on the host and on the device): the value of the element at
// `offset` (in elements) of a tensor filled from `seed`, a multiple of 1/128 in [-1, 1], exact in
// every floating data type. Backend::fill_hashed writes a tensor of these.
CONVPLAN_EXPORT double hashed_input_value(uint64_t seed, int64_t offset);
// The seeds of three tensors filled with hashed_input_value.
struct CONVPLAN_EXPORT HashedInputs {
  uint64_t x = 0, w = 0, y = 0;
};
// reference_convolution_at over tensors filled from seeds instead of host buffers: the values
// it reads are computed, so no host copy of the inputs is needed. The output tensor's seed gives
// its old values (read only when beta != 0). The values are those of the problem's data type
// (every hashed value is exact in every floating type).
CONVPLAN_EXPORT Status reference_convolution_at_hashed(const ConvProblem& problem,
                                                       const HashedInputs& seeds,
                                                       const std::vector<int64_t>& offsets,
                                                       std::vector<double>& out);
// Conversions between doubles and the problem's data type in host memory (fp16 and bf16 with
// round-to-nearest-even), for filling device buffers and reading them back.
CONVPLAN_EXPORT void to_data_type(DataType t, const double* src, void* dst, int64_t count);
CONVPLAN_EXPORT void from_data_type(DataType t, const void* src, double* dst, int64_t count);

// ||a - b||_2 / ||b||_2 (0 when both are zero; infinity when only b is zero or a has NaN).
CONVPLAN_EXPORT double relative_l2_error(const std::vector<double>& a,
                                         const std::vector<double>& b);

// The relative L2 error an engine with `notes` may have against the reference for the problem's
// types: 1e-12 fp64, 1e-5 fp32 without tensor cores, 5e-3 fp32 with TF32 (kNoteTensorCore or
// kNoteDownConvertInputs), 1e-2 fp16 and bf16.
CONVPLAN_EXPORT double relative_error_tolerance(const ConvProblem& problem, NoteSet notes);

}  // namespace convplan
