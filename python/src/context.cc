#include "context.h"

#include <Python.h>
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>

#include <atomic>

#include "convplan/rewrite.h"
#include "errors.h"

namespace nb = nanobind;

namespace convplan::python {
namespace {

std::atomic<uint64_t> g_next_context_id{1};

// The last handle this thread used: a hit skips the context's lock.
struct LastHandle {
  uint64_t context_id = 0;
  int device = -1;
  CudnnContext* handle = nullptr;  // a node of the context's map: stable while the context lives
};
thread_local LastHandle t_last;

// Hands the caller's workspace out once. A second request (the cache tuning on a miss wants
// buffers of its own) or a larger one is refused and remembered, so launch() can tell that the
// call needs prepare() rather than failing.
class CallerWorkspace final : public DeviceAllocator {
 public:
  CallerWorkspace(void* ptr, size_t bytes) : ptr_(ptr), bytes_(bytes) {}
  StatusOr<void*> allocate(size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    if (!given_ && bytes <= bytes_) {
      given_ = true;
      return ptr_;
    }
    refused_ = true;
    return out_of_memory("workspace of " + std::to_string(bytes) + " bytes not prepared");
  }
  void deallocate(void*, size_t) override {}  // the caller's allocator owns it
  bool refused() const { return refused_; }

 private:
  void* ptr_;
  size_t bytes_;
  bool given_ = false;
  bool refused_ = false;
};

cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }
void* as_ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

Status check_not_capturing(cudaStream_t stream, const ConvProblem& problem) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return ok_status();  // let the cache report what is wrong with the stream
  }
  if (capture != cudaStreamCaptureStatusNone) {
    return Status(StatusCode::kNotSupported,
                  "problem " + problem.to_string() +
                      " was first met inside CUDA graph capture; run it once on the capturing "
                      "stream before capturing (planning allocates and synchronizes)");
  }
  return ok_status();
}

// Makes `device` current for the call, as the tensors' device must be.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      switched_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~CurrentDevice() {
    if (switched_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
  bool switched_ = false;
};

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

}  // namespace

Context::Context(const ContextOptions& options) : id_(g_next_context_id.fetch_add(1)) {
  PlanCacheOptions cache_options;
  // The rewrites (space-to-depth, channel padding) are candidates like any engine, as in the CLI.
  StatusOr<CudnnBackendOptions> backend_options = CudnnBackendOptions::from_environment();
  if (!backend_options.ok()) raise_status(backend_options.status());
  cache_options.backend = with_rewrites(make_cudnn_backend(*backend_options));
  cache_options.capacity = options.capacity;
  StatusOr<TunePolicy> policy = TunePolicy::from_environment();
  if (!policy.ok()) raise_status(policy.status());
  if (options.tune) {
    StatusOr<TuneMode> mode = parse_tune_mode(*options.tune);
    if (!mode.ok()) raise_status(mode.status().with_context("tune"));
    policy->mode = *mode;
  }
  if (options.workspace_limit) {
    if (*options.workspace_limit < 0) {
      raise_status(invalid_argument("workspace_limit=" + std::to_string(*options.workspace_limit) +
                                    " must be >= 0"));
    }
    policy->workspace_limit = *options.workspace_limit;
  }
  cache_options.policy = *policy;
  db_path_ = options.db.empty() ? TuningDatabase::default_path() : options.db;
  if (db_path_ != "off") {
    StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(db_path_);
    if (!db.ok()) raise_status(db.status().with_context("db=" + db_path_));
    cache_options.database = std::move(db).value();
  }
  StatusOr<std::unique_ptr<PlanCache>> cache = PlanCache::create(std::move(cache_options));
  if (!cache.ok()) raise_status(cache.status());
  cache_ = std::move(cache).value();
}

Context::~Context() {
  if (interpreter_finalizing()) {
    // At exit the CUDA runtime may be gone before us (PyTorch leaks its cuDNN handles for the
    // same reason): leave the cache and the handles to the process's end.
    (void)cache_.release();
    (void)new std::map<HandleKey, CudnnContext>(std::move(handles_));
    return;
  }
  cache_.reset();  // plans before the handles they are bound to
  std::lock_guard<std::mutex> lock(mu_);
  handles_.clear();
}

size_t Context::handle_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return handles_.size();
}

