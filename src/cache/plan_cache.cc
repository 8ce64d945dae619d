// PlanCache: handle-aware plans over shared tuning records.
//
// Layout of the state, and who may touch what:
//   shards_[i]       handle -> HandleState, sharded by the handle's address so that threads on
//                    different handles take different (shared) locks on the hit path.
//   HandleState      one per handle: its device, its plans (problem, policy id) -> Entry under its
//                    own shared mutex, its workspace arena and its hit counter. `in_use` is the
//                    one-thread-per-handle flag; whoever holds it owns the arena, the hit counter
//                    and the per-handle policy list.
//   Entry            (PlanRef::Pin) a plan and an intrusive count: 1 for the map while the entry is
//                    in it, 1 per PlanRef. Whoever drops the last reference deletes it, so an
//                    evicted or forgotten plan that a PlanRef still pins lives on until the PlanRef
//                    dies, and so does the backend (each entry holds it).
//   records_         record key (RecordKey::to_string()) -> record, made once per key by a
//                    SingleFlight (single_flight.h): the first misser loads or tunes, the others
//                    wait.
//
// The hit path: shared lock of a shard, an exchange on the handle's in_use flag, shared lock of the
// handle's map, a lookup with a cheap hash, one increment of the entry's count, relaxed stores of
// its recency stamp and of the handle's hit counter. No exclusive lock, no string, no allocation,
// no system call; every cache line it writes belongs to the handle (and thus to one thread), except
// the shard's lock word when two handles share a shard.
//
// Recency: a hit stamps its entry with the current tick; the tick advances at each insertion.
// Eviction removes the unpinned entries with the smallest stamps, so a plan used since the last
// insertion is never evicted before one that was not; among plans used between the same two
// insertions the order is unspecified (ordering them exactly would need a shared counter written
// by every hit of every thread).
//
// Lock order: removal_mu_ -> a shard's mu -> a handle's mu. The locks inside records_ and
// policy_mu_ are never held while taking another lock. Which lock guards what is written as
// GUARDED_BY and checked by clang's -Wthread-safety (scripts/thread-safety). Every removal of an
// entry from a handle's map holds removal_mu_, so the evictor's pointers from its scan stay valid
// until it has finished.
#include "convplan/plan_cache.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <locale>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/plan_key.h"
#include "cache/single_flight.h"
#include "convplan/log.h"
#include "core/mutex.h"

namespace convplan {

using cache_detail::FlightOutcome;
using cache_detail::PlanKey;
using cache_detail::PlanKeyEqual;
using cache_detail::PlanKeyHash;
using cache_detail::PlanKeyView;

namespace cache_detail {
// A key tuned in the background (TuneMode::kBackground): the plans made before it finished are
// provisional, and each handle replaces its own on its next call once `done`.
struct BackgroundTune {
  std::atomic<bool> done{false};
  std::shared_ptr<const TuningRecord> tuned;  // written before done (release); null: it failed
};
}  // namespace cache_detail
using cache_detail::BackgroundTune;

// A cached plan. Defined here; PlanRef only holds a pointer.
struct PlanRef::Pin {
  Pin(std::shared_ptr<Backend> backend_in, std::unique_ptr<Plan> plan_in, PlanKey key_in)
      : backend(std::move(backend_in)),
        plan(std::move(plan_in)),
        key(std::move(key_in)),
        host_bytes(plan->host_bytes()) {}

  // Drops one reference; the last one deletes the entry (plan first, then the backend).
  void unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  std::shared_ptr<Backend> backend;  // declared before plan: outlives it
  std::unique_ptr<Plan> plan;
  const PlanKey key;
  const size_t host_bytes;
  // 1 while in a handle's map + 1 per PlanRef. Incremented only under the handle's shared lock
  // (from the map), so under its exclusive lock refs == 1 means "in the map and pinned by none".
  std::atomic<int64_t> refs{1};
  std::atomic<uint64_t> last_used{0};  // the tick of the last acquire
  // Set before the entry is published, then constant: non-null for a provisional plan.
  std::shared_ptr<BackgroundTune> pending;
};

PlanRef::PlanRef(Plan* plan, Pin* pin, std::shared_ptr<void> owner)
    : plan_(plan), pin_(pin), owner_(std::move(owner)) {}

PlanRef::PlanRef(PlanRef&& other) noexcept
    : plan_(other.plan_), pin_(other.pin_), owner_(std::move(other.owner_)) {
  other.plan_ = nullptr;
  other.pin_ = nullptr;
}

PlanRef& PlanRef::operator=(PlanRef&& other) noexcept {
  if (this != &other) {
    reset();
    plan_ = other.plan_;
    pin_ = other.pin_;
    owner_ = std::move(other.owner_);
    other.plan_ = nullptr;
    other.pin_ = nullptr;
  }
  return *this;
}

PlanRef::~PlanRef() { reset(); }

void PlanRef::reset() noexcept {
  if (pin_ != nullptr) pin_->unref();
  pin_ = nullptr;
  plan_ = nullptr;
  owner_.reset();
}

namespace {

constexpr size_t kDefaultCapacity = 10000;
constexpr size_t kHandleShards = 256;
// Explicit policies remembered per handle (beyond this the list starts over).
constexpr size_t kMaxPoliciesPerHandle = 16;

StatusOr<size_t> capacity_from_environment() {
  const char* text = std::getenv("CONVPLAN_CACHE_CAPACITY");
  if (text == nullptr || *text == '\0') return kDefaultCapacity;
  const std::string_view s(text);
  size_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return invalid_argument("CONVPLAN_CACHE_CAPACITY='" + std::string(s) + "' is out of range");
  }
  if (ec != std::errc() || end != s.data() + s.size()) {
    return invalid_argument("CONVPLAN_CACHE_CAPACITY='" + std::string(s) +
                            "' is not a plan count (a non-negative integer)");
  }
  return value;
}

std::string handle_text(cudnnHandle_t handle) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%p", static_cast<void*>(handle));
  return buffer;
}

int64_t elapsed_ns(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              start)
      .count();
}

// A plan built for one call when plans are not cached (capacity 0); PlanRef::owner_ holds it.
struct UncachedPlan {
  std::shared_ptr<Backend> backend;  // outlives plan
  std::unique_ptr<Plan> plan;
};

}  // namespace

class PlanCache::Impl {
 public:
  Impl(PlanCacheOptions options, size_t capacity, TunePolicy policy)
      : backend_(options.backend),
        tuner_(options.backend, options.tuner),
        background_tuner_(options.backend,
                          cancellable(std::move(options.tuner), &stop_background_)),
        database_(std::move(options.database)),
        default_policy_(std::move(policy)),
        default_policy_key_(default_policy_.key()),
        capacity_(capacity) {
    MutexLock lock(policy_mu_);
    policy_ids_.emplace(default_policy_key_, 0);  // id 0: the default policy's key
  }

