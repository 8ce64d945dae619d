// PlanCache: the process-wide cache of tuning results and execution plans.
//
// Keyed by device and problem (and the policy fields that change the choice):
//   - one TuningRecord per key, shared by every handle and every identical device; and
//   - one Plan per (key, handle), never executed with another handle.
// A hit returns the plan built for the caller's handle. A miss with a record clones a plan for
// the handle from the record (no heuristics, no timing). A miss without one tunes once; threads
// that miss the same key meanwhile wait and then clone. Tuning one key blocks no other key and no
// hit. Plans are evicted least-recently-used beyond the capacity, never while pinned by a PlanRef;
// records are kept. Failures are never cached.
//
// Background mode (TuneMode::kBackground): a miss that must tune gets the heuristic's first
// candidate that passes validation at once (provisional), while a thread of the cache tunes the
// key in limited mode on a handle and stream of its own. Each handle's next call after that takes
// the tuned plan (built for that handle by its own thread: never swapped under a running call,
// never built on a foreign handle); replaced plans live on until their handle is forgotten. The
// database gets the tuned record only. Destroying the cache cancels a background tune at its next
// candidate and waits for it; destroy the cache before the process exits (a static one is).
//
// Thread-safe. Each handle is used by one thread at a time (as cuDNN requires); a handle used
// from two threads at once is reported as an error (kInvalidArgument naming the handle) in
// every build: the check is one atomic exchange on the hit path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "convplan/backend.h"
#include "convplan/export.h"
#include "convplan/status.h"
#include "convplan/tune_policy.h"
#include "convplan/tuner.h"
#include "convplan/tuning_db.h"
#include "convplan/tuning_record.h"

namespace convplan {

struct CONVPLAN_EXPORT CacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t tunes = 0;        // tunes run (one per key, barring failures)
  uint64_t clones = 0;       // plans built from a record for another handle
  uint64_t json_clones = 0;  // of those, re-created from the plan's JSON
  uint64_t db_hits = 0;      // records found in the database instead of tuning
  uint64_t evictions = 0;
  uint64_t failures = 0;           // failed tunes, builds and executions
  uint64_t provisional_calls = 0;  // background mode: calls served by a provisional plan
  uint64_t background_tunes = 0;   // background mode: tunes finished on the cache's thread
  double tune_ms = 0;              // wall time spent tuning
  double clone_ms = 0;             // wall time spent cloning
  size_t plans = 0;                // plans held now
  size_t records = 0;              // records held now
  size_t plan_host_bytes = 0;
  std::string to_string() const;
};

struct CONVPLAN_EXPORT PlanCacheOptions {
  std::shared_ptr<Backend> backend;  // required
  // Maximum plans held; unset: CONVPLAN_CACHE_CAPACITY, else 10000. 0 disables caching of plans
  // (each call builds and drops its plan; records are still kept).
  std::optional<size_t> capacity;
  // The policy used by the calls that take none; unset: TunePolicy::from_environment().
  std::optional<TunePolicy> policy;
  // Consulted on a miss before tuning, written after each tune; null: no persistence.
  std::shared_ptr<TuningDatabase> database;
  TunerOptions tuner;
};

class PlanCache;

// Where acquire() found the plan it returned: what this call did, whatever other threads do.
enum class AcquireOutcome {
  kHit,          // the handle's plan was cached
  kClone,        // built for the handle from a record held in memory
  kJsonClone,    // the same, re-created from the record's serialized plan
  kDatabaseHit,  // the record came from the database; the plan was built from it
  kTuned,        // this call tuned the problem
  kWaited,       // another call was loading or tuning it; this one waited, then built its plan
  kProvisional,  // background mode: a provisional plan while the key is tuned in the background
};
CONVPLAN_EXPORT const char* to_string(
    AcquireOutcome outcome);  // "hit", "clone", "json_clone", "database", ...

