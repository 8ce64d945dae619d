// The cuDNN operation graph of one ConvProblem: tensors x, w, y, the convolution descriptor, the
// forward / backward-data / backward-filter operation and the finalized graph.
//
// cuDNN needs tensors of rank >= 4, so a 1-D problem is expanded to 2-D with a size-1 spatial
// dimension in front of the problem's own (filter 1, stride 1, dilation 1, no padding); groups are
// implied by w's channel dimension (c / groups). Internal to src/cudnn.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>

#include "convplan/problem.h"
#include "convplan/status.h"
#include "cudnn/descriptor.h"

namespace convplan::cudnn_detail {

// Unique ids of the three tensors in every graph (and so in every variant pack and plan JSON).
inline constexpr int64_t kUidX = 'x';
inline constexpr int64_t kUidW = 'w';
inline constexpr int64_t kUidY = 'y';
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
};

// A finalized graph for the problem. `handle` may be null: the graph is then built for no
// particular device (CUDNN_ATTR_OPERATIONGRAPH_HANDLE unset), which is enough for engine
// enumeration without a GPU but not for building plans. kInvalidArgument for an invalid problem;
// cuDNN's refusal (kNotSupported, kCudnnError) otherwise.
StatusOr<ConvGraph> build_conv_graph(cudnnHandle_t handle, const ConvProblem& problem);

}  // namespace convplan::cudnn_detail