  ~Impl() {
    stop_background_worker();  // first: its tune uses the backend and the records
    // Threads may no longer call in; PlanRefs may still pin entries (they outlive this).
    for (HandleShard& shard : shards_) {
      WriterLock shard_lock(shard.mu);  // uncontended: for the analysis
      for (auto& [handle, state] : shard.states) {
        WriterLock lock(state->mu);
        for (auto& [key, entry] : state->plans) entry->unref();
        state->plans.clear();
        for (Entry* entry : state->retired) entry->unref();
        state->retired.clear();
        state->arena.reset();
      }
    }
  }

  Status execute(cudnnHandle_t handle, const ConvProblem& problem, const TensorPointers& tensors,
                 const TunePolicy* policy, DeviceAllocator* allocator);
  StatusOr<PlanRef> acquire(cudnnHandle_t handle, const ConvProblem& problem,
                            const TunePolicy* policy, AcquireOutcome* outcome);
  void forget_handle(cudnnHandle_t handle);
  std::optional<TuningRecord> find_record(cudnnHandle_t handle, const ConvProblem& problem,
                                          const TunePolicy& policy);
  const TunePolicy& default_policy() const { return default_policy_; }
  Backend& backend() const { return *backend_; }
  CacheStats stats() const;
  size_t capacity() const { return capacity_.load(std::memory_order_relaxed); }
  void set_capacity(size_t capacity) {
    capacity_.store(capacity, std::memory_order_relaxed);
    evict_over_capacity();
  }

 private:
  using Entry = PlanRef::Pin;

  struct alignas(64) HandleState {
    HandleState(cudnnHandle_t h, DeviceInfo d)
        : handle(h), device(std::move(d)), model_key(device.model_key()) {}

    const cudnnHandle_t handle;
    const DeviceInfo device;
    const std::string model_key;
    // 1 while a call uses the handle. Taken with an exchange under the shard's shared lock, so
    // forget_handle (which erases under the exclusive lock, then takes the flag) never frees a
    // state that a call is using.
    std::atomic<int> in_use{0};
    // Owned by the thread that holds in_use:
    DeviceBuffer arena;
    std::vector<std::pair<TunePolicy, uint32_t>> policies;  // explicit policies met -> id
    std::atomic<uint64_t> hits{0};  // written only by the in_use holder; read by stats()
    // Provisional plans replaced by tuned ones, kept (not destroyed) until the handle is
    // forgotten or the cache destroyed: work enqueued with them may still be running on the
    // handle's stream. Owned by the in_use holder.
    std::vector<Entry*> retired;
    mutable SharedMutex mu;
    std::unordered_map<PlanKey, Entry*, PlanKeyHash, PlanKeyEqual> plans GUARDED_BY(mu);
  };

  struct alignas(64) HandleShard {
    mutable SharedMutex mu;
    std::unordered_map<cudnnHandle_t, std::shared_ptr<HandleState>> states GUARDED_BY(mu);
  };

  // A background tune waiting for (or on) the worker thread.
  struct BackgroundJob {
    int ordinal = 0;
    ConvProblem problem;
    TunePolicy policy;  // limited mode
    RecordKey key;
    std::string key_text;
    std::shared_ptr<BackgroundTune> tune;
  };

  // Releases the in_use flag of a claimed handle.
  class Claim {
   public:
    explicit Claim(HandleState* state) : state_(state) {}
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim() { state_->in_use.store(0, std::memory_order_release); }

   private:
    HandleState* state_;
  };

  HandleShard& shard_of(cudnnHandle_t handle) {
    const uint64_t h = reinterpret_cast<uintptr_t>(handle) * 0x9e3779b97f4a7c15ull;
    return shards_[(h >> 32) % kHandleShards];
  }

  static Status busy_error(cudnnHandle_t handle) {
    return invalid_argument("handle " + handle_text(handle) +
                            " is in use by another thread at the same time; a cuDNN handle (and "
                            "its plans) must be used by one thread at a time");
  }

  Status claim(cudnnHandle_t handle, HandleState** out);
  Status claim_new(cudnnHandle_t handle, HandleState** out);
  uint32_t resolve_policy(HandleState& state, const TunePolicy& policy);
  uint32_t intern_policy(const TunePolicy& policy);
  Status get_plan(HandleState& state, const ConvProblem& problem, uint32_t policy_id,
                  const TunePolicy& policy, DeviceAllocator* allocator, PlanRef* out,
                  AcquireOutcome* outcome);
  Status miss(HandleState& state, const ConvProblem& problem, uint32_t policy_id,
              const TunePolicy& policy, DeviceAllocator* allocator, PlanRef* out,
              AcquireOutcome* outcome);
  // *pending: the background tune when the record is provisional.
  StatusOr<std::shared_ptr<const TuningRecord>> find_or_make_record(
      HandleState& state, const RecordKey& key, const ConvProblem& problem,
      const TunePolicy& policy, DeviceAllocator* allocator, std::unique_ptr<Plan>* plan,
      AcquireOutcome* outcome, std::shared_ptr<BackgroundTune>* pending);
  // *job: set (for the caller to enqueue once the record is published) when the record is a
  // background-mode key's provisional one.
  StatusOr<TuningRecord> load_or_tune(HandleState& state, const RecordKey& key,
                                      const std::string& key_text, const ConvProblem& problem,
                                      const TunePolicy& policy, DeviceAllocator* allocator,
                                      std::unique_ptr<Plan>* plan, AcquireOutcome* outcome,
                                      std::optional<BackgroundJob>* job);
  void put_in_database(const TuningRecord& record);
  // The background tune of a key whose record is provisional; null otherwise.
  std::shared_ptr<BackgroundTune> pending_tune(const std::string& key_text) const
      EXCLUDES(pending_mu_);

