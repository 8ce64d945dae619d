#include "cudnn/graph.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cudnn/check.h"

namespace convplan::cudnn_detail {
namespace {

// 1-D tensors get a size-1 dimension at logical index 2, strided as if packed just outside the
// problem's own spatial dimension (its stride times its size), so packed layouts stay packed.
TensorGeometry tensor_geometry(const TensorShape& s, bool expand) {
  TensorGeometry g;
  if (!expand) {
    g.rank = s.rank;
    for (int d = 0; d < s.rank; ++d) {
      g.dims[d] = s.dims[d];
      g.strides[d] = s.strides[d];
    }
    return g;
  }
  g.rank = 4;
  g.dims = {s.dims[0], s.dims[1], 1, s.dims[2], 0};
  g.strides = {s.strides[0], s.strides[1], s.strides[2] * s.dims[2], s.strides[2], 0};
  return g;
}

Status make_tensor(const TensorGeometry& g, int64_t uid, cudnnDataType_t type,
                   BackendDescriptor& out, bool is_virtual = false) {
  CONVPLAN_ASSIGN_OR_RETURN(out, BackendDescriptor::create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  const std::span<const int64_t> dims(g.dims.data(), static_cast<size_t>(g.rank));
  const std::span<const int64_t> strides(g.strides.data(), static_cast<size_t>(g.rank));
  CONVPLAN_CUDNN_CHECK(out.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  CONVPLAN_CUDNN_CHECK(out.set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims));
  CONVPLAN_CUDNN_CHECK(out.set_int64s(CUDNN_ATTR_TENSOR_STRIDES, strides));
  CONVPLAN_CUDNN_CHECK(out.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid));
  CONVPLAN_CUDNN_CHECK(out.set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, kTensorAlignment));
  if (is_virtual) {
    const bool v = true;
    CONVPLAN_CUDNN_CHECK(out.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
  }
  CONVPLAN_CUDNN_CHECK(out.finalize());
  return ok_status();
}

// The pointwise mode of a post-op and the attributes that make cuDNN's op ours (relu6 is a
// clipped relu, silu a swish with beta 1, elu with alpha 1).
Status make_pointwise(const PostOp& op, cudnnDataType_t precision, BackendDescriptor& out) {
  CONVPLAN_ASSIGN_OR_RETURN(out, BackendDescriptor::create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_ADD;
  switch (op.kind) {
    case PostOpKind::kBias:
    case PostOpKind::kAdd: mode = CUDNN_POINTWISE_ADD; break;
    case PostOpKind::kRelu:
    case PostOpKind::kRelu6: mode = CUDNN_POINTWISE_RELU_FWD; break;
    case PostOpKind::kGelu: mode = CUDNN_POINTWISE_GELU_FWD; break;
    case PostOpKind::kGeluTanh: mode = CUDNN_POINTWISE_GELU_APPROX_TANH_FWD; break;
    case PostOpKind::kSilu: mode = CUDNN_POINTWISE_SWISH_FWD; break;
    case PostOpKind::kSigmoid: mode = CUDNN_POINTWISE_SIGMOID_FWD; break;
    case PostOpKind::kTanh: mode = CUDNN_POINTWISE_TANH_FWD; break;
    case PostOpKind::kElu: mode = CUDNN_POINTWISE_ELU_FWD; break;
  }
  CONVPLAN_CUDNN_CHECK(out.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  CONVPLAN_CUDNN_CHECK(
      out.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision));
  const double zero = 0.0, one = 1.0, six = 6.0;
  if (op.kind == PostOpKind::kRelu6) {
    CONVPLAN_CUDNN_CHECK(
        out.set(CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &zero));
    CONVPLAN_CUDNN_CHECK(out.set(CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &six));
  }
  if (op.kind == PostOpKind::kSilu) {
    CONVPLAN_CUDNN_CHECK(out.set(CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_DOUBLE, 1, &one));
  }
  if (op.kind == PostOpKind::kElu) {
    CONVPLAN_CUDNN_CHECK(out.set(CUDNN_ATTR_POINTWISE_ELU_ALPHA, CUDNN_TYPE_DOUBLE, 1, &one));
  }
  CONVPLAN_CUDNN_CHECK(out.finalize());
  return ok_status();
}

// One pointwise operation: out = mode(in) or, for bias and add, in + alpha2 * b.
Status make_pointwise_operation(const PostOp& op, const BackendDescriptor& pointwise,
                                const BackendDescriptor& in, const BackendDescriptor* b,
                                const BackendDescriptor& out_tensor, bool double_scale,
                                BackendDescriptor& out) {
  CONVPLAN_ASSIGN_OR_RETURN(
      out, BackendDescriptor::create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pointwise));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, in));
  if (b != nullptr)
    CONVPLAN_CUDNN_CHECK(out.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, out_tensor));
  if (op.kind == PostOpKind::kAdd && op.scale != 1.0) {
    if (double_scale) {
      const double scale = op.scale;
      CONVPLAN_CUDNN_CHECK(
          out.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_DOUBLE, 1, &scale));
    } else {
      const float scale = static_cast<float>(op.scale);
      CONVPLAN_CUDNN_CHECK(
          out.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &scale));
    }
  }
  CONVPLAN_CUDNN_CHECK(out.finalize());
  return ok_status();
}

