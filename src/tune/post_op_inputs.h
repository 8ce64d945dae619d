// PostOpInputs: what a tune of a problem with a post-op chain needs besides x, w and y: the bias
// and residual tensors on the device (random multiples of 1/128 in [-1, 1], exact in every type,
// uploaded once and only read by candidates), and the chain applied in float64 to the reference
// values of the plain convolution at the checked output elements. Kept apart from tuner.cc, which
// calls it in three places (prepare, pointers, reference). Used by one tune, one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "convplan/backend.h"
#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan::tune_detail {

class PostOpInputs {
 public:
  // Makes the tensors the problem's chain reads (none without bias or add) on `handle`'s device.
  Status prepare(Backend& backend, cudnnHandle_t handle, DeviceAllocator& allocator,
                 const ConvProblem& problem, uint64_t seed);
  // Sets tensors.bias and tensors.residual (null where the chain has no such op).
  void attach(TensorPointers& tensors) const;
  // values[i], the plain convolution's reference at y offset offsets[i], becomes the chain's.
  void apply(const ConvProblem& problem, const std::vector<int64_t>& offsets,
             std::vector<double>& values) const;

 private:
  std::vector<double> bias_;      // bias_shape()'s span, as the device holds it
  std::vector<double> residual_;  // residual_shape()'s span
  DeviceBuffer bias_buffer_;
  DeviceBuffer residual_buffer_;
};

// Values of multiples of 1/128 in [-1, 1] from a splitmix64 counter: element i of a stream seeded
// with `seed` (the tuner's own input data use the same rule).
double tuning_value(uint64_t seed, int64_t i);

}  // namespace convplan::tune_detail
