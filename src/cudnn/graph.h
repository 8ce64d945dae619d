// The cuDNN operation graph of one ConvProblem: tensors x, w, y, the convolution descriptor, the
// forward / backward-data / backward-filter operation and the finalized graph. A forward problem
// with a post-op chain gets conv -> pointwise -> ... -> pointwise: the convolution writes a
// virtual tensor of the compute type, each op of the chain one more, and the last one writes y;
// bias and add read the tensors kUidBias and kUidResidual.
//
// cuDNN needs tensors of rank >= 4, so a 1-D problem is expanded to 2-D with a size-1 spatial
// dimension in front of the problem's own (filter 1, stride 1, dilation 1, no padding); groups are
// implied by w's channel dimension (c / groups). Internal to src/cudnn.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <vector>

#include "convplan/problem.h"
#include "convplan/status.h"
#include "cudnn/descriptor.h"

namespace convplan::cudnn_detail {

// Unique ids of the three tensors in every graph (and so in every variant pack and plan JSON).
inline constexpr int64_t kUidX = 'x';
inline constexpr int64_t kUidW = 'w';
inline constexpr int64_t kUidY = 'y';
inline constexpr int64_t kUidBias = 'b';
inline constexpr int64_t kUidResidual = 'r';
// The chain's virtual tensors: kUidVirtual + i is the input of op i (the convolution's output
// for i = 0). They never appear in variant packs.
inline constexpr int64_t kUidVirtual = 1000;
// Byte alignment declared for every tensor; execute() checks the pointers against it.
inline constexpr int64_t kTensorAlignment = 16;

struct TensorGeometry {
  int rank = 0;  // 4 or 5
  std::array<int64_t, kMaxTensorRank> dims{};
  std::array<int64_t, kMaxTensorRank> strides{};
};

// What cuDNN is told: the problem's shapes in logical order (N, C, spatial...), 1-D expanded.
struct ConvGeometry {
  int spatial_dims = 0;  // 2 or 3
  TensorGeometry x, w, y;
  std::array<int64_t, kMaxSpatialDims> pre_padding{};
  std::array<int64_t, kMaxSpatialDims> post_padding{};
  std::array<int64_t, kMaxSpatialDims> stride{};
  std::array<int64_t, kMaxSpatialDims> dilation{};
};

// REQUIRES: problem.validate().ok().
ConvGeometry conv_geometry(const ConvProblem& problem);
cudnnDataType_t cudnn_data_type(DataType t);

struct ConvGraph {
  BackendDescriptor x, w, y, conv, operation, graph;
  // The chain's descriptors (none without one): its tensors, pointwise descriptors and
  // operations, kept alive as long as the graph.
  std::vector<BackendDescriptor> post;
};

// A finalized graph for the problem. `handle` may be null: the graph is then built for no
// particular device (CUDNN_ATTR_OPERATIONGRAPH_HANDLE unset), which is enough for engine
// enumeration without a GPU but not for building plans. kInvalidArgument for an invalid problem;
// cuDNN's refusal (kNotSupported, kCudnnError) otherwise.
StatusOr<ConvGraph> build_conv_graph(cudnnHandle_t handle, const ConvProblem& problem,
                                     bool dynamic_shape = false);

}  // namespace convplan::cudnn_detail
