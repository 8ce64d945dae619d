// Geometry of a ConvProblem: output size, tensor shapes in each layout, work and traffic.
#include "convplan/problem.h"

namespace convplan {
namespace {

// Packed strides for logical dims (N, C, spatial...) in channels-first or channels-last order.
TensorStrides packed_strides(const TensorShape& s, Layout layout) {
  TensorStrides st{};
  if (layout == Layout::kChannelsLast) {
    int64_t acc = 1;
    st[1] = acc;
    acc *= s.dims[1];
    for (int d = s.rank - 1; d >= 2; --d) {
      st[d] = acc;
      acc *= s.dims[d];
    }
    st[0] = acc;
  } else {
    int64_t acc = 1;
    for (int d = s.rank - 1; d >= 0; --d) {
      st[d] = acc;
      acc *= s.dims[d];
    }
  }
  return st;
}

TensorShape make_shape(const ConvProblem& p, int64_t outer, int64_t channels,
                       const SpatialDims& spatial, const TensorStrides& explicit_strides) {
  TensorShape s;
  s.rank = p.spatial_dims + 2;
  s.dims[0] = outer;
  s.dims[1] = channels;
  for (int d = 0; d < p.spatial_dims; ++d) s.dims[2 + d] = spatial[d];
  s.strides = p.layout == Layout::kExplicit ? explicit_strides : packed_strides(s, p.layout);
  return s;
}

}  // namespace

const char* to_string(Direction d) {
  switch (d) {
    case Direction::kForward: return "fwd";
    case Direction::kBackwardData: return "bwd_data";
    case Direction::kBackwardFilter: return "bwd_filter";
  }
  return "?";
}

const char* to_string(DataType t) {
  switch (t) {
    case DataType::kFloat: return "f32";
    case DataType::kHalf: return "f16";
    case DataType::kBFloat16: return "bf16";
    case DataType::kDouble: return "f64";
  }
  return "?";
}

const char* to_string(TensorRole r) {
  switch (r) {
    case TensorRole::kX: return "x";
    case TensorRole::kW: return "w";
    case TensorRole::kY: return "y";
  }
  return "?";
}

const char* to_string(Layout l) {
  switch (l) {
    case Layout::kChannelsFirst: return "nchw";
    case Layout::kChannelsLast: return "nhwc";
    case Layout::kExplicit: return "explicit";
  }
  return "?";
}

int64_t size_of(DataType t) {
  switch (t) {
    case DataType::kFloat: return 4;
    case DataType::kHalf:
    case DataType::kBFloat16: return 2;
    case DataType::kDouble: return 8;
  }
  return 0;
}

DataType default_compute_type(DataType t) {
  return t == DataType::kDouble ? DataType::kDouble : DataType::kFloat;
}

int64_t TensorShape::elements() const {
  int64_t e = 1;
  for (int d = 0; d < rank; ++d) e *= dims[d];
  return e;
}

int64_t TensorShape::span_elements() const {
  int64_t last = 0;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 0) return 0;
    last += (dims[d] - 1) * strides[d];
  }
  return last + 1;
}

ConvProblem ConvProblem::with_data_type(ConvProblem p, DataType t) {
  p.data_type = t;
  p.compute_type = default_compute_type(t);
  return p;
}

SpatialDims ConvProblem::output() const {
  SpatialDims out{1, 1, 1};
  for (int d = 0; d < spatial_dims; ++d) {
    // 128-bit, as validate() computes it: paddings near 2^62 would overflow int64 here.
    const __int128 span = static_cast<__int128>(input[d]) + pad_before[d] + pad_after[d] -
                          static_cast<__int128>(dilation[d]) * (filter[d] - 1) - 1;
    const __int128 size = span < 0 || stride[d] <= 0 ? 0 : span / stride[d] + 1;
    out[d] = size > INT64_MAX ? INT64_MAX : static_cast<int64_t>(size);
  }
  return out;
}

TensorShape ConvProblem::x_shape() const { return make_shape(*this, n, c, input, x_strides); }
TensorShape ConvProblem::w_shape() const {
  return make_shape(*this, k, groups > 0 ? c / groups : 0, filter, w_strides);
}
TensorShape ConvProblem::y_shape() const { return make_shape(*this, n, k, output(), y_strides); }

TensorShape ConvProblem::bias_shape() const {
  TensorShape s;
  s.rank = spatial_dims + 2;
  for (int d = 0; d < s.rank; ++d) s.dims[d] = d == 1 ? k : 1;
  s.strides = packed_strides(
      s, layout == Layout::kChannelsLast ? Layout::kChannelsLast : Layout::kChannelsFirst);
  return s;
}

ConvProblem ConvProblem::without_post_ops() const {
  ConvProblem p = *this;
  p.post_ops = PostOps{};
  return p;
}

TensorRole ConvProblem::output_tensor() const {
  switch (direction) {
    case Direction::kForward: return TensorRole::kY;
    case Direction::kBackwardData: return TensorRole::kX;
    case Direction::kBackwardFilter: return TensorRole::kW;
  }
  return TensorRole::kY;
}

TensorShape ConvProblem::shape_of(TensorRole role) const {
  switch (role) {
    case TensorRole::kX: return x_shape();
    case TensorRole::kW: return w_shape();
    case TensorRole::kY: return y_shape();
  }
  return y_shape();
}

double ConvProblem::flops() const {
  // Each output element of each output channel sums (c / groups) * prod(filter) products.
  double macs = static_cast<double>(y_shape().elements()) * static_cast<double>(c / groups);
  for (int d = 0; d < spatial_dims; ++d) macs *= static_cast<double>(filter[d]);
  return 2.0 * macs;
}

double ConvProblem::min_bytes() const {
  const double e = static_cast<double>(size_of(data_type));
  const double xs = static_cast<double>(x_shape().elements());
  const double ws = static_cast<double>(w_shape().elements());
  const double ys = static_cast<double>(y_shape().elements());
  const double out = by_role(output_tensor(), xs, ws, ys);
  const double bias = post_ops.has(PostOpKind::kBias) ? static_cast<double>(k) : 0.0;
  const double residual = post_ops.has(PostOpKind::kAdd) ? ys : 0.0;
  return e * (xs + ws + ys + (beta != 0.0 ? out : 0.0) + bias + residual);
}

}  // namespace convplan