  // ---- Background tuning (TuneMode::kBackground, issue 21) ----
  // The heuristic's first validated candidate as a provisional record, and the job that tunes
  // the key in limited mode; kNotSupported when the backend cannot give the worker a handle.
  StatusOr<TuningRecord> start_background(HandleState& state, const RecordKey& key,
                                          const std::string& key_text, const ConvProblem& problem,
                                          const TunePolicy& policy, DeviceAllocator* allocator,
                                          std::optional<BackgroundJob>* job);
  Status ensure_background_handle(int ordinal);
  void enqueue_background(BackgroundJob job);
  void background_loop();
  void finish_background(BackgroundJob& job, StatusOr<TuningRecord> tuned);
  void stop_background_worker();
  // A hit on a provisional entry (pinned by the caller): the tuned plan when it is ready (built
  // for this handle, replacing the provisional one in the map), else the provisional plan.
  Status serve_provisional(HandleState& state, Entry* entry, const ConvProblem& problem,
                           PlanRef* out);
  Status upgrade(HandleState& state, Entry* old, const ConvProblem& problem, PlanRef* out);
  static TunerOptions cancellable(TunerOptions options, const std::atomic<bool>* stop) {
    options.cancelled = [stop] { return stop->load(std::memory_order_relaxed); };
    return options;
  }
  StatusOr<std::unique_ptr<Plan>> clone_plan(cudnnHandle_t handle, const ConvProblem& problem,
                                             const TuningRecord& record, bool* from_json);
  Status keep(HandleState& state, PlanKey key, std::unique_ptr<Plan> plan, PlanRef* out,
              std::shared_ptr<BackgroundTune> pending = nullptr);
  void drop(HandleState& state, Entry* entry);
  void evict_over_capacity();
  void release_plans(HandleState& state);
  std::vector<std::shared_ptr<HandleState>> snapshot_states() const;

  // Declared first: destroyed last, after every plan and arena of this object.
  const std::shared_ptr<Backend> backend_;
  Tuner tuner_;
  std::atomic<bool> stop_background_{false};  // read by background_tuner_ between candidates
  Tuner background_tuner_;
  const std::shared_ptr<TuningDatabase> database_;
  const TunePolicy default_policy_;
  const std::string default_policy_key_;  // computed once
  std::atomic<size_t> capacity_;

  std::array<HandleShard, kHandleShards> shards_;

  cache_detail::SingleFlight<std::string, TuningRecord> records_;  // by RecordKey text
  // Keys whose record is provisional (background mode), with their background tune.
  mutable Mutex pending_mu_;
  std::unordered_map<std::string, std::shared_ptr<BackgroundTune>> pending_ GUARDED_BY(pending_mu_);

  Mutex policy_mu_;
  std::unordered_map<std::string, uint32_t> policy_ids_ GUARDED_BY(policy_mu_);

  Mutex removal_mu_;  // serializes removals of entries from handles' maps (see the top)

  std::atomic<uint64_t> tick_{1};  // advanced by each insertion; read by hits
  std::atomic<size_t> plan_count_{0};
  std::atomic<size_t> plan_host_bytes_{0};
  std::atomic<size_t> record_count_{0};
  std::atomic<uint64_t> retired_hits_{0};  // hits of forgotten handles
  std::atomic<uint64_t> misses_{0};
  std::atomic<uint64_t> tunes_{0};
  std::atomic<uint64_t> clones_{0};
  std::atomic<uint64_t> json_clones_{0};
  std::atomic<uint64_t> db_hits_{0};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<int64_t> tune_ns_{0};
  std::atomic<int64_t> clone_ns_{0};
  std::atomic<bool> db_write_failure_reported_{false};
  std::atomic<uint64_t> provisional_calls_{0};
  std::atomic<uint64_t> background_tunes_{0};

  std::mutex background_mu_;
  std::condition_variable background_cv_;
  std::deque<BackgroundJob> background_jobs_;  // GUARDED_BY(background_mu_)
  bool background_stopping_ = false;           // GUARDED_BY(background_mu_)
  // Per device ordinal, the worker's own handle; entries are added (never removed) under
  // background_mu_ and used by the worker thread alone.
  std::map<int, std::unique_ptr<OwnedHandle>> background_handles_;
  std::thread background_thread_;  // started with the first background job
};

Status PlanCache::Impl::claim(cudnnHandle_t handle, HandleState** out) {
  if (handle == nullptr) return invalid_argument("handle is null");
  HandleShard& shard = shard_of(handle);
  {
    ReaderLock lock(shard.mu);
    auto it = shard.states.find(handle);
    if (it != shard.states.end()) {
      HandleState* state = it->second.get();
      if (state->in_use.exchange(1, std::memory_order_acquire) != 0) return busy_error(handle);
      *out = state;
      return ok_status();
    }
  }
  return claim_new(handle, out);
}

Status PlanCache::Impl::claim_new(cudnnHandle_t handle, HandleState** out) {
  // Asked once per handle; a handle's device never changes.
  StatusOr<DeviceInfo> device = backend_->device_of(handle);
  if (!device.ok()) return device.status().with_context("device of handle " + handle_text(handle));
  auto fresh = std::make_shared<HandleState>(handle, std::move(device).value());
  HandleShard& shard = shard_of(handle);
  WriterLock lock(shard.mu);
  HandleState* state = shard.states.try_emplace(handle, std::move(fresh)).first->second.get();
  if (state->in_use.exchange(1, std::memory_order_acquire) != 0) return busy_error(handle);
  *out = state;
  return ok_status();
}

uint32_t PlanCache::Impl::resolve_policy(HandleState& state, const TunePolicy& policy) {
  if (&policy == &default_policy_ || policy == default_policy_) return 0;
  for (const auto& [known, id] : state.policies) {
    if (known == policy) return id;
  }
  const uint32_t id = intern_policy(policy);
  if (state.policies.size() >= kMaxPoliciesPerHandle) state.policies.clear();
  state.policies.emplace_back(policy, id);
  return id;
}

uint32_t PlanCache::Impl::intern_policy(const TunePolicy& policy) {
  std::string key = policy.key();
  MutexLock lock(policy_mu_);
  const uint32_t next = static_cast<uint32_t>(policy_ids_.size());
  return policy_ids_.try_emplace(std::move(key), next).first->second;
}

