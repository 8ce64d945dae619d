// Plumbing shared by the cache tests: small problems, host "device" buffers with random inputs
// and a poisoned output, the check against the float64 reference, and a cache factory.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "convplan/plan_cache.h"
#include "support/scripted_backend.h"

namespace convplan::testing {

// The i-th of a family of distinct, small, valid problems of mixed directions, types of geometry
// (padding, stride, dilation, groups, 1-3 spatial dims) and layouts; cheap enough that the
// scripted backend's reference-backed execution takes microseconds.
ConvProblem small_problem(int i);
std::vector<ConvProblem> small_problems(int count);

// The three tensors of a problem in host memory, as the scripted backend's "device" memory:
// inputs random (fresh per seed), the output poisoned with NaN.
class ProblemBuffers {
 public:
  ProblemBuffers(const ConvProblem& problem, uint32_t seed);
  TensorPointers pointers() { return {x_.data(), w_.data(), y_.data()}; }
  void poison_output();
  // Relative L2 error of the output against reference_convolution on the same inputs (the
  // output's initial contents feed beta); infinity while the output still holds poison.
  double output_error() const;
  const ConvProblem& problem() const { return problem_; }

 private:
  std::vector<unsigned char>& output();
  ConvProblem problem_;
  std::vector<unsigned char> x_, w_, y_;
  std::vector<double> initial_output_;  // what beta scales
};

// A cache over `backend` with the default TunePolicy (not the environment's) and `capacity`.
std::unique_ptr<PlanCache> make_cache(std::shared_ptr<ScriptedBackend> backend,
                                      size_t capacity = 10000,
                                      std::shared_ptr<TuningDatabase> database = nullptr);

// The record key the cache uses for a problem on the scripted default device.
std::string scripted_key(const ConvProblem& problem, const TunePolicy& policy = TunePolicy{});

// How many heuristic queries one tune of `problem` makes, measured on a fresh backend of
// `engines` (the tuner's business, which the cache tests must not assume).
int64_t heuristic_queries_per_tune(const std::vector<ScriptedEngine>& engines,
                                   const ConvProblem& problem,
                                   const TunePolicy& policy = TunePolicy{});

// A DeviceAllocator over host memory that counts its calls.
class CountingAllocator final : public DeviceAllocator {
 public:
  StatusOr<void*> allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> live{0};
};

}  // namespace convplan::testing
