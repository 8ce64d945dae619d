#include "support/scripted_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "convplan/reference.h"
#include "epilogues/epilogue.h"

namespace convplan::testing {
namespace {

void sleep_us(int us) {
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

int64_t span_bytes(const ConvProblem& p, const TensorShape& s) {
  return s.span_elements() * size_of(p.data_type);
}

}  // namespace

cudnnHandle_t scripted_handle(int index) {
  return reinterpret_cast<cudnnHandle_t>(static_cast<uintptr_t>(0x10000 + 0x100 * index));
}

DeviceInfo ScriptedBackend::default_device(int ordinal) {
  DeviceInfo d;
  d.ordinal = ordinal;
  d.uuid = "GPU-scripted-" + std::to_string(ordinal);
  d.name = "Scripted GPU";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.l2_bytes = 60 << 20;
  d.memory_bytes = int64_t{80} << 30;
  d.cudnn_version = 91900;
  return d;
}

class ScriptedBackend::Allocator final : public DeviceAllocator {
 public:
  explicit Allocator(ScriptedBackend& owner) : owner_(owner) {}
  StatusOr<void*> allocate(size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    if (bytes > owner_.allocation_limit_.load()) {
      return out_of_memory("scripted allocation of " + std::to_string(bytes) +
                           " bytes exceeds the limit of " +
                           std::to_string(owner_.allocation_limit_.load()));
    }
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == nullptr) return out_of_memory("host allocation failed");
    owner_.note_allocation(p, bytes);
    ++owner_.live_allocations;
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    if (ptr == nullptr) return;
    owner_.synchronize_users(ptr);  // stream-ordered: lagging work that uses the block runs first
    owner_.note_allocation(ptr, 0);
    --owner_.live_allocations;
    std::free(ptr);
  }

 private:
  ScriptedBackend& owner_;
};

namespace {
EngineBehavior behavior_of(const ScriptedEngine& engine, const EngineConfig& config) {
  return engine.behavior_for ? engine.behavior_for(config) : engine.behavior;
}
}  // namespace

class ScriptedBackend::ScriptedPlan final : public Plan {
 public:
  ScriptedPlan(ScriptedBackend& owner, cudnnHandle_t handle, const ConvProblem& problem,
               const ScriptedEngine& engine, EngineConfig config)
      : owner_(owner),
        handle_(handle),
        problem_(problem),
        engine_(engine),
        config_(std::move(config)) {
    ++owner_.live_plans;
  }
  ~ScriptedPlan() override { --owner_.live_plans; }

  cudnnHandle_t handle() const override { return handle_; }
  const EngineConfig& config() const override { return config_; }
  NoteSet notes() const override {
    return config_.unfused && engine_.unfused_notes ? *engine_.unfused_notes : engine_.notes;
  }
  int64_t workspace_bytes() const override { return engine_.workspace_bytes; }
  size_t host_bytes() const override { return 1024; }
  StatusOr<std::string> to_json() const override { return "scripted:" + config_.to_string(); }

  Status execute(cudnnHandle_t handle, const TensorPointers& t, void* workspace) override {
    return execute_counted(handle, t, workspace, /*timed=*/false);
  }

  // execute(), counted in timed_runs instead of executions when `timed`.
  Status execute_counted(cudnnHandle_t handle, const TensorPointers& t, void* workspace,
                         bool timed) {
    if (handle != handle_) {
      ++owner_.foreign_handle_executions;
      ADD_FAILURE() << "scripted plan of engine " << engine_.id << " built on handle " << handle_
                    << " executed with handle " << handle;
      return {StatusCode::kWrongHandle, "plan built on another handle"};
    }
    if (generation_ != owner_.generation(handle_)) {
      ++owner_.stale_handle_executions;
      ADD_FAILURE() << "scripted plan of engine " << engine_.id << " built on handle " << handle_
                    << " generation " << generation_ << " executed after the handle was recreated";
      return {StatusCode::kWrongHandle, "plan built on a destroyed handle"};
    }
    std::atomic<int>& busy = owner_.in_use(handle_);
    if (busy.fetch_add(1) != 0) ++owner_.concurrent_handle_uses;
    Status s = launch(t, workspace, timed);
    busy.fetch_sub(1);
    return s;
  }

  bool never_finishes() const {
    return behavior_of(engine_, config_) == EngineBehavior::kNeverFinishes;
  }

