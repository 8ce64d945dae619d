// ScriptedBackend: a Backend for CI, without a GPU. "Device memory" is host memory; engines are
// scripted (their notes, workspace, reported time, and behaviour: correct, wrong, writing past
// their buffers, failing), and correct engines compute with the float64 reference, so the tuner's
// validation and the cache's results are real. Every plan models a handle-bound cuDNN engine: it
// records the handle it was built with, and a call with another handle fails the running test
// (ADD_FAILURE) and is counted.
//
// Handles have generations: recreate_handle() models cudnnDestroy + cudnnCreate returning the same
// address, and a plan built before it that executes afterwards fails the test and is counted
// (stale_handle_executions), as it would crash or misbehave on a GPU. With a completion lag
// (set_completion_lag), an execution only checks its arguments and queues the computation on its
// handle's "stream"; it runs at the next call that orders with that stream (a copy or fill on the
// handle, time(), synchronize(), a deallocation, recreate_handle), so a reader that does not
// synchronize sees the old output, as on a GPU. time() executes the plan for each run.
//
// Thread-safe. Counters are atomics, read them after the threads have joined.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "convplan/backend.h"

namespace convplan::testing {

// A fake handle value: distinct, non-null, never dereferenced.
cudnnHandle_t scripted_handle(int index);

enum class EngineBehavior {
  kCorrect,
  kWrongResult,          // computes, then scales the output by 1.5
  kWritesPastOutput,     // correct, but also writes 64 bytes after the output's span
  kWritesPastWorkspace,  // correct, but writes 64 bytes after its workspace
  kFailsToBuild,         // build() returns kNotSupported
  kFailsToExecute,       // execute() returns kCudnnError
  kNeverFinishes,        // computes, but time() returns kDeadlineExceeded (a kernel that hangs)
};

struct ScriptedEngine {
  int64_t id = 0;
  NoteSet notes = 0;
  int64_t workspace_bytes = 0;
  float time_ms = 1.0f;  // what time() reports for each run
  EngineBehavior behavior = EngineBehavior::kCorrect;
  bool in_heuristics = true;         // listed by the heuristic modes (in the order of the script)
  bool only_in_heuristic_b = false;  // with in_heuristics: kHeuristicB's alone, listed first
  bool in_fallback = false;          // listed by kFallback
  std::vector<KnobInfo> knobs;       // offered knobs, for exhaustive search
  // With a post-op chain: the notes of its unfused variant (the plain convolution's engine of the
  // same index), when they differ from `notes` (cuDNN's eng49 is precompiled unfused and compiled
  // at run time fused).
  std::optional<NoteSet> unfused_notes;
  // Time per run for a given knob choice, when it depends on knobs; else time_ms.
  std::function<float(const EngineConfig&)> time_for;
  // Time per run on a batch of n images (the plan's problem's), when it depends on the batch (the
  // tuner runs the exhaustive list's candidates on part of the batch first); else as above.
  std::function<float(int64_t n)> time_for_batch;
  // The behaviour of a given knob choice, when it depends on knobs; else behavior.
  std::function<EngineBehavior(const EngineConfig&)> behavior_for;
  // The configurations the heuristic modes list, in order, each as its knob choices (the knobs
  // must be offered in `knobs`); empty: one, with the default knobs.
  std::vector<std::vector<KnobChoice>> listed_configs;
  // Which problems it supports; null: all.
  std::function<bool(const ConvProblem&)> supports;
};

class ScriptedBackend final : public Backend {
 public:
  explicit ScriptedBackend(std::vector<ScriptedEngine> engines);
  ~ScriptedBackend() override;

  // --- Backend ---
  std::string name() const override { return "scripted"; }
  StatusOr<DeviceInfo> device_of(cudnnHandle_t handle) override;
  // Handles 1000, 1001, ... on default_device(ordinal); counted in created_handles/live_handles.
  StatusOr<std::unique_ptr<OwnedHandle>> create_handle(int ordinal) override;
  StatusOr<std::vector<Candidate>> candidates(cudnnHandle_t, const ConvProblem& problem,
                                              CandidateSource source) override {
    return list(problem, source, nullptr);
  }
  StatusOr<std::vector<Candidate>> candidates_for_rewrites(
      cudnnHandle_t, const ConvProblem& problem, CandidateSource source,
      const std::vector<std::string>& rewrites) override {
    return list(problem, source, &rewrites);
  }
  StatusOr<std::vector<KnobInfo>> knobs(cudnnHandle_t handle, const ConvProblem& problem,
                                        int64_t engine_id) override;
  StatusOr<std::unique_ptr<Plan>> build(cudnnHandle_t handle, const ConvProblem& problem,
                                        const EngineConfig& config) override;
  StatusOr<std::unique_ptr<Plan>> build_from_json(cudnnHandle_t handle, const ConvProblem& problem,
                                                  std::string_view json) override;
  DeviceAllocator& default_allocator(cudnnHandle_t handle) override;
  Status copy_to_device(cudnnHandle_t, void* dst, const void* src, size_t bytes) override;
  Status copy_to_host(cudnnHandle_t, void* dst, const void* src, size_t bytes) override;
  Status fill(cudnnHandle_t, void* dst, uint8_t byte, size_t bytes) override;
  StatusOr<std::vector<float>> time(Plan& plan, const TensorPointers& tensors, void* workspace,
                                    int warmup, int runs, bool flush_l2, float cutoff_ms) override;

