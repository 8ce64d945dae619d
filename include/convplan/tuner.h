// Tuner: chooses an engine configuration for a problem on a device under a TunePolicy, by
// heuristics, by timing candidates, and by checking each timed candidate's output against a
// trusted reference. It returns a TuningRecord; it caches nothing (the PlanCache does).
//
// Thread-safe: several threads may tune different problems at once. Tuning uses the GPU of the
// handle it is given, and the handle's stream.
#pragma once

#include <functional>
#include <memory>

#include "convplan/backend.h"
#include "convplan/export.h"
#include "convplan/status.h"
#include "convplan/tune_policy.h"
#include "convplan/tuning_record.h"

namespace convplan {

struct CONVPLAN_EXPORT TunerOptions {
  // Problems whose float64 reference costs at most this many multiply-adds are checked against
  // it; larger ones by the agreement of independent candidates.
  double reference_max_flops = 2e8;
  // A test hook: called after a candidate ran during validation, with the device pointer of the
  // output tensor and its size in bytes, so that a test can make one engine "compute" garbage.
  std::function<void(const EngineConfig&, void* output, size_t bytes)> after_candidate_run;
};

class CONVPLAN_EXPORT Tuner {
 public:
  explicit Tuner(std::shared_ptr<Backend> backend, TunerOptions options = {});

  // REQUIRES: problem.validate().ok(). `allocator` provides workspace and scratch buffers (null:
  // the backend's default). Fails with a message that names every filter that removed a
  // candidate when none survives, even after cuDNN's fallback list.
  StatusOr<TuningRecord> tune(cudnnHandle_t handle, const ConvProblem& problem,
                              const TunePolicy& policy, DeviceAllocator* allocator = nullptr);

 private:
  std::shared_ptr<Backend> backend_;
  TunerOptions options_;
};

}  // namespace convplan