Status PlanCache::Impl::get_plan(HandleState& state, const ConvProblem& problem, uint32_t policy_id,
                                 const TunePolicy& policy, DeviceAllocator* allocator, PlanRef* out,
                                 AcquireOutcome* outcome) {
  {
    ReaderLock lock(state.mu);
    auto it = state.plans.find(PlanKeyView{&problem, policy_id});
    if (it != state.plans.end()) {
      Entry* entry = it->second;
      entry->refs.fetch_add(1, std::memory_order_relaxed);
      entry->last_used.store(tick_.load(std::memory_order_relaxed), std::memory_order_relaxed);
      lock.unlock();
      state.hits.store(state.hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      if (outcome != nullptr) *outcome = AcquireOutcome::kHit;
      if (entry->pending != nullptr) return serve_provisional(state, entry, problem, out);
      *out = PlanRef(entry->plan.get(), entry, nullptr);
      return ok_status();
    }
  }
  return miss(state, problem, policy_id, policy, allocator, out, outcome);
}

Status PlanCache::Impl::miss(HandleState& state, const ConvProblem& problem, uint32_t policy_id,
                             const TunePolicy& policy, DeviceAllocator* allocator, PlanRef* out,
                             AcquireOutcome* outcome) {
  CONVPLAN_RETURN_IF_ERROR(problem.validate());
  misses_.fetch_add(1, std::memory_order_relaxed);
  // The record key, as record_key() makes it, from the parts known already.
  RecordKey key;
  key.device_model = state.model_key;
  key.problem = problem;
  key.policy = policy_id == 0 ? default_policy_key_ : policy.key();
  std::unique_ptr<Plan> plan;
  AcquireOutcome how = AcquireOutcome::kClone;
  std::shared_ptr<BackgroundTune> pending;
  StatusOr<std::shared_ptr<const TuningRecord>> record =
      find_or_make_record(state, key, problem, policy, allocator, &plan, &how, &pending);
  if (!record.ok()) return record.status();
  if (plan == nullptr) {
    bool from_json = false;
    CONVPLAN_ASSIGN_OR_RETURN(plan, clone_plan(state.handle, problem, **record, &from_json));
    if (how == AcquireOutcome::kClone && from_json) how = AcquireOutcome::kJsonClone;
  }
  if (pending != nullptr) {
    provisional_calls_.fetch_add(1, std::memory_order_relaxed);
    how = AcquireOutcome::kProvisional;
  }
  if (outcome != nullptr) *outcome = how;
  return keep(state, PlanKey{problem, policy_id}, std::move(plan), out, std::move(pending));
}

// On return *outcome is kTuned or kDatabaseHit when this call made the record (and *plan holds
// the handle's plan), kWaited when it waited for another call to make it, else kClone.
StatusOr<std::shared_ptr<const TuningRecord>> PlanCache::Impl::find_or_make_record(
    HandleState& state, const RecordKey& key, const ConvProblem& problem, const TunePolicy& policy,
    DeviceAllocator* allocator, std::unique_ptr<Plan>* plan, AcquireOutcome* outcome,
    std::shared_ptr<BackgroundTune>* pending) {
  const std::string key_text = key.to_string();
  FlightOutcome flight = FlightOutcome::kFound;
  std::optional<BackgroundJob> job;
  // The leader loads or tunes outside every lock but the handle's claim; the others wait. A
  // provisional record's tune is registered before the record is published, so that no caller
  // can see the record without it.
  StatusOr<std::shared_ptr<const TuningRecord>> record = records_.get_or_create(
      key_text,
      [&]() -> StatusOr<TuningRecord> {
        StatusOr<TuningRecord> made =
            load_or_tune(state, key, key_text, problem, policy, allocator, plan, outcome, &job);
        if (made.ok() && job) {
          MutexLock lock(pending_mu_);
          pending_[key_text] = job->tune;
        }
        return made;
      },
      &flight);
  if (!record.ok()) return record.status();  // the waiters share the leader's failure
  if (flight == FlightOutcome::kWaited) *outcome = AcquireOutcome::kWaited;
  if (flight == FlightOutcome::kCreated) record_count_.fetch_add(1, std::memory_order_relaxed);
  if (job) {  // once the provisional record is published; the worker then replaces it
    *pending = job->tune;
    enqueue_background(std::move(*job));
  } else {
    *pending = pending_tune(key_text);
  }
  // finish_background replaces the record before it drops the pending tune: with no pending tune
  // seen here, the record held now may be the provisional one just replaced, so read it again.
  if (*pending == nullptr && flight != FlightOutcome::kCreated) {
    if (std::shared_ptr<const TuningRecord> latest = records_.find(key_text)) return latest;
  }
  if (flight != FlightOutcome::kCreated) return record;

  if (*plan == nullptr) {
    // Tuned here: this handle's plan is built from the chosen configuration (not a clone).
    StatusOr<std::unique_ptr<Plan>> built =
        backend_->build(state.handle, problem, (*record)->config);
    if (!built.ok()) {
      failures_.fetch_add(1, std::memory_order_relaxed);
      return built.status().with_context("building the tuned " + (*record)->config.to_string() +
                                         " for " + (*record)->problem);
    }
    *plan = std::move(built).value();
  }
  return record;
}

StatusOr<TuningRecord> PlanCache::Impl::load_or_tune(
    HandleState& state, const RecordKey& key, const std::string& key_text,
    const ConvProblem& problem, const TunePolicy& policy, DeviceAllocator* allocator,
    std::unique_ptr<Plan>* plan, AcquireOutcome* outcome, std::optional<BackgroundJob>* job) {
  if (database_ != nullptr) {
    StatusOr<TuningRecord> stored = database_->find(key_text);
    if (stored.ok()) {
      bool from_json = false;
      StatusOr<std::unique_ptr<Plan>> built =
          clone_plan(state.handle, key.problem, *stored, &from_json);
      if (built.ok()) {
        db_hits_.fetch_add(1, std::memory_order_relaxed);
        *plan = std::move(built).value();
        *outcome = AcquireOutcome::kDatabaseHit;
        return stored;
      }
      // The stored record no longer builds here (another cuDNN, a damaged plan): it is erased
      // and the problem tuned again.
      Status erased = database_->erase(key_text);
      if (!erased.ok() || (policy.verbose > 0 && log_enabled(LogLevel::kInfo))) {
        log(erased.ok() ? LogLevel::kInfo : LogLevel::kWarning,
            "discarding the stored record '" + key_text + "': " + built.status().to_string() +
                (erased.ok() ? "" : "; erasing it: " + erased.to_string()));
      }
    }
    // kNotFound, or a damaged row (the database reports and skips it): tune.
  }
  if (policy.mode == TuneMode::kBackground) {
    StatusOr<TuningRecord> provisional =
        start_background(state, key, key_text, problem, policy, allocator, job);
    // kNotSupported: no handle for the worker; the key is tuned here (in limited mode).
    if (provisional.ok() || provisional.status().code() != StatusCode::kNotSupported) {
      return provisional;
    }
  }

  tunes_.fetch_add(1, std::memory_order_relaxed);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<TuningRecord> tuned = tuner_.tune(state.handle, key.problem, policy, allocator);
  tune_ns_.fetch_add(elapsed_ns(start), std::memory_order_relaxed);
  if (!tuned.ok()) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    return tuned.status();
  }
  *outcome = AcquireOutcome::kTuned;
  TuningRecord record = std::move(tuned).value();
  // The cache owns the key: the record is found under it here and in the database.
  record.set_key(key);
  put_in_database(record);
  return record;
}