Status make_convolution(const ConvGeometry& g, const ConvProblem& p, BackendDescriptor& out) {
  CONVPLAN_ASSIGN_OR_RETURN(out, BackendDescriptor::create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  const cudnnDataType_t compute = cudnn_data_type(p.compute_type);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const size_t n = static_cast<size_t>(g.spatial_dims);
  CONVPLAN_CUDNN_CHECK(
      out.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
  CONVPLAN_CUDNN_CHECK(
      out.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  CONVPLAN_CUDNN_CHECK(out.set_int64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, g.spatial_dims));
  CONVPLAN_CUDNN_CHECK(out.set_int64s(CUDNN_ATTR_CONVOLUTION_DILATIONS, {g.dilation.data(), n}));
  CONVPLAN_CUDNN_CHECK(out.set_int64s(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {g.stride.data(), n}));
  CONVPLAN_CUDNN_CHECK(
      out.set_int64s(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {g.pre_padding.data(), n}));
  CONVPLAN_CUDNN_CHECK(
      out.set_int64s(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {g.post_padding.data(), n}));
  CONVPLAN_CUDNN_CHECK(out.finalize());
  return ok_status();
}

struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OperationAttributes operation_attributes(Direction d) {
  switch (d) {
    case Direction::kForward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case Direction::kBackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case Direction::kBackwardFilter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  return operation_attributes(Direction::kForward);
}

// `y` is what the convolution writes: g.y, or the chain's first virtual tensor.
Status make_operation(const ConvProblem& p, const ConvGraph& g, const BackendDescriptor& y,
                      BackendDescriptor& out) {
  const OperationAttributes a = operation_attributes(p.direction);
  CONVPLAN_ASSIGN_OR_RETURN(out, BackendDescriptor::create(a.type));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(a.x, g.x));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(a.w, g.w));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(a.y, y));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(a.conv, g.conv));
  // Scaling factors in the compute type's width: double for fp64 compute, float otherwise.
  if (p.compute_type == DataType::kDouble) {
    const double alpha = p.alpha, beta = p.beta;
    CONVPLAN_CUDNN_CHECK(out.set(a.alpha, CUDNN_TYPE_DOUBLE, 1, &alpha));
    CONVPLAN_CUDNN_CHECK(out.set(a.beta, CUDNN_TYPE_DOUBLE, 1, &beta));
  } else {
    const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
    CONVPLAN_CUDNN_CHECK(out.set(a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
    CONVPLAN_CUDNN_CHECK(out.set(a.beta, CUDNN_TYPE_FLOAT, 1, &beta));
  }
  CONVPLAN_CUDNN_CHECK(out.finalize());
  return ok_status();
}

// The chain's descriptors into g.post, in this order: bias, residual (where the chain has them),
// then per op: its input virtual tensor, pointwise descriptor, operation. The operations are
// appended to `ops`. The convolution's output is g.post[conv_output].
struct ChainParts {
  size_t conv_output = 0;  // index in g.post of the convolution's output tensor
};

Status make_chain_tensors(const ConvProblem& p, const ConvGeometry& geometry, ConvGraph& g,
                          ChainParts& parts) {
  const cudnnDataType_t type = cudnn_data_type(p.data_type);
  const bool expand = p.spatial_dims == 1;
  auto add_tensor = [&](const TensorGeometry& tg, int64_t uid, cudnnDataType_t t, bool v,
                        const char* what) -> Status {
    BackendDescriptor d;
    CONVPLAN_RETURN_IF_ERROR(make_tensor(tg, uid, t, d, v).with_context(what));
    g.post.push_back(std::move(d));
    return ok_status();
  };
  if (p.post_ops.has(PostOpKind::kBias)) {
    CONVPLAN_RETURN_IF_ERROR(
        add_tensor(tensor_geometry(p.bias_shape(), expand), kUidBias, type, false, "tensor bias"));
  }
  if (p.post_ops.has(PostOpKind::kAdd)) {
    CONVPLAN_RETURN_IF_ERROR(add_tensor(geometry.y, kUidResidual, type, false, "tensor residual"));
  }
  parts.conv_output = g.post.size();
  const cudnnDataType_t compute =
      cudnn_data_type(p.compute_type == DataType::kDouble ? DataType::kDouble : DataType::kFloat);
  for (int i = 0; i < p.post_ops.count; ++i) {
    CONVPLAN_RETURN_IF_ERROR(
        add_tensor(geometry.y, kUidVirtual + i, compute, true, "virtual tensor of the chain"));
  }
  return ok_status();
}

Status make_chain_operations(const ConvProblem& p, ConvGraph& g, const ChainParts& parts,
                             std::vector<BackendDescriptor>& ops) {
  const bool f64 = p.compute_type == DataType::kDouble;
  const cudnnDataType_t precision = f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  // Indices, not references: g.post grows below.
  const size_t bias = p.post_ops.has(PostOpKind::kBias) ? 0 : SIZE_MAX;
  const size_t residual = p.post_ops.has(PostOpKind::kAdd) ? (bias == 0 ? 1 : 0) : SIZE_MAX;
  for (int i = 0; i < p.post_ops.count; ++i) {
    const PostOp& op = p.post_ops.ops[static_cast<size_t>(i)];
    BackendDescriptor pointwise, operation;
    CONVPLAN_RETURN_IF_ERROR(make_pointwise(op, precision, pointwise)
                                 .with_context(std::string("pointwise ") + to_string(op.kind)));
    const BackendDescriptor& in = g.post[parts.conv_output + static_cast<size_t>(i)];
    const bool last = i + 1 == p.post_ops.count;
    const BackendDescriptor& out =
        last ? g.y : g.post[parts.conv_output + static_cast<size_t>(i) + 1];
    const BackendDescriptor* b = op.kind == PostOpKind::kBias  ? &g.post[bias]
                                 : op.kind == PostOpKind::kAdd ? &g.post[residual]
                                                               : nullptr;
    CONVPLAN_RETURN_IF_ERROR(
        make_pointwise_operation(op, pointwise, in, b, out, f64, operation)
            .with_context(std::string("pointwise operation ") + to_string(op.kind)));
    ops.push_back(std::move(pointwise));
    ops.push_back(std::move(operation));
  }
  return ok_status();
}

}  // namespace

