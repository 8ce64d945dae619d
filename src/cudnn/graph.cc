#include "cudnn/graph.h"

#include <span>

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
                   BackendDescriptor& out) {
  CONVPLAN_ASSIGN_OR_RETURN(out, BackendDescriptor::create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  const std::span<const int64_t> dims(g.dims.data(), static_cast<size_t>(g.rank));
  const std::span<const int64_t> strides(g.strides.data(), static_cast<size_t>(g.rank));
  CONVPLAN_CUDNN_CHECK(out.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  CONVPLAN_CUDNN_CHECK(out.set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims));
  CONVPLAN_CUDNN_CHECK(out.set_int64s(CUDNN_ATTR_TENSOR_STRIDES, strides));
  CONVPLAN_CUDNN_CHECK(out.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid));
  CONVPLAN_CUDNN_CHECK(out.set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, kTensorAlignment));
  CONVPLAN_CUDNN_CHECK(out.finalize());
  return ok_status();
}

Status make_convolution(const ConvGeometry& g, const ConvProblem& p, BackendDescriptor& out) {
  CONVPLAN_ASSIGN_OR_RETURN(out, BackendDescriptor::create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  const cudnnDataType_t compute = cudnn_data_type(p.compute_type);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const size_t n = static_cast<size_t>(g.spatial_dims);
  CONVPLAN_CUDNN_CHECK(out.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute));
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

Status make_operation(const ConvProblem& p, const ConvGraph& g, BackendDescriptor& out) {
  const OperationAttributes a = operation_attributes(p.direction);
  CONVPLAN_ASSIGN_OR_RETURN(out, BackendDescriptor::create(a.type));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(a.x, g.x));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(a.w, g.w));
  CONVPLAN_CUDNN_CHECK(out.set_descriptor(a.y, g.y));
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

StatusOr<ConvGraph> build_conv_graph(cudnnHandle_t handle, const ConvProblem& p) {
  CONVPLAN_RETURN_IF_ERROR(p.validate());
  const ConvGeometry geometry = conv_geometry(p);
  const cudnnDataType_t type = cudnn_data_type(p.data_type);
  ConvGraph g;
  CONVPLAN_RETURN_IF_ERROR(make_tensor(geometry.x, kUidX, type, g.x).with_context("tensor x"));
  CONVPLAN_RETURN_IF_ERROR(make_tensor(geometry.w, kUidW, type, g.w).with_context("tensor w"));
  CONVPLAN_RETURN_IF_ERROR(make_tensor(geometry.y, kUidY, type, g.y).with_context("tensor y"));
  CONVPLAN_RETURN_IF_ERROR(
      make_convolution(geometry, p, g.conv).with_context("convolution descriptor"));
  CONVPLAN_RETURN_IF_ERROR(
      make_operation(p, g, g.operation).with_context(std::string(to_string(p.direction)) +
                                                     " operation"));
  CONVPLAN_ASSIGN_OR_RETURN(g.graph,
                            BackendDescriptor::create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  if (handle != nullptr) {
    CONVPLAN_CUDNN_CHECK(
        g.graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
  }
  const cudnnBackendDescriptor_t ops[] = {g.operation.get()};
  CONVPLAN_CUDNN_CHECK(g.graph.set_descriptors(CUDNN_ATTR_OPERATIONGRAPH_OPS, ops));
  CONVPLAN_CUDNN_CHECK(g.graph.finalize());
  return g;
}

}  // namespace convplan::cudnn_detail