std::shared_ptr<BackgroundTune> PlanCache::Impl::pending_tune(const std::string& key_text) const {
  MutexLock lock(pending_mu_);
  auto it = pending_.find(key_text);
  return it == pending_.end() ? nullptr : it->second;
}

void PlanCache::Impl::put_in_database(const TuningRecord& record) {
  if (database_ == nullptr) return;
  Status put = database_->put(record);
  if (!put.ok() && !db_write_failure_reported_.exchange(true)) {
    log(LogLevel::kWarning,
        "could not write a tuning record to the database (tuning goes on; further write "
        "failures are not reported): " +
            put.to_string());
  }
}

StatusOr<std::unique_ptr<Plan>> PlanCache::Impl::clone_plan(cudnnHandle_t handle,
                                                            const ConvProblem& problem,
                                                            const TuningRecord& record,
                                                            bool* from_json) {
  const auto start = std::chrono::steady_clock::now();
  if (!record.plan_json.empty()) {
    StatusOr<std::unique_ptr<Plan>> rebuilt =
        backend_->build_from_json(handle, problem, record.plan_json);
    if (rebuilt.ok()) {
      clone_ns_.fetch_add(elapsed_ns(start), std::memory_order_relaxed);
      clones_.fetch_add(1, std::memory_order_relaxed);
      json_clones_.fetch_add(1, std::memory_order_relaxed);
      *from_json = true;
      return rebuilt;
    }
    // Fall back to building the configuration (a JSON from another cuDNN, say).
  }
  StatusOr<std::unique_ptr<Plan>> built = backend_->build(handle, problem, record.config);
  clone_ns_.fetch_add(elapsed_ns(start), std::memory_order_relaxed);
  if (!built.ok()) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    return built.status().with_context("building " + record.config.to_string() + " for " +
                                       record.problem + " on handle " + handle_text(handle));
  }
  clones_.fetch_add(1, std::memory_order_relaxed);
  *from_json = false;
  return built;
}

Status PlanCache::Impl::keep(HandleState& state, PlanKey key, std::unique_ptr<Plan> plan,
                             PlanRef* out, std::shared_ptr<BackgroundTune> pending) {
  if (capacity_.load(std::memory_order_relaxed) == 0) {
    auto holder = std::make_shared<UncachedPlan>(UncachedPlan{backend_, std::move(plan)});
    Plan* raw = holder->plan.get();
    *out = PlanRef(raw, nullptr, std::move(holder));
    return ok_status();
  }
  auto* entry = new Entry(backend_, std::move(plan), std::move(key));
  entry->pending = std::move(pending);
  entry->last_used.store(tick_.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
  bool inserted;
  {
    WriterLock lock(state.mu);
    inserted = state.plans.try_emplace(entry->key, entry).second;
    // Only the handle's claim holder inserts, and it found no entry: inserted is true. Were it
    // not, the caller's PlanRef would own the entry alone.
    if (inserted) entry->refs.store(2, std::memory_order_relaxed);  // the map's and the caller's
  }
  if (inserted) {
    plan_count_.fetch_add(1, std::memory_order_relaxed);
    plan_host_bytes_.fetch_add(entry->host_bytes, std::memory_order_relaxed);
  }
  *out = PlanRef(entry->plan.get(), entry, nullptr);
  evict_over_capacity();
  return ok_status();
}

void PlanCache::Impl::drop(HandleState& state, Entry* entry) {
  bool removed = false;
  {
    MutexLock removal(removal_mu_);
    WriterLock lock(state.mu);
    auto it = state.plans.find(entry->key);
    if (it != state.plans.end() && it->second == entry) {
      state.plans.erase(it);
      removed = true;
    }
  }
  if (removed) {
    plan_count_.fetch_sub(1, std::memory_order_relaxed);
    plan_host_bytes_.fetch_sub(entry->host_bytes, std::memory_order_relaxed);
    entry->unref();  // the map's reference; the caller still holds its own
  }
}

std::vector<std::shared_ptr<PlanCache::Impl::HandleState>> PlanCache::Impl::snapshot_states()
    const {
  std::vector<std::shared_ptr<HandleState>> states;
  for (const HandleShard& shard : shards_) {
    ReaderLock lock(shard.mu);
    for (const auto& [handle, state] : shard.states) states.push_back(state);
  }
  return states;
}

void PlanCache::Impl::evict_over_capacity() {
  if (plan_count_.load(std::memory_order_relaxed) <= capacity_.load(std::memory_order_relaxed)) {
    return;
  }
  std::vector<Entry*> evicted;
  {
    MutexLock removal(removal_mu_);
    const size_t capacity = capacity_.load(std::memory_order_relaxed);
    const size_t count = plan_count_.load(std::memory_order_relaxed);
    if (count <= capacity) return;
    const size_t excess = count - capacity;

    struct Candidate {
      uint64_t stamp;
      HandleState* state;
      Entry* entry;
    };
    const std::vector<std::shared_ptr<HandleState>> states = snapshot_states();
    std::vector<Candidate> candidates;
    for (const std::shared_ptr<HandleState>& state : states) {
      ReaderLock lock(state->mu);
      for (const auto& [key, entry] : state->plans) {
        if (entry->refs.load(std::memory_order_acquire) == 1) {
          candidates.push_back(
              {entry->last_used.load(std::memory_order_relaxed), state.get(), entry});
        }
      }
    }
    // Oldest first. Usually the first `excess` do; the rest is sorted only when some of those
    // were pinned or used since the scan.
    auto older = [](const Candidate& a, const Candidate& b) { return a.stamp < b.stamp; };
    size_t sorted = std::min(candidates.size(), excess + 8);
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(sorted),
                      candidates.end(), older);
    // The entries stay valid: removals hold removal_mu_, and so do we.
    for (size_t i = 0; i < candidates.size() && evicted.size() < excess; ++i) {
      if (i == sorted) {
        std::sort(candidates.begin() + static_cast<ptrdiff_t>(sorted), candidates.end(), older);
        sorted = candidates.size();
      }
      const Candidate& c = candidates[i];
      WriterLock lock(c.state->mu);
      if (c.entry->refs.load(std::memory_order_acquire) != 1) continue;  // pinned meanwhile
      if (c.entry->last_used.load(std::memory_order_relaxed) != c.stamp) continue;  // used since
      c.state->plans.erase(c.entry->key);
      evicted.push_back(c.entry);
    }
  }
  for (Entry* entry : evicted) {
    plan_count_.fetch_sub(1, std::memory_order_relaxed);
    plan_host_bytes_.fetch_sub(entry->host_bytes, std::memory_order_relaxed);
    evictions_.fetch_add(1, std::memory_order_relaxed);
    entry->unref();  // frees the plan: no PlanRef holds it
  }
}

