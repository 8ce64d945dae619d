// TransposedConvProblem: a deconvolution, and the ordinary convolution that computes each of its
// passes.
//
// A deconvolution writes out[o] += in[i] * w[r] for o = i*stride - pad_before + r*dilation, the
// adjoint of the convolution y[i] += x[i*stride - pad_before + r*dilation] * w[r]. So the conv
// whose x is the deconvolution's output side and whose y is its input side computes every pass:
// the deconvolution's forward is that conv's backward-data, its backward-data the conv's forward,
// its backward-filter the conv's backward-filter (with the conv's y := the deconvolution's input).
//
// The conv has the deconvolution's padding, stride and dilation. Only when output_padding >=
// stride (allowed when output_padding < dilation) does the conv's pad_after shrink, so that the
// conv's output is exactly the deconvolution's input again; when that would need a negative pad
// the pass is kNotSupported.
#include <algorithm>
#include <string>

#include "convplan/problem.h"
#include "core/problem_checks.h"

namespace convplan {
namespace {

// The conv's pad_after for one dimension: the deconvolution's, unless output_padding >= stride.
// The conv's output (O + pb + pa' - ext)/stride + 1 equals the deconvolution's input I exactly
// when pa' is in [pa - op, pa - op + stride - 1]; the largest such value not above pa is taken.
int64_t conv_pad_after(int64_t pad_after, int64_t output_padding, int64_t stride) {
  return std::min(pad_after, pad_after - output_padding + stride - 1);
}

}  // namespace

SpatialDims TransposedConvProblem::output() const {
  SpatialDims out{1, 1, 1};
  for (int d = 0; d < spatial_dims && d < kMaxSpatialDims; ++d) {
    out[d] = (input[d] - 1) * stride[d] - pad_before[d] - pad_after[d] +
             dilation[d] * (filter[d] - 1) + output_padding[d] + 1;
  }
  return out;
}

Status TransposedConvProblem::validate() const {
  using namespace detail;  // NOLINT: the shared checks are this function's vocabulary
  CONVPLAN_RETURN_IF_ERROR(check_spatial_dims(spatial_dims));
  CONVPLAN_RETURN_IF_ERROR(check_enums(Direction::kForward, data_type, compute_type, layout));
  if (layout == Layout::kExplicit) {
    return invalid_argument(
        "layout=explicit is not offered for transposed convolutions (use nchw or nhwc)");
  }
  CONVPLAN_RETURN_IF_ERROR(check_at_least("n", n, 1));
  CONVPLAN_RETURN_IF_ERROR(check_at_least("c", c, 1));
  CONVPLAN_RETURN_IF_ERROR(check_at_least("k", k, 1));
  CONVPLAN_RETURN_IF_ERROR(check_at_least("groups", groups, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("input", input, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("filter", filter, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("pad_before", pad_before, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("pad_after", pad_after, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("stride", stride, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_at_least("dilation", dilation, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(
      check_spatial_at_least("output_padding", output_padding, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("input", input, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("filter", filter, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("pad_before", pad_before, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("pad_after", pad_after, spatial_dims, 0));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("stride", stride, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(check_spatial_defaults("dilation", dilation, spatial_dims, 1));
  CONVPLAN_RETURN_IF_ERROR(
      check_spatial_defaults("output_padding", output_padding, spatial_dims, 0));
  for (int d = 0; d < spatial_dims; ++d) {
    if (output_padding[d] >= stride[d] && output_padding[d] >= dilation[d]) {
      return invalid_argument(
          "output_padding[" + std::to_string(d) + "]=" + std::to_string(output_padding[d]) +
          " must be < stride[" + std::to_string(d) + "]=" + std::to_string(stride[d]) +
          " or < dilation[" + std::to_string(d) + "]=" + std::to_string(dilation[d]));
    }
  }
  CONVPLAN_RETURN_IF_ERROR(check_groups(groups, c, k, "c", "k"));
  CONVPLAN_RETURN_IF_ERROR(check_types(data_type, compute_type));
  CONVPLAN_RETURN_IF_ERROR(check_scaling(alpha, beta));

  // The output size in 128 bits: (input-1)*stride can overflow int64 for absurd sizes.
  TensorStrides out_dims{};
  out_dims[0] = n;
  out_dims[1] = k;
  for (int d = 0; d < spatial_dims; ++d) {
    const __int128 o = static_cast<__int128>(input[d] - 1) * stride[d] - pad_before[d] -
                       pad_after[d] + static_cast<__int128>(dilation[d]) * (filter[d] - 1) +
                       output_padding[d] + 1;
    if (o < 1) {
      return invalid_argument("output[" + std::to_string(d) +
                              "]=" + std::to_string(static_cast<int64_t>(o)) +
                              " is empty: (input-1)*stride + dilation*(filter-1) + output_padding "
                              "+ 1 <= pads " +
                              std::to_string(pad_before[d]) + "+" + std::to_string(pad_after[d]));
    }
    out_dims[2 + d] = o > kMaxTensorElements ? kMaxTensorElements + 1 : static_cast<int64_t>(o);
  }
  TensorStrides in_dims{};
  in_dims[0] = n;
  in_dims[1] = c;
  TensorStrides w_dims{};
  w_dims[0] = c;
  w_dims[1] = k / groups;
  for (int d = 0; d < spatial_dims; ++d) {
    in_dims[2 + d] = input[d];
    w_dims[2 + d] = filter[d];
  }
  const int rank = spatial_dims + 2;
  CONVPLAN_RETURN_IF_ERROR(check_element_count("input tensor", in_dims, rank));
  CONVPLAN_RETURN_IF_ERROR(check_element_count("weight tensor", w_dims, rank));
  CONVPLAN_RETURN_IF_ERROR(check_element_count("output tensor", out_dims, rank));
  return ok_status();
}

StatusOr<ConvProblem> TransposedConvProblem::to_conv(TransposedPass pass) const {
  CONVPLAN_RETURN_IF_ERROR(validate());
  ConvProblem conv;
  switch (pass) {
    case TransposedPass::kForward: conv.direction = Direction::kBackwardData; break;
    case TransposedPass::kBackwardData: conv.direction = Direction::kForward; break;
    case TransposedPass::kBackwardFilter: conv.direction = Direction::kBackwardFilter; break;
    default:
      return invalid_argument("pass=" + std::to_string(static_cast<int>(pass)) +
                              " is not a transposed-convolution pass");
  }
  conv.spatial_dims = spatial_dims;
  conv.n = n;
  conv.c = k;  // the conv's x is the deconvolution's output
  conv.k = c;  // its y the deconvolution's input
  conv.groups = groups;
  conv.input = output();
  conv.filter = filter;
  conv.pad_before = pad_before;
  conv.stride = stride;
  conv.dilation = dilation;
  for (int d = 0; d < spatial_dims; ++d) {
    conv.pad_after[d] = conv_pad_after(pad_after[d], output_padding[d], stride[d]);
    if (conv.pad_after[d] < 0) {
      return not_supported(
          "output_padding[" + std::to_string(d) + "]=" + std::to_string(output_padding[d]) +
          " >= stride[" + std::to_string(d) + "]=" + std::to_string(stride[d]) +
          " with pad_after[" + std::to_string(d) + "]=" + std::to_string(pad_after[d]) +
          " needs a negative pad in the equivalent convolution");
    }
  }
  conv.data_type = data_type;
  conv.compute_type = compute_type;
  conv.allow_tensor_cores = allow_tensor_cores;
  conv.layout = layout;
  conv.alpha = alpha;
  conv.beta = beta;
  CONVPLAN_RETURN_IF_ERROR(conv.validate().with_context("the equivalent convolution"));
  if (conv.output() != input) {
    return internal_error(
        "the equivalent convolution's output does not match the transposed "
        "convolution's input");
  }
  return conv;
}

}  // namespace convplan