  // --- Script controls ---
  // The device a handle is on (default: device 0, "Scripted GPU", sm90, 132 SMs).
  void set_device(cudnnHandle_t handle, DeviceInfo device);
  static DeviceInfo default_device(int ordinal = 0);
  // Allocations larger than this fail with kOutOfMemory (default: unlimited).
  void set_allocation_limit(size_t bytes) { allocation_limit_ = bytes; }
  // The next `count` build() calls fail with kCudnnError ("injected").
  void fail_next_builds(int count) { builds_to_fail_ = count; }
  // Each build() sleeps this long (models plan finalize; runtime-compiled engines sleep 10x).
  void set_build_delay_us(int us) { build_delay_us_ = us; }
  // Names of rewrites (convplan/rewrite.h) whose candidates every list but the fallback adds after
  // the plain ones, each engine's tagged with the name, as with_rewrites() does; the plans compute
  // the plain convolution, and time_for sees the tag. None by default.
  void set_rewrites(std::vector<std::string> names) { rewrites_ = std::move(names); }
  // Each time() call sleeps this long (so that overlapping timings would be seen).
  void set_time_delay_us(int us) { time_delay_us_ = us; }
  // Each candidates() call sleeps this long (models the heuristics query).
  void set_heuristics_delay_us(int us) { heuristics_delay_us_ = us; }
  // Destroys and re-creates the handle at the same address: its earlier plans become stale.
  void recreate_handle(cudnnHandle_t handle);
  uint64_t generation(cudnnHandle_t handle);
  // When on, executions complete later (see the top). Off by default.
  void set_completion_lag(bool on) { completion_lag_ = on; }
  // Runs the handle's (every handle's) queued work: the stream (the device) synchronized.
  void synchronize(cudnnHandle_t handle);
  void synchronize_all();

  // --- Counters ---
  std::atomic<int64_t> heuristic_queries{0};
  std::atomic<int64_t> builds{0};                     // successful build() calls
  std::atomic<int64_t> json_builds{0};                // successful build_from_json() calls
  std::atomic<int64_t> runtime_compilations{0};       // build() calls of runtime-compiled engines
  std::atomic<int64_t> executions{0};                 // plan executions that ran
  std::atomic<int64_t> timings{0};                    // time() calls
  std::atomic<int64_t> timed_runs{0};                 // executions by time() (warm-up included)
  std::atomic<int64_t> timings_now{0};                // time() calls under way
  std::atomic<int64_t> max_concurrent_timings{0};     // the most under way at once
  std::atomic<int64_t> foreign_handle_executions{0};  // must stay 0
  std::atomic<int64_t> stale_handle_executions{0};    // must stay 0
  std::atomic<int64_t> lagged_runs{0};                // computations that ran after execute()
  std::atomic<int64_t> concurrent_handle_uses{0};     // two threads in one handle at once
  std::atomic<int64_t> live_plans{0};
  std::atomic<int64_t> live_allocations{0};
  std::atomic<int64_t> created_handles{0};
  std::atomic<int64_t> live_handles{0};

  const ScriptedEngine* engine(int64_t id) const;

 private:
  // The candidates of `source`, then those of the scripted rewrites; of those `only` names ("" for
  // the problem itself), if given.
  StatusOr<std::vector<Candidate>> list(const ConvProblem& problem, CandidateSource source,
                                        const std::vector<std::string>* only);

  class Allocator;
  class ScriptedPlan;
  friend class ScriptedPlan;

  std::vector<ScriptedEngine> engines_;
  std::vector<std::string> rewrites_;
  std::unique_ptr<Allocator> allocator_;
  std::mutex mu_;
  std::map<cudnnHandle_t, DeviceInfo> devices_;                        // GUARDED_BY(mu_)
  std::map<cudnnHandle_t, std::unique_ptr<std::atomic<int>>> in_use_;  // GUARDED_BY(mu_)
  std::map<cudnnHandle_t, uint64_t> generations_;                      // GUARDED_BY(mu_)
  // Queued work, and the pointers it uses (so that freeing a block runs the work on it first).
  struct Pending {
    std::array<const void*, 4> uses;
    std::function<void()> run;
  };
  std::mutex queue_mu_;
  std::map<cudnnHandle_t, std::vector<Pending>> pending_;  // GUARDED_BY(queue_mu_)
  std::map<const void*, size_t> sizes_;                    // GUARDED_BY(queue_mu_): live blocks
  std::atomic<bool> completion_lag_{false};
  std::atomic<size_t> allocation_limit_{SIZE_MAX};
  std::atomic<int> builds_to_fail_{0};
  std::atomic<int> build_delay_us_{0};
  std::atomic<int> heuristics_delay_us_{0};
  std::atomic<int> time_delay_us_{0};

  std::atomic<int>& in_use(cudnnHandle_t handle);
  void enqueue(cudnnHandle_t handle, std::array<const void*, 4> uses, std::function<void()> work);
  void synchronize_users(const void* block);
  void note_allocation(const void* block, size_t bytes);  // 0: freed
  size_t allocation_size(const void* block);
};

// A small engine list most tests start from: three correct engines (ids 0, 1, 2; times 3, 1, 2
// ms; workspace 0, 1 MiB, 0) and a fallback-only engine 9.
std::vector<ScriptedEngine> basic_engines();

}  // namespace convplan::testing