void PlanCache::Impl::release_plans(HandleState& state) {
  std::vector<Entry*> entries;
  {
    MutexLock removal(removal_mu_);
    WriterLock lock(state.mu);
    for (auto& [key, entry] : state.plans) entries.push_back(entry);
    state.plans.clear();
  }
  for (Entry* entry : state.retired) entry->unref();  // REQUIRES: the handle's in_use held
  state.retired.clear();
  for (Entry* entry : entries) {
    plan_count_.fetch_sub(1, std::memory_order_relaxed);
    plan_host_bytes_.fetch_sub(entry->host_bytes, std::memory_order_relaxed);
    entry->unref();
  }
}

Status PlanCache::Impl::execute(cudnnHandle_t handle, const ConvProblem& problem,
                                const TensorPointers& tensors, const TunePolicy* policy,
                                DeviceAllocator* allocator) {
  HandleState* state;
  CONVPLAN_RETURN_IF_ERROR(claim(handle, &state));
  Claim claimed(state);
  const uint32_t policy_id = policy != nullptr ? resolve_policy(*state, *policy) : 0;
  PlanRef ref;
  CONVPLAN_RETURN_IF_ERROR(get_plan(*state, problem, policy_id,
                                    policy != nullptr ? *policy : default_policy_, allocator, &ref,
                                    nullptr));
  Plan& plan = ref.plan();

  void* workspace = nullptr;
  DeviceBuffer per_call;  // from the caller's allocator, freed after the call is enqueued
  const size_t workspace_bytes = static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes(), 0));
  if (workspace_bytes > 0) {
    if (allocator != nullptr) {
      CONVPLAN_ASSIGN_OR_RETURN(per_call, DeviceBuffer::allocate(*allocator, workspace_bytes));
      workspace = per_call.get();
    } else {
      if (state->arena.size() < workspace_bytes) {
        state->arena.reset();  // the old buffer first: the peak stays at one arena
        CONVPLAN_ASSIGN_OR_RETURN(
            state->arena,
            DeviceBuffer::allocate(backend_->default_allocator(handle), workspace_bytes));
      }
      workspace = state->arena.get();
    }
  }

  Status status = plan.execute(handle, tensors, workspace);
  if (!status.ok()) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    if (ref.pin_ != nullptr) drop(*state, ref.pin_);
    return status.with_context("executing " + plan.config().to_string() +
                               " (dropped from the cache)");
  }
  return status;
}

StatusOr<PlanRef> PlanCache::Impl::acquire(cudnnHandle_t handle, const ConvProblem& problem,
                                           const TunePolicy* policy, AcquireOutcome* outcome) {
  HandleState* state;
  CONVPLAN_RETURN_IF_ERROR(claim(handle, &state));
  Claim claimed(state);
  const uint32_t policy_id = policy != nullptr ? resolve_policy(*state, *policy) : 0;
  PlanRef ref;
  CONVPLAN_RETURN_IF_ERROR(get_plan(*state, problem, policy_id,
                                    policy != nullptr ? *policy : default_policy_, nullptr, &ref,
                                    outcome));
  return ref;
}

// ---- Background tuning (TuneMode::kBackground) ----
//
// The leader of a background-mode key that is neither cached nor stored runs the heuristic's
// first candidate through validation (a provisional record, never stored) and hands the full
// limited-mode tune to one worker thread with a handle (and stream) of its own per device. Each
// handle's plan of the key carries the BackgroundTune; the handle's own thread, on its next call
// after the tune is done, builds the tuned plan for its handle and swaps it in (so a plan is never
// replaced under a call using it, nor built on a foreign handle); the provisional plan is retired
// with the handle, not destroyed. The worker stores the tuned record in the slot (later misses
// clone it directly) and in the database.

Status PlanCache::Impl::ensure_background_handle(int ordinal) {
  std::lock_guard<std::mutex> lock(background_mu_);
  if (background_stopping_) return Status(StatusCode::kCancelled, "the cache is being destroyed");
  if (background_handles_.count(ordinal) == 0) {
    CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<OwnedHandle> handle,
                              backend_->create_handle(ordinal));
    background_handles_.emplace(ordinal, std::move(handle));
  }
  if (!background_thread_.joinable())
    background_thread_ = std::thread([this] { background_loop(); });
  return ok_status();
}

StatusOr<TuningRecord> PlanCache::Impl::start_background(HandleState& state, const RecordKey& key,
                                                         const std::string& key_text,
                                                         const ConvProblem& problem,
                                                         const TunePolicy& policy,
                                                         DeviceAllocator* allocator,
                                                         std::optional<BackgroundJob>* job) {
  CONVPLAN_RETURN_IF_ERROR(ensure_background_handle(state.device.ordinal));
  TunePolicy first = policy;
  first.mode = TuneMode::kHeuristic;  // validated all the same (policy.validate)
  const auto start = std::chrono::steady_clock::now();
  StatusOr<TuningRecord> provisional = tuner_.tune(state.handle, problem, first, allocator);
  tune_ns_.fetch_add(elapsed_ns(start), std::memory_order_relaxed);
  if (!provisional.ok()) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    return provisional.status();
  }
  provisional->set_key(key);
  BackgroundJob j;
  j.ordinal = state.device.ordinal;
  j.problem = problem;
  j.policy = policy;
  j.policy.mode = TuneMode::kLimited;
  j.key = key;
  j.key_text = key_text;
  j.tune = std::make_shared<BackgroundTune>();
  *job = std::move(j);
  return provisional;
}

void PlanCache::Impl::enqueue_background(BackgroundJob job) {
  {
    std::lock_guard<std::mutex> lock(background_mu_);
    if (background_stopping_) return;  // the provisional plans stay: the cache is going away
    background_jobs_.push_back(std::move(job));
  }
  background_cv_.notify_one();
}

void PlanCache::Impl::background_loop() {
  for (;;) {
    BackgroundJob job;
    OwnedHandle* handle = nullptr;
    {
      std::unique_lock<std::mutex> lock(background_mu_);
      background_cv_.wait(lock, [&] { return background_stopping_ || !background_jobs_.empty(); });
      if (background_stopping_) return;
      job = std::move(background_jobs_.front());
      background_jobs_.pop_front();
      handle = background_handles_.at(job.ordinal).get();
    }
    const auto start = std::chrono::steady_clock::now();
    StatusOr<TuningRecord> tuned = background_tuner_.tune(handle->get(), job.problem, job.policy);
    tune_ns_.fetch_add(elapsed_ns(start), std::memory_order_relaxed);
    finish_background(job, std::move(tuned));
  }
}