StatusOr<cudnnHandle_t> Context::handle_for(int device, cudaStream_t stream) {
  if (t_last.context_id != id_ || t_last.device != device) {
    CONVPLAN_RETURN_IF_ERROR(gpu_available());
    std::lock_guard<std::mutex> lock(mu_);
    const HandleKey key{device, std::this_thread::get_id()};
    auto it = handles_.find(key);
    if (it == handles_.end()) {
      CONVPLAN_ASSIGN_OR_RETURN(CudnnContext made, CudnnContext::for_stream(device, stream));
      it = handles_.emplace(key, std::move(made)).first;
    }
    t_last = LastHandle{id_, device, &it->second};
  }
  if (t_last.handle->stream() != stream)
    CONVPLAN_RETURN_IF_ERROR(t_last.handle->set_stream(stream));
  return t_last.handle->handle();
}

Status Context::with_plan(const ConvProblem& problem, int device, uintptr_t stream,
                          const std::function<void(cudnnHandle_t, const Plan&)>& use) {
  nb::gil_scoped_release release;
  CONVPLAN_RETURN_IF_ERROR(gpu_available());
  CurrentDevice current(device);
  // Before anything is made: a new handle (cudnnCreate) is no more capture-safe than tuning.
  CONVPLAN_RETURN_IF_ERROR(check_not_capturing(as_stream(stream), problem));
  CONVPLAN_ASSIGN_OR_RETURN(cudnnHandle_t handle, handle_for(device, as_stream(stream)));
  CONVPLAN_ASSIGN_OR_RETURN(PlanRef ref, cache_->acquire(handle, problem));
  use(handle, ref.plan());
  return ok_status();
}

int64_t Context::prepare(const ConvProblem& problem, int device, uintptr_t stream) {
  int64_t workspace = 0;
  check(with_plan(problem, device, stream,
                  [&](cudnnHandle_t, const Plan& plan) { workspace = plan.workspace_bytes(); }));
  return workspace;
}

void Context::prepare_all(const std::vector<ConvProblem>& problems, int device, int threads) {
  Status status;
  {
    nb::gil_scoped_release release;
    CurrentDevice current(device);
    status = cache_->prepare(device, problems, threads);
  }
  check(status);
}

bool Context::launch(const ConvProblem& problem, int device, uintptr_t stream, uintptr_t x,
                     uintptr_t w, uintptr_t y, uintptr_t workspace, int64_t workspace_bytes,
                     uintptr_t bias, uintptr_t residual) {
  const TensorPointers tensors{as_ptr(x), as_ptr(w), as_ptr(y), as_ptr(bias), as_ptr(residual)};
  CallerWorkspace caller_workspace(as_ptr(workspace), static_cast<size_t>(workspace_bytes));
  Status status;
  {
    nb::gil_scoped_release release;
    CurrentDevice current(device);
    StatusOr<cudnnHandle_t> handle = handle_for(device, as_stream(stream));
    status = handle.ok() ? cache_->execute(*handle, problem, tensors, &caller_workspace)
                         : handle.status();
  }
  if (status.ok()) return true;
  if (caller_workspace.refused()) return false;
  raise_status(status);
}

void Context::run(const ConvProblem& problem, uintptr_t x, uintptr_t w, uintptr_t y, int device,
                  uintptr_t stream, uintptr_t bias, uintptr_t residual) {
  const TensorPointers tensors{as_ptr(x), as_ptr(w), as_ptr(y), as_ptr(bias), as_ptr(residual)};
  Status status;
  {
    nb::gil_scoped_release release;
    status = [&]() -> Status {
      CONVPLAN_RETURN_IF_ERROR(problem.validate());
      CurrentDevice current(device);
      CONVPLAN_ASSIGN_OR_RETURN(cudnnHandle_t handle, handle_for(device, as_stream(stream)));
      return cache_->execute(handle, problem, tensors);
    }();
  }
  check(status);
}

namespace {

// The fastest candidate of each kind that was timed and kept ("ok").
void fill_best(const TuningRecord& record, Context::PlanInfo& info) {
  for (const CandidateResult& c : record.candidates) {
    if (c.outcome != "ok" || c.median_ms < 0) continue;
    double& best = c.config.unfused ? info.best_unfused_ms : info.best_fused_ms;
    if (best < 0 || c.median_ms < best) best = c.median_ms;
  }
}

}  // namespace

Context::PlanInfo Context::plan_info(const ConvProblem& problem, int device, uintptr_t stream) {
  check(problem.validate());
  PlanInfo info;
  check(with_plan(problem, device, stream, [&](cudnnHandle_t handle, const Plan& plan) {
    info.config = plan.config().to_string();
    info.unfused = plan.config().unfused;
    info.workspace_bytes = plan.workspace_bytes();
    std::optional<TuningRecord> record =
        cache_->find_record(handle, problem, cache_->default_policy());
    if (record.has_value()) {
      info.time_ms = record->time_ms;
      info.candidates = static_cast<int>(record->candidates.size());
      fill_best(*record, info);
    }
  }));
  return info;
}

}  // namespace convplan::python