  float time_per_run() const {
    if (engine_.time_for_batch) return engine_.time_for_batch(problem_.n);
    return engine_.time_for ? engine_.time_for(config_) : engine_.time_ms;
  }

 private:
  // What a launch reports at once; the computation itself runs now, or later with a lag.
  Status launch(const TensorPointers& t, void* workspace, bool timed) {
    const EngineBehavior behavior = behavior_of(engine_, config_);
    if (behavior == EngineBehavior::kFailsToExecute) {
      return {StatusCode::kCudnnError,
              "scripted engine " + std::to_string(engine_.id) + " fails to execute"};
    }
    if (engine_.workspace_bytes > 0 && workspace == nullptr) {
      return invalid_argument("scripted engine needs a workspace and got none");
    }
    const bool unfused = config_.unfused;
    if (!owner_.completion_lag_.load()) {
      return run(owner_, problem_, engine_, behavior, unfused, t, workspace, timed);
    }
    // The work outlives this plan (as a launched kernel outlives cudnnDestroy of its plan): it
    // holds copies, not the plan.
    ScriptedBackend* owner = &owner_;
    const ConvProblem problem = problem_;
    const ScriptedEngine* engine = &engine_;
    owner_.enqueue(handle_, {t.x, t.w, t.y, workspace},
                   [owner, problem, engine, behavior, unfused, t, workspace, timed] {
                     ++owner->lagged_runs;
                     const Status s =
                         run(*owner, problem, *engine, behavior, unfused, t, workspace, timed);
                     if (!s.ok()) ADD_FAILURE() << "lagged scripted run failed: " << s.to_string();
                   });
    return ok_status();
  }

  // unfused: the plain convolution, then the epilogue's host twin (an unfused candidate).
  static Status run(ScriptedBackend& owner, const ConvProblem& problem,
                    const ScriptedEngine& engine, EngineBehavior behavior, bool unfused,
                    const TensorPointers& t, void* workspace, bool timed) {
    const TensorShape xs = problem.x_shape(), ws = problem.w_shape(), ys = problem.y_shape();
    const DataType dt = problem.data_type;
    auto load = [&](void* p, const TensorShape& s) {
      std::vector<double> v(static_cast<size_t>(s.span_elements()));
      from_data_type(dt, p, v.data(), s.span_elements());
      return v;
    };
    std::vector<double> x = load(t.x, xs), w = load(t.w, ws), y = load(t.y, ys);
    // A chain: fused, the reference computes it; unfused, the plain convolution here and the
    // epilogue's host twin over the written output below (as the cuDNN backend's two steps).
    const PostOps& chain = problem.post_ops;
    std::vector<double> bias, residual;
    if (chain.has(PostOpKind::kBias) && t.bias != nullptr) {
      bias = load(const_cast<void*>(t.bias), problem.bias_shape());
    }
    if (chain.has(PostOpKind::kAdd) && t.residual != nullptr) {
      residual = load(const_cast<void*>(t.residual), problem.residual_shape());
    }
    if (unfused) {
      CONVPLAN_RETURN_IF_ERROR(reference_convolution(problem.without_post_ops(), x, w, y));
    } else {
      CONVPLAN_RETURN_IF_ERROR(reference_convolution(problem, x, w, y, bias, residual));
    }
    const TensorRole out = problem.output_tensor();
    std::vector<double>& ov = by_role(out, x, w, y);
    void* op = by_role(out, t.x, t.w, t.y);
    const TensorShape& os = by_role(out, xs, ws, ys);
    if (behavior == EngineBehavior::kWrongResult) {
      for (double& v : ov) v *= 1.5;
    }
    to_data_type(dt, ov.data(), op, os.span_elements());
    if (unfused) {
      CONVPLAN_RETURN_IF_ERROR(
          epilogue_detail::run_epilogue_on_host(problem, op, t.bias, t.residual));
    }
    if (behavior == EngineBehavior::kWritesPastOutput) {
      std::memset(static_cast<char*>(op) + span_bytes(problem, os), 0x5a, 64);
    }
    if (engine.workspace_bytes > 0) {
      std::memset(workspace, 0x33, static_cast<size_t>(engine.workspace_bytes));
      if (behavior == EngineBehavior::kWritesPastWorkspace) {
        std::memset(static_cast<char*>(workspace) + engine.workspace_bytes, 0x5a, 64);
      }
    }
    ++(timed ? owner.timed_runs : owner.executions);
    return ok_status();
  }