// A pinned plan: while it lives the plan is not evicted. Move-only; use from one thread.
class CONVPLAN_EXPORT PlanRef {
 public:
  PlanRef() = default;
  PlanRef(PlanRef&& other) noexcept;
  PlanRef& operator=(PlanRef&& other) noexcept;
  PlanRef(const PlanRef&) = delete;
  PlanRef& operator=(const PlanRef&) = delete;
  ~PlanRef();

  Plan& plan() const { return *plan_; }
  Plan* operator->() const { return plan_; }
  explicit operator bool() const { return plan_ != nullptr; }

 private:
  friend class PlanCache;
  struct Pin;  // the cache's entry; defined in src/cache
  PlanRef(Plan* plan, Pin* pin, std::shared_ptr<void> owner);
  void reset() noexcept;
  Plan* plan_ = nullptr;
  Pin* pin_ = nullptr;
  std::shared_ptr<void> owner_;  // keeps an uncached plan (capacity 0) alive
};

class CONVPLAN_EXPORT PlanCache {
 public:
  static StatusOr<std::unique_ptr<PlanCache>> create(PlanCacheOptions options);
  ~PlanCache();
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // The plan for exactly `handle`, pinned. REQUIRES: problem.validate().ok() (else an error).
  // When `outcome` is given, it says on success how this call got the plan.
  StatusOr<PlanRef> acquire(cudnnHandle_t handle, const ConvProblem& problem,
                            AcquireOutcome* outcome = nullptr);
  StatusOr<PlanRef> acquire(cudnnHandle_t handle, const ConvProblem& problem,
                            const TunePolicy& policy, AcquireOutcome* outcome = nullptr);

  // acquire + execute on the handle's stream. Workspace comes from `allocator` when given (it
  // must be stream-ordered: the block is handed back right after the launch, before the kernel
  // has run, so a deallocate that frees at once would let the next user overwrite it), else
  // from a per-handle arena that grows on demand and is reused. On a hit this allocates nothing,
  // synchronizes nothing and blocks on nothing, so it may run inside CUDA stream capture. A plan
  // that fails to execute is dropped and its error returned.
  Status execute(cudnnHandle_t handle, const ConvProblem& problem, const TensorPointers& tensors,
                 DeviceAllocator* allocator = nullptr);
  Status execute(cudnnHandle_t handle, const ConvProblem& problem, const TensorPointers& tensors,
                 const TunePolicy& policy, DeviceAllocator* allocator = nullptr);

  // Tunes (or loads from the database) the problems that have no record yet, `threads` at once,
  // each thread on a handle of its own on device `ordinal`: one problem's heuristics queries and
  // compilation overlap another's timing (the tuner times on a device one tune at a time, so the
  // timings stay clean). A later acquire on any handle of an identical device then clones the
  // tuned plan instead of tuning. The worker handles and their plans are gone on return. For a
  // framework or server that knows a model's convolutions before its first call. Background mode
  // tunes in limited mode here (its tuned record). kInvalidArgument for threads < 1 or an invalid
  // problem (naming its index); else, once every problem was tried, the first failure with how
  // many failed.
  Status prepare(int ordinal, std::span<const ConvProblem> problems, int threads = 4);
  Status prepare(int ordinal, std::span<const ConvProblem> problems, const TunePolicy& policy,
                 int threads = 4);

  // Releases every plan and the arena of `handle`, so a later handle at the same address can
  // never meet a stale plan. REQUIRES: no PlanRef of that handle is alive.
  void forget_handle(cudnnHandle_t handle);

  // The record for the key, if tuned (or loaded) already.
  std::optional<TuningRecord> find_record(cudnnHandle_t handle, const ConvProblem& problem,
                                          const TunePolicy& policy);
  const TunePolicy& default_policy() const;
  CacheStats stats() const;
  size_t capacity() const;
  void set_capacity(size_t capacity);

 private:
  class Impl;
  explicit PlanCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace convplan