void PlanCache::Impl::finish_background(BackgroundJob& job, StatusOr<TuningRecord> tuned) {
  if (!tuned.ok()) {
    if (tuned.status().code() != StatusCode::kCancelled) {
      failures_.fetch_add(1, std::memory_order_relaxed);
      log(LogLevel::kWarning,
          "background tuning of " + job.key_text +
              " failed; its provisional plan stays: " + tuned.status().to_string());
    }
    job.tune->done.store(true, std::memory_order_release);  // tuned stays null
    return;
  }
  TuningRecord record = std::move(tuned).value();
  record.set_key(job.key);
  put_in_database(record);
  auto shared = std::make_shared<const TuningRecord>(std::move(record));
  // Later misses of the key clone the tuned plan directly. The record is replaced before the
  // pending tune is dropped (find_or_make_record reads them in the other order).
  records_.replace(job.key_text, shared);
  {
    MutexLock lock(pending_mu_);
    auto it = pending_.find(job.key_text);
    if (it != pending_.end() && it->second == job.tune) pending_.erase(it);
  }
  job.tune->tuned = std::move(shared);
  job.tune->done.store(true, std::memory_order_release);
  // Counted last: whoever sees the count sees the record stored and the tuned plan ready.
  tunes_.fetch_add(1, std::memory_order_relaxed);
  background_tunes_.fetch_add(1, std::memory_order_release);
}

void PlanCache::Impl::stop_background_worker() {
  {
    std::lock_guard<std::mutex> lock(background_mu_);
    background_stopping_ = true;
    background_jobs_.clear();
  }
  stop_background_.store(true, std::memory_order_relaxed);  // ends a tune at its next candidate
  background_cv_.notify_all();
  if (background_thread_.joinable()) background_thread_.join();
}

Status PlanCache::Impl::serve_provisional(HandleState& state, Entry* entry,
                                          const ConvProblem& problem, PlanRef* out) {
  const BackgroundTune& tune = *entry->pending;
  if (tune.done.load(std::memory_order_acquire) && tune.tuned != nullptr) {
    Status upgraded = upgrade(state, entry, problem, out);
    if (upgraded.ok()) {
      entry->unref();  // the caller's pin of the provisional entry
      return ok_status();
    }
    // The tuned plan did not build here (counted in failures): the provisional one serves on.
  }
  provisional_calls_.fetch_add(1, std::memory_order_relaxed);
  *out = PlanRef(entry->plan.get(), entry, nullptr);
  return ok_status();
}

Status PlanCache::Impl::upgrade(HandleState& state, Entry* old, const ConvProblem& problem,
                                PlanRef* out) {
  bool from_json = false;
  CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                            clone_plan(state.handle, problem, *old->pending->tuned, &from_json));
  auto* fresh = new Entry(backend_, std::move(plan), old->key);
  fresh->last_used.store(tick_.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
  bool replaced = false;
  {
    MutexLock removal(removal_mu_);
    WriterLock lock(state.mu);
    auto it = state.plans.find(old->key);
    if (it != state.plans.end() && it->second == old) {
      it->second = fresh;
      fresh->refs.store(2, std::memory_order_relaxed);  // the map's and the caller's
      replaced = true;
    }
  }
  if (!replaced) {  // evicted since the caller pinned it: cached as a new entry
    PlanKey key = fresh->key;
    std::unique_ptr<Plan> built = std::move(fresh->plan);
    delete fresh;
    return keep(state, std::move(key), std::move(built), out);
  }
  plan_host_bytes_.fetch_add(fresh->host_bytes, std::memory_order_relaxed);
  plan_host_bytes_.fetch_sub(old->host_bytes, std::memory_order_relaxed);
  state.retired.push_back(old);  // the map's reference, kept with the handle
  *out = PlanRef(fresh->plan.get(), fresh, nullptr);
  return ok_status();
}