  ScriptedBackend& owner_;
  cudnnHandle_t handle_;
  const uint64_t generation_ = owner_.generation(handle_);
  ConvProblem problem_;
  const ScriptedEngine& engine_;
  EngineConfig config_;
};

ScriptedBackend::ScriptedBackend(std::vector<ScriptedEngine> engines)
    : engines_(std::move(engines)), allocator_(std::make_unique<Allocator>(*this)) {}

ScriptedBackend::~ScriptedBackend() =
    default;  // queued work is dropped, as a reset device drops it

const ScriptedEngine* ScriptedBackend::engine(int64_t id) const {
  for (const ScriptedEngine& e : engines_) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

std::atomic<int>& ScriptedBackend::in_use(cudnnHandle_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = in_use_[handle];
  if (!slot) slot = std::make_unique<std::atomic<int>>(0);
  return *slot;
}

namespace {
class ScriptedOwnedHandle final : public OwnedHandle {
 public:
  ScriptedOwnedHandle(cudnnHandle_t handle, std::atomic<int64_t>& live)
      : handle_(handle), live_(live) {
    ++live_;
  }
  ~ScriptedOwnedHandle() override { --live_; }
  cudnnHandle_t get() const override { return handle_; }

 private:
  cudnnHandle_t handle_;
  std::atomic<int64_t>& live_;
};
}  // namespace

StatusOr<std::unique_ptr<OwnedHandle>> ScriptedBackend::create_handle(int ordinal) {
  const cudnnHandle_t h = scripted_handle(1000 + static_cast<int>(created_handles++));
  set_device(h, default_device(ordinal));
  return std::unique_ptr<OwnedHandle>(std::make_unique<ScriptedOwnedHandle>(h, live_handles));
}

void ScriptedBackend::set_device(cudnnHandle_t handle, DeviceInfo device) {
  std::lock_guard<std::mutex> lock(mu_);
  devices_[handle] = std::move(device);
}

StatusOr<DeviceInfo> ScriptedBackend::device_of(cudnnHandle_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = devices_.find(handle);
  return it != devices_.end() ? it->second : default_device(0);
}

StatusOr<std::vector<Candidate>> ScriptedBackend::list(const ConvProblem& p, CandidateSource source,
                                                       const std::vector<std::string>* only) {
  ++heuristic_queries;
  sleep_us(heuristics_delay_us_);
  // Mode B's own engines come first in its list (it has an order of its own); the other
  // heuristic modes leave them out.
  const bool heuristic =
      source != CandidateSource::kAllEngines && source != CandidateSource::kFallback;
  std::vector<const ScriptedEngine*> order;
  for (const ScriptedEngine& e : engines_) order.push_back(&e);
  std::stable_partition(order.begin(), order.end(),
                        [](const ScriptedEngine* e) { return e->only_in_heuristic_b; });
  std::vector<Candidate> out;
  for (const ScriptedEngine* ep : order) {
    const ScriptedEngine& e = *ep;
    if (e.supports && !e.supports(p)) continue;
    const bool listed = source == CandidateSource::kAllEngines ? true
                        : source == CandidateSource::kFallback ? e.in_fallback
                                                               : e.in_heuristics;
    if (!listed) continue;
    if (heuristic && e.only_in_heuristic_b && source != CandidateSource::kHeuristicB) continue;
    std::vector<std::vector<KnobChoice>> configs = e.listed_configs;
    if (!heuristic || configs.empty()) {
      configs = {{}};
      for (const KnobInfo& k : e.knobs) configs[0].push_back({k.type, k.default_value});
    }
    for (std::vector<KnobChoice>& knobs : configs) {
      Candidate c;
      c.config.engine_id = e.id;
      c.config.knobs = std::move(knobs);
      c.notes = e.notes;
      c.rank = static_cast<int>(out.size());
      out.push_back(std::move(c));
      if (!p.post_ops.empty()) {  // both kinds, as the cuDNN backend offers them
        Candidate unfused = out.back();
        unfused.config.unfused = true;
        if (e.unfused_notes) unfused.notes = *e.unfused_notes;
        unfused.rank = static_cast<int>(out.size());
        out.push_back(std::move(unfused));
      }
    }
  }
  if (source == CandidateSource::kFallback) return out;  // as with_rewrites(): nothing clever
  auto named = [only](const std::string& name) {
    return only == nullptr || std::find(only->begin(), only->end(), name) != only->end();
  };
  const std::vector<Candidate> plain = std::move(out);
  out.clear();
  if (named("")) out = plain;  // "" names the problem itself
  for (const std::string& name : rewrites_) {
    if (!named(name)) continue;
    for (const Candidate& p : plain) {
      Candidate c = p;
      c.config.rewrite = name;
      c.rank = static_cast<int>(out.size());
      out.push_back(std::move(c));
    }
  }
  return out;
}

StatusOr<std::vector<KnobInfo>> ScriptedBackend::knobs(cudnnHandle_t, const ConvProblem&,
                                                       int64_t engine_id) {
  const ScriptedEngine* e = engine(engine_id);
  if (e == nullptr) return not_supported("no scripted engine " + std::to_string(engine_id));
  return e->knobs;
}

StatusOr<std::unique_ptr<Plan>> ScriptedBackend::build(cudnnHandle_t handle, const ConvProblem& p,
                                                       const EngineConfig& config) {
  const ScriptedEngine* e = engine(config.engine_id);
  if (e == nullptr || (e->supports && !e->supports(p))) {
    return not_supported("scripted engine " + std::to_string(config.engine_id) +
                         " does not support " + p.to_string());
  }
  for (const KnobChoice& k : config.knobs) {
    bool known = false;
    for (const KnobInfo& info : e->knobs) {
      known =
          known || (info.type == k.type && k.value >= info.min_value && k.value <= info.max_value);
    }
    if (!known)
      return not_supported("knob " + std::to_string(k.type) + "=" + std::to_string(k.value));
  }
  if (behavior_of(*e, config) == EngineBehavior::kFailsToBuild) {
    return not_supported("scripted engine " + std::to_string(e->id) + " fails to build");
  }
  int fail = builds_to_fail_.load();
  while (fail > 0 && !builds_to_fail_.compare_exchange_weak(fail, fail - 1)) {
  }
  if (fail > 0) return Status(StatusCode::kCudnnError, "injected build failure");
  const NoteSet notes = config.unfused && e->unfused_notes ? *e->unfused_notes : e->notes;
  sleep_us(build_delay_us_ * ((notes & kNoteRuntimeCompilation) ? 10 : 1));
  if (notes & kNoteRuntimeCompilation) ++runtime_compilations;
  ++builds;
  return std::unique_ptr<Plan>(std::make_unique<ScriptedPlan>(*this, handle, p, *e, config));
}

StatusOr<std::unique_ptr<Plan>> ScriptedBackend::build_from_json(cudnnHandle_t handle,
                                                                 const ConvProblem& p,
                                                                 std::string_view json) {
  constexpr std::string_view kPrefix = "scripted:";
  if (json.substr(0, kPrefix.size()) != kPrefix) return corrupt_data("not a scripted plan");
  CONVPLAN_ASSIGN_OR_RETURN(EngineConfig config, EngineConfig::parse(json.substr(kPrefix.size())));
  const ScriptedEngine* e = engine(config.engine_id);
  if (e == nullptr) return not_supported("no scripted engine " + std::to_string(config.engine_id));
  ++json_builds;
  return std::unique_ptr<Plan>(std::make_unique<ScriptedPlan>(*this, handle, p, *e, config));
}

DeviceAllocator& ScriptedBackend::default_allocator(cudnnHandle_t) { return *allocator_; }

// Copies and fills are ordered after the handle's earlier work (its stream), as on a GPU.
Status ScriptedBackend::copy_to_device(cudnnHandle_t handle, void* dst, const void* src,
                                       size_t bytes) {
  synchronize(handle);
  std::memcpy(dst, src, bytes);
  return ok_status();
}

Status ScriptedBackend::copy_to_host(cudnnHandle_t handle, void* dst, const void* src,
                                     size_t bytes) {
  synchronize(handle);
  std::memcpy(dst, src, bytes);
  return ok_status();
}

Status ScriptedBackend::fill(cudnnHandle_t handle, void* dst, uint8_t byte, size_t bytes) {
  synchronize(handle);
  std::memset(dst, byte, bytes);
  return ok_status();
}

StatusOr<std::vector<float>> ScriptedBackend::time(Plan& plan, const TensorPointers& tensors,
                                                   void* workspace, int warmup, int runs, bool,
                                                   float cutoff_ms) {
  ++timings;
  struct UnderWay {  // counts this call among those under way, for max_concurrent_timings
    ScriptedBackend& b;
    explicit UnderWay(ScriptedBackend& backend) : b(backend) {
      const int64_t now = ++b.timings_now;
      int64_t seen = b.max_concurrent_timings.load();
      while (now > seen && !b.max_concurrent_timings.compare_exchange_weak(seen, now)) {
      }
    }
    ~UnderWay() { --b.timings_now; }
  } under_way(*this);
  sleep_us(time_delay_us_);
  auto* sp = dynamic_cast<ScriptedPlan*>(&plan);
  if (sp == nullptr) return invalid_argument("not a scripted plan");
  if (sp->never_finishes()) {
    return Status(StatusCode::kDeadlineExceeded, "scripted engine's run did not finish");
  }
  // Each run executes, as on a GPU: a plan that fails, writes out of bounds or runs on a stale
  // handle while timed is caught here too. Timing waits for the work (events synchronized).
  for (int i = 0; i < warmup; ++i) {
    CONVPLAN_RETURN_IF_ERROR(sp->execute_counted(plan.handle(), tensors, workspace, true));
  }
  std::vector<float> times;
  for (int i = 0; i < runs; ++i) {
    CONVPLAN_RETURN_IF_ERROR(sp->execute_counted(plan.handle(), tensors, workspace, true));
    times.push_back(sp->time_per_run());
    if (cutoff_ms > 0 && times.back() > cutoff_ms) break;
  }
  synchronize(plan.handle());
  return times;
}

void ScriptedBackend::note_allocation(const void* block, size_t bytes) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (bytes == 0) {
    sizes_.erase(block);
  } else {
    sizes_[block] = bytes;
  }
}

size_t ScriptedBackend::allocation_size(const void* block) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  auto it = sizes_.find(block);
  return it == sizes_.end() ? 0 : it->second;
}

