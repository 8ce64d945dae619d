// Tuner: chooses an engine configuration for a problem on a device under a TunePolicy, by
// heuristics, by timing candidates, and by checking the finalists' outputs against a trusted
// reference in order of speed until one passes (the configuration it returns was always
// checked; losers on time need not be). It returns a TuningRecord; it caches nothing (the
// PlanCache does).
//
// Thread-safe: several threads may tune different problems at once. Tuning uses the GPU of the
// handle it is given, and the handle's stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "convplan/backend.h"
#include "convplan/export.h"
#include "convplan/status.h"
#include "convplan/tune_policy.h"
#include "convplan/tuning_record.h"

namespace convplan {

namespace tune_detail {
class CompileHandles;  // the compile pool's cuDNN handles, kept across tunes (tuner.cc)
}  // namespace tune_detail

struct CONVPLAN_EXPORT TunerOptions {
  // Problems whose float64 reference costs at most this many multiply-adds are checked against
  // it; larger ones by the agreement of independent candidates.
  double reference_max_flops = 2e8;
  // ... and whose tensors hold at most this many elements in all: the full reference makes every
  // input on the host and convolves on one thread, which took 2.3-2.9 s for MobileNetV2's strided
  // depthwise layers at batch 256 (under 2e8 FLOPs, 48M elements) where sampling takes ~1 ms.
  int64_t reference_max_elements = int64_t{1} << 22;
  // A test hook: called after a candidate ran during validation, with the device pointer of the
  // output tensor and its size in bytes, so that a test can make one engine "compute" garbage.
  std::function<void(const EngineConfig&, void* output, size_t bytes)> after_candidate_run;
  // The problem's roofline floor in ms on the tuning device (its bytes / the copy rate, its
  // flops / the matrix rate), or <= 0 when unknown; null: unknown. Limited mode skips candidates
  // compiled at run time when the best precompiled one is within 1.25x of it (and always when
  // that one takes under 0.1 ms); they are still tried when no precompiled one passes.
  std::function<double(const ConvProblem&)> roofline_floor_ms;
  // Asked between candidates; true ends the tune with kCancelled (the cache's background tuner
  // when the cache is destroyed). Null: never.
  std::function<bool()> cancelled;
};

// What one check of a plan's output found (Tuner::check).
struct CONVPLAN_EXPORT OutputCheck {
  bool passed = false;
  double relative_error = -1;  // vs the float64 reference; -1 when the plan did not get that far
  double tolerance = -1;       // relative_error_tolerance(problem, the plan's notes)
  int64_t elements_checked = 0;
  bool full = false;    // every output element was compared (else a random sample)
  std::string failure;  // why it did not pass, as a rejected candidate's outcome
};

class CONVPLAN_EXPORT Tuner {
 public:
  explicit Tuner(std::shared_ptr<Backend> backend, TunerOptions options = {});
  ~Tuner();
  Tuner(Tuner&&) noexcept;
  Tuner& operator=(Tuner&&) noexcept;

  // REQUIRES: problem.validate().ok(). `allocator` provides workspace and scratch buffers (null:
  // the backend's default). Fails with a message that names every filter that removed a
  // candidate when none survives, even after cuDNN's fallback list.
  StatusOr<TuningRecord> tune(cudnnHandle_t handle, const ConvProblem& problem,
                              const TunePolicy& policy, DeviceAllocator* allocator = nullptr);

  // Checks `plan` exactly as tune() checks each finalist: one run on the tuner's own scratch
  // buffers (fresh random inputs, the output poisoned, guard bytes around every buffer and the
  // workspace), and its output compared with the float64 reference over every element or a
  // random sample (large problems), on the device where the backend can, against
  // relative_error_tolerance. The caller's tensors are not touched. A plan that fails the check
  // is an ok StatusOr with passed == false; an error Status means the check could not run.
  // REQUIRES: plan was built for `problem` on `handle` (else kWrongHandle / a wrong answer).
  StatusOr<OutputCheck> check(cudnnHandle_t handle, const ConvProblem& problem, Plan& plan,
                              DeviceAllocator* allocator = nullptr);

 private:
  std::shared_ptr<Backend> backend_;
  TunerOptions options_;
  // Handles on which the compile pool builds runtime-compiled candidates (TunePolicy::
  // compile_threads); declared after backend_, so released before it.
  std::unique_ptr<tune_detail::CompileHandles> compile_handles_;
};

}  // namespace convplan
