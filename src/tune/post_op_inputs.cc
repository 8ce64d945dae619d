#include "tune/post_op_inputs.h"

#include <string>
#include <utility>

#include "convplan/reference.h"

namespace convplan::tune_detail {
namespace {

// One tensor: random values (exact in the data type) on the host, uploaded to a new buffer.
Status make_tensor(Backend& backend, cudnnHandle_t handle, DeviceAllocator& allocator,
                   const ConvProblem& problem, const TensorShape& shape, uint64_t seed,
                   const char* name, std::vector<double>& host, DeviceBuffer& buffer) {
  const int64_t span = shape.span_elements();
  host.resize(static_cast<size_t>(span));
  for (int64_t i = 0; i < span; ++i) host[static_cast<size_t>(i)] = tuning_value(seed, i);
  std::vector<uint8_t> bytes(static_cast<size_t>(span * size_of(problem.data_type)));
  to_data_type(problem.data_type, host.data(), bytes.data(), span);
  StatusOr<DeviceBuffer> b = DeviceBuffer::allocate(allocator, bytes.size());
  if (!b.ok()) {
    return b.status().with_context(std::string("tuning buffer for ") + name + " of " +
                                   problem.to_string());
  }
  buffer = std::move(b).value();
  return backend.copy_to_device(handle, buffer.get(), bytes.data(), bytes.size());
}

}  // namespace

double tuning_value(uint64_t seed, int64_t i) {
  uint64_t z = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (static_cast<double>(z % 257) - 128.0) / 128.0;
}

Status PostOpInputs::prepare(Backend& backend, cudnnHandle_t handle, DeviceAllocator& allocator,
                             const ConvProblem& problem, uint64_t seed) {
  if (problem.post_ops.has(PostOpKind::kBias)) {
    CONVPLAN_RETURN_IF_ERROR(make_tensor(backend, handle, allocator, problem, problem.bias_shape(),
                                         seed, "bias", bias_, bias_buffer_));
  }
  if (problem.post_ops.has(PostOpKind::kAdd)) {
    CONVPLAN_RETURN_IF_ERROR(make_tensor(backend, handle, allocator, problem,
                                         problem.residual_shape(), seed ^ 0x5EED5EEDull, "residual",
                                         residual_, residual_buffer_));
  }
  return ok_status();
}

void PostOpInputs::attach(TensorPointers& tensors) const {
  tensors.bias = bias_buffer_.get();
  tensors.residual = residual_buffer_.get();
}

void PostOpInputs::apply(const ConvProblem& problem, const std::vector<int64_t>& offsets,
                         std::vector<double>& values) const {
  if (problem.post_ops.empty()) return;
  const TensorShape y = problem.y_shape();
  const int64_t bias_stride = problem.bias_shape().strides[1];
  for (size_t i = 0; i < offsets.size() && i < values.size(); ++i) {
    // The channel of a y offset: its index along dimension 1 (any layout: strides are distinct
    // for every dimension of size > 1, and k == 1 means channel 0).
    int64_t channel = 0;
    if (y.dims[1] > 1) {
      int64_t rest = offsets[i];
      // Peel the dimensions off from the largest stride down, as the reference's unravel.
      int order[kMaxTensorRank];
      for (int d = 0; d < y.rank; ++d) order[d] = d;
      for (int a = 0; a < y.rank; ++a)
        for (int b = a + 1; b < y.rank; ++b)
          if (y.strides[order[b]] > y.strides[order[a]]) std::swap(order[a], order[b]);
      for (int a = 0; a < y.rank; ++a) {
        const int d = order[a];
        if (y.dims[d] == 1) continue;
        const int64_t index = rest / y.strides[d];
        rest -= index * y.strides[d];
        if (d == 1) channel = index;
      }
    }
    const double b = bias_.empty() ? 0.0 : bias_[static_cast<size_t>(channel * bias_stride)];
    const double r = residual_.empty() ? 0.0 : residual_[static_cast<size_t>(offsets[i])];
    values[i] = apply_post_ops(problem.post_ops, values[i], b, r);
  }
}

}  // namespace convplan::tune_detail