cudnnDataType_t cudnn_data_type(DataType t) {
  switch (t) {
    case DataType::kFloat: return CUDNN_DATA_FLOAT;
    case DataType::kHalf: return CUDNN_DATA_HALF;
    case DataType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    case DataType::kDouble: return CUDNN_DATA_DOUBLE;
  }
  return CUDNN_DATA_FLOAT;
}

ConvGeometry conv_geometry(const ConvProblem& p) {
  const bool expand = p.spatial_dims == 1;
  ConvGeometry g;
  g.spatial_dims = expand ? 2 : p.spatial_dims;
  g.x = tensor_geometry(p.x_shape(), expand);
  g.w = tensor_geometry(p.w_shape(), expand);
  g.y = tensor_geometry(p.y_shape(), expand);
  const int offset = expand ? 1 : 0;  // the inserted dimension comes first
  g.pre_padding.fill(0);
  g.post_padding.fill(0);
  g.stride.fill(1);
  g.dilation.fill(1);
  for (int d = 0; d < p.spatial_dims; ++d) {
    g.pre_padding[d + offset] = p.pad_before[d];
    g.post_padding[d + offset] = p.pad_after[d];
    g.stride[d + offset] = p.stride[d];
    g.dilation[d + offset] = p.dilation[d];
  }
  return g;
}

StatusOr<ConvGraph> build_conv_graph(cudnnHandle_t handle, const ConvProblem& p,
                                     bool dynamic_shape) {
  CONVPLAN_RETURN_IF_ERROR(p.validate());
  const ConvGeometry geometry = conv_geometry(p);
  const cudnnDataType_t type = cudnn_data_type(p.data_type);
  ConvGraph g;
  CONVPLAN_RETURN_IF_ERROR(make_tensor(geometry.x, kUidX, type, g.x).with_context("tensor x"));
  CONVPLAN_RETURN_IF_ERROR(make_tensor(geometry.w, kUidW, type, g.w).with_context("tensor w"));
  CONVPLAN_RETURN_IF_ERROR(make_tensor(geometry.y, kUidY, type, g.y).with_context("tensor y"));
  CONVPLAN_RETURN_IF_ERROR(
      make_convolution(geometry, p, g.conv).with_context("convolution descriptor"));
  ChainParts parts;
  std::vector<BackendDescriptor> chain_ops;
  if (!p.post_ops.empty()) CONVPLAN_RETURN_IF_ERROR(make_chain_tensors(p, geometry, g, parts));
  const BackendDescriptor& conv_output = p.post_ops.empty() ? g.y : g.post[parts.conv_output];
  CONVPLAN_RETURN_IF_ERROR(make_operation(p, g, conv_output, g.operation)
                               .with_context(std::string(to_string(p.direction)) + " operation"));
  if (!p.post_ops.empty()) CONVPLAN_RETURN_IF_ERROR(make_chain_operations(p, g, parts, chain_ops));
  CONVPLAN_ASSIGN_OR_RETURN(g.graph,
                            BackendDescriptor::create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  if (handle != nullptr) {
    CONVPLAN_CUDNN_CHECK(
        g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  }
  std::vector<cudnnBackendDescriptor_t> ops{g.operation.get()};
  for (const BackendDescriptor& d : chain_ops) {
    if (d.type() == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) ops.push_back(d.get());
  }
  for (BackendDescriptor& d : chain_ops) g.post.push_back(std::move(d));
  CONVPLAN_CUDNN_CHECK(g.graph.set_descriptors(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops));
  if (dynamic_shape) {
    const bool on = true;
    CONVPLAN_CUDNN_CHECK(g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED,
                                     CUDNN_TYPE_BOOLEAN, 1, &on));
  }
  CONVPLAN_CUDNN_CHECK(g.graph.finalize());
  return g;
}

}  // namespace convplan::cudnn_detail