void ScriptedBackend::recreate_handle(cudnnHandle_t handle) {
  synchronize(handle);  // cudnnDestroy waits for the handle's work
  std::lock_guard<std::mutex> lock(mu_);
  ++generations_[handle];
}

uint64_t ScriptedBackend::generation(cudnnHandle_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = generations_.find(handle);
  return it == generations_.end() ? 0 : it->second;
}

void ScriptedBackend::enqueue(cudnnHandle_t handle, std::array<const void*, 4> uses,
                              std::function<void()> work) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  pending_[handle].push_back(Pending{uses, std::move(work)});
}

void ScriptedBackend::synchronize(cudnnHandle_t handle) {
  std::vector<Pending> work;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    auto it = pending_.find(handle);
    if (it == pending_.end()) return;
    work.swap(it->second);
  }
  for (const Pending& w : work) w.run();
}

void ScriptedBackend::synchronize_users(const void* block) {
  const size_t size = allocation_size(block);
  const char* lo = static_cast<const char*>(block);
  std::vector<cudnnHandle_t> handles;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    for (const auto& [handle, work] : pending_) {
      for (const Pending& w : work) {
        for (const void* p : w.uses) {
          const char* c = static_cast<const char*>(p);
          if (c != nullptr && c >= lo && c < lo + size) handles.push_back(handle);
        }
      }
    }
  }
  for (cudnnHandle_t h : handles) synchronize(h);
}

void ScriptedBackend::synchronize_all() {
  std::vector<cudnnHandle_t> handles;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    for (const auto& [handle, work] : pending_) handles.push_back(handle);
  }
  for (cudnnHandle_t h : handles) synchronize(h);
}

std::vector<ScriptedEngine> basic_engines() {
  std::vector<ScriptedEngine> e(4);
  e[0].id = 0;
  e[0].time_ms = 3;
  e[1].id = 1;
  e[1].time_ms = 1;
  e[1].workspace_bytes = 1 << 20;
  e[2].id = 2;
  e[2].time_ms = 2;
  e[3].id = 9;
  e[3].time_ms = 5;
  e[3].in_heuristics = false;
  e[3].in_fallback = true;
  return e;
}

}  // namespace convplan::testing