void PlanCache::Impl::forget_handle(cudnnHandle_t handle) {
  std::shared_ptr<HandleState> state;
  {
    HandleShard& shard = shard_of(handle);
    WriterLock lock(shard.mu);
    auto it = shard.states.find(handle);
    if (it == shard.states.end()) return;
    state = std::move(it->second);
    shard.states.erase(it);
  }
  // No call can claim the state any more. One in flight means the caller broke the REQUIRES
  // (the handle used from two threads); wait for it rather than free what it uses. The flag is
  // left set: the state is never used again.
  while (state->in_use.exchange(1, std::memory_order_acquire) != 0) std::this_thread::yield();
  release_plans(*state);
  state->arena.reset();
  retired_hits_.fetch_add(state->hits.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

std::optional<TuningRecord> PlanCache::Impl::find_record(cudnnHandle_t handle,
                                                         const ConvProblem& problem,
                                                         const TunePolicy& policy) {
  if (handle == nullptr || !problem.validate().ok()) return std::nullopt;
  std::optional<std::string> model_key;
  {
    HandleShard& shard = shard_of(handle);
    ReaderLock lock(shard.mu);
    auto it = shard.states.find(handle);
    if (it != shard.states.end()) model_key = it->second->model_key;
  }
  RecordKey key;
  if (model_key.has_value()) {
    key.device_model = *model_key;
    key.problem = problem;
    key.policy = policy.key();
  } else {
    StatusOr<DeviceInfo> device = backend_->device_of(handle);
    if (!device.ok()) return std::nullopt;
    key = record_key(*device, problem, policy);
  }
  std::shared_ptr<const TuningRecord> record = records_.find(key.to_string());
  if (record == nullptr) return std::nullopt;
  return *record;
}

CacheStats PlanCache::Impl::stats() const {
  CacheStats s;
  s.hits = retired_hits_.load(std::memory_order_relaxed);
  for (const HandleShard& shard : shards_) {
    ReaderLock lock(shard.mu);
    for (const auto& [handle, state] : shard.states) {
      s.hits += state->hits.load(std::memory_order_relaxed);
    }
  }
  s.misses = misses_.load(std::memory_order_relaxed);
  s.tunes = tunes_.load(std::memory_order_relaxed);
  s.clones = clones_.load(std::memory_order_relaxed);
  s.json_clones = json_clones_.load(std::memory_order_relaxed);
  s.db_hits = db_hits_.load(std::memory_order_relaxed);
  s.evictions = evictions_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.tune_ms = static_cast<double>(tune_ns_.load(std::memory_order_relaxed)) / 1e6;
  s.clone_ms = static_cast<double>(clone_ns_.load(std::memory_order_relaxed)) / 1e6;
  s.plans = plan_count_.load(std::memory_order_relaxed);
  s.records = record_count_.load(std::memory_order_relaxed);
  s.plan_host_bytes = plan_host_bytes_.load(std::memory_order_relaxed);
  s.provisional_calls = provisional_calls_.load(std::memory_order_relaxed);
  s.background_tunes = background_tunes_.load(std::memory_order_acquire);
  return s;
}

std::string CacheStats::to_string() const {
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << "hits=" << hits << " misses=" << misses << " tunes=" << tunes << " clones=" << clones
      << " json_clones=" << json_clones << " db_hits=" << db_hits << " evictions=" << evictions
      << " failures=" << failures << " tune_ms=" << tune_ms << " clone_ms=" << clone_ms
      << " plans=" << plans << " records=" << records << " plan_host_bytes=" << plan_host_bytes
      << " provisional_calls=" << provisional_calls << " background_tunes=" << background_tunes;
  return out.str();
}

// --- PlanCache ---

StatusOr<std::unique_ptr<PlanCache>> PlanCache::create(PlanCacheOptions options) {
  if (options.backend == nullptr) return invalid_argument("PlanCacheOptions.backend is null");
  size_t capacity;
  if (options.capacity.has_value()) {
    capacity = *options.capacity;  // the API wins over CONVPLAN_CACHE_CAPACITY
  } else {
    CONVPLAN_ASSIGN_OR_RETURN(capacity, capacity_from_environment());
  }
  TunePolicy policy;
  if (options.policy.has_value()) {
    policy = *options.policy;
  } else {
    CONVPLAN_ASSIGN_OR_RETURN(policy, TunePolicy::from_environment());
  }
  auto impl = std::make_unique<Impl>(std::move(options), capacity, std::move(policy));
  return std::unique_ptr<PlanCache>(new PlanCache(std::move(impl)));
}

PlanCache::PlanCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PlanCache::~PlanCache() = default;

StatusOr<PlanRef> PlanCache::acquire(cudnnHandle_t handle, const ConvProblem& problem,
                                     AcquireOutcome* outcome) {
  return impl_->acquire(handle, problem, nullptr, outcome);
}

StatusOr<PlanRef> PlanCache::acquire(cudnnHandle_t handle, const ConvProblem& problem,
                                     const TunePolicy& policy, AcquireOutcome* outcome) {
  return impl_->acquire(handle, problem, &policy, outcome);
}

const char* to_string(AcquireOutcome outcome) {
  switch (outcome) {
    case AcquireOutcome::kHit: return "hit";
    case AcquireOutcome::kClone: return "clone";
    case AcquireOutcome::kJsonClone: return "json_clone";
    case AcquireOutcome::kDatabaseHit: return "database";
    case AcquireOutcome::kTuned: return "tuned";
    case AcquireOutcome::kWaited: return "waited";
    case AcquireOutcome::kProvisional: return "provisional";
  }
  return "?";
}

Status PlanCache::execute(cudnnHandle_t handle, const ConvProblem& problem,
                          const TensorPointers& tensors, DeviceAllocator* allocator) {
  return impl_->execute(handle, problem, tensors, nullptr, allocator);
}

Status PlanCache::execute(cudnnHandle_t handle, const ConvProblem& problem,
                          const TensorPointers& tensors, const TunePolicy& policy,
                          DeviceAllocator* allocator) {
  return impl_->execute(handle, problem, tensors, &policy, allocator);
}

void PlanCache::forget_handle(cudnnHandle_t handle) { impl_->forget_handle(handle); }

Status PlanCache::prepare(int ordinal, std::span<const ConvProblem> problems, int threads) {
  return prepare(ordinal, problems, impl_->default_policy(), threads);
}

Status PlanCache::prepare(int ordinal, std::span<const ConvProblem> problems,
                          const TunePolicy& policy, int threads) {
  if (threads < 1) {
    return invalid_argument("prepare: threads=" + std::to_string(threads) + " must be >= 1");
  }
  for (size_t i = 0; i < problems.size(); ++i) {
    CONVPLAN_RETURN_IF_ERROR(
        problems[i].validate().with_context("prepare: problem " + std::to_string(i)));
  }
  TunePolicy tune = policy;
  if (tune.mode == TuneMode::kBackground) tune.mode = TuneMode::kLimited;
  std::vector<std::unique_ptr<OwnedHandle>> handles;
  while (handles.size() < std::min(problems.size(), static_cast<size_t>(threads))) {
    StatusOr<std::unique_ptr<OwnedHandle>> h = impl_->backend().create_handle(ordinal);
    if (!h.ok()) {
      if (handles.empty()) return h.status().with_context("prepare");
      break;  // fewer threads
    }
    handles.push_back(std::move(h).value());
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> stuck{false};  // a run did not finish: the device is still running it
  Mutex mu;
  size_t failed = 0;
  Status first;
  auto work = [&](cudnnHandle_t handle) {
    for (size_t i = next++; i < problems.size() && !stuck; i = next++) {
      StatusOr<PlanRef> plan = acquire(handle, problems[i], tune);
      if (plan.ok()) continue;
      MutexLock lock(mu);
      const bool deadline = plan.status().code() == StatusCode::kDeadlineExceeded;
      if (failed++ == 0 || (deadline && !stuck)) {
        first = plan.status().with_context(problems[i].to_string());
      }
      if (deadline) stuck = true;
    }
    forget_handle(handle);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < handles.size(); ++t) pool.emplace_back(work, handles[t]->get());
  if (!handles.empty()) work(handles[0]->get());
  for (std::thread& t : pool) t.join();
  if (stuck) {
    // cudnnDestroy waits for the device, which still runs what did not finish: the handles are
    // kept (never destroyed) so that the caller gets the error instead of a hang.
    static Mutex* const kept_mu = new Mutex;
    static auto* const kept = new std::vector<std::unique_ptr<OwnedHandle>>;
    MutexLock lock(*kept_mu);
    for (auto& h : handles) kept->push_back(std::move(h));
  }
  if (failed == 0) return ok_status();
  return Status(first.code(), "prepare: " + std::to_string(failed) + " of " +
                                  std::to_string(problems.size()) +
                                  " problems failed; the first: " + first.message());
}

std::optional<TuningRecord> PlanCache::find_record(cudnnHandle_t handle, const ConvProblem& problem,
                                                   const TunePolicy& policy) {
  return impl_->find_record(handle, problem, policy);
}

const TunePolicy& PlanCache::default_policy() const { return impl_->default_policy(); }
CacheStats PlanCache::stats() const { return impl_->stats(); }
size_t PlanCache::capacity() const { return impl_->capacity(); }
void PlanCache::set_capacity(size_t capacity) { impl_->set_capacity(capacity); }

}  // namespace convplan
