// Context: what convplan.Context wraps. One PlanCache and one tuning database, and the cuDNN
// handles callers run on: one per (device, thread), made on first use and kept until the context
// goes, bound to the caller's current stream on each call (cudnnSetStream, as PyTorch does with
// its own per-thread handles). So a handle is never used by two threads at once (cuDNN's rule,
// checked by the cache), every thread has its own plans, and a thread that moves to another
// stream (CUDA graph capture does) keeps them: building plans is neither capture-safe nor cheap.
//
// Thread-safe: many Python threads on many streams share one Context. The calls that may tune
// release the GIL meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "convplan/plan_cache.h"
#include "convplan/problem.h"
#include "convplan/tuning_db.h"

namespace convplan::python {

struct ContextOptions {
  std::string db;                          // a path, "off", or "" for the CLI's default path
  std::optional<std::string> tune;         // heuristic, limited, exhaustive; unset: CONVPLAN_TUNE
  std::optional<int64_t> workspace_limit;  // bytes; unset: CONVPLAN_WORKSPACE_LIMIT or 4 GiB
  std::optional<size_t> capacity;          // plans held; unset: the cache's default
};

class Context {
 public:
  // Errors (a database that cannot be opened, a bad mode) are raised as Python exceptions.
  explicit Context(const ContextOptions& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Tunes or clones the problem's plan for (device, this thread) unless it is there;
  // returns the workspace bytes a launch needs. Raises when the stream is being captured (a
  // first call must not happen inside CUDA graph capture) or when planning fails.
  int64_t prepare(const ConvProblem& problem, int device, uintptr_t stream);
  // Enqueues the convolution on `stream` with the caller's workspace. Returns false, having done
  // nothing, when the plan is not there yet or needs more workspace than given: call prepare()
  // and launch again. Raises on failure.
  // bias and residual: the post-op chain's tensors (0 where the chain has none).
  bool launch(const ConvProblem& problem, int device, uintptr_t stream, uintptr_t x, uintptr_t w,
              uintptr_t y, uintptr_t workspace, int64_t workspace_bytes, uintptr_t bias = 0,
              uintptr_t residual = 0);
  // prepare + launch with the cache's own workspace arena, for callers holding raw pointers.
  void run(const ConvProblem& problem, uintptr_t x, uintptr_t w, uintptr_t y, int device,
           uintptr_t stream, uintptr_t bias = 0, uintptr_t residual = 0);

  // Tunes (or loads) the problems that have no record yet, `threads` at once on handles of the
  // cache's own (PlanCache::prepare), so that later calls on any thread clone their plans. Raises
  // on bad arguments, or after every problem was tried, with how many failed.
  void prepare_all(const std::vector<ConvProblem>& problems, int device, int threads);

  // What the plan of `problem` on (device, this thread) is, planning it like prepare() when it
  // is not there yet: the chosen engine configuration, and from the tuning record (when the
  // policy timed candidates) the fastest fused and unfused candidates, so a caller can say which
  // kind won and by how much.
  struct PlanInfo {
    std::string config;  // EngineConfig::to_string(): "unfused+eng12:k3=1", "eng4", ...
    bool unfused = false;
    int64_t workspace_bytes = 0;
    double time_ms = -1;          // the record's median of the chosen one; -1: not timed
    double best_fused_ms = -1;    // fastest valid fused candidate; -1: none timed
    double best_unfused_ms = -1;  // fastest valid unfused candidate; -1: none timed
    int candidates = 0;           // in the record
  };
  PlanInfo plan_info(const ConvProblem& problem, int device, uintptr_t stream);

  CacheStats stats() const { return cache_->stats(); }
  const std::string& db_path() const { return db_path_; }
  size_t handle_count() const;
  const TunePolicy& policy() const { return cache_->default_policy(); }

 private:
  using HandleKey = std::tuple<int, std::thread::id>;
  StatusOr<cudnnHandle_t> handle_for(int device, cudaStream_t stream);
  // Without the GIL, on `device`: the plan of `problem` for (device, this thread), planned when
  // it is not there yet (refused during stream capture), given to `use`.
  Status with_plan(const ConvProblem& problem, int device, uintptr_t stream,
                   const std::function<void(cudnnHandle_t, const Plan&)>& use);

  const uint64_t id_;  // unique in the process: the thread-local lookup never meets a stale one
  std::string db_path_;
  mutable std::mutex mu_;
  // Declared before cache_ so that the cache (and its plans) goes first.
  std::map<HandleKey, CudnnContext> handles_;  // GUARDED_BY(mu_)
  std::unique_ptr<PlanCache> cache_;
};

}  // namespace convplan::python
