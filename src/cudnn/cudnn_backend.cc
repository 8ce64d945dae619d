// The production Backend: cuDNN's backend (graph) API. Stateless apart from two caches, each under
// its own lock: device identities per device ordinal, and the L2-flush buffer and allocator of
// each device.
#include "convplan/cudnn_backend.h"

#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "convplan/environment.h"
#include "cudnn/check.h"
#include "cudnn/cuda_util.h"
#include "cudnn/engines.h"
#include "cudnn/epilogue_plan.h"
#include "cudnn/graph.h"
#include "cudnn/kernel_cache.h"
#include "cudnn/output_check.h"
#include "cudnn/output_check_kernels.h"
#include "cudnn/plan.h"

namespace convplan {
namespace {

using cudnn_detail::BackendDescriptor;
using cudnn_detail::CudaDeviceAllocator;
using cudnn_detail::CudaEvent;
using cudnn_detail::DeviceGuard;

StatusOr<cudaStream_t> stream_of(cudnnHandle_t handle) {
  if (handle == nullptr) return invalid_argument("handle is null");
  cudaStream_t stream = nullptr;
  CONVPLAN_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  return stream;
}

StatusOr<int> device_of_handle(cudnnHandle_t handle) {
  CONVPLAN_ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(handle));
  return cudnn_detail::device_of_stream(stream);
}

cudnnBackendHeurMode_t heur_mode(CandidateSource s) {
  switch (s) {
    case CandidateSource::kHeuristicInstant: return CUDNN_HEUR_MODE_INSTANT;
    case CandidateSource::kHeuristicA: return CUDNN_HEUR_MODE_A;
    case CandidateSource::kHeuristicB: return CUDNN_HEUR_MODE_B;
    case CandidateSource::kFallback: return CUDNN_HEUR_MODE_FALLBACK;
    case CandidateSource::kAllEngines: break;
  }
  return CUDNN_HEUR_MODE_INSTANT;
}

// A CudnnContext (handle and stream) as an OwnedHandle.
class OwnedContext final : public OwnedHandle {
 public:
  explicit OwnedContext(CudnnContext context) : context_(std::move(context)) {}
  cudnnHandle_t get() const override { return context_.handle(); }

 private:
  CudnnContext context_;
};

// cuDNN's kernel cache descriptor and the dynamic-shape graphs it needs: 9.5 and later.
constexpr int64_t kKernelCacheMinVersion = 90500;

class CudnnBackend final : public Backend {
 public:
  explicit CudnnBackend(const CudnnBackendOptions& options)
      : kernel_cache_(options.kernel_cache && cudnn_runtime_version() >= kKernelCacheMinVersion) {}

  std::string name() const override { return "cudnn"; }

  StatusOr<std::unique_ptr<OwnedHandle>> create_handle(int ordinal) override {
    CONVPLAN_ASSIGN_OR_RETURN(CudnnContext context, CudnnContext::create(ordinal));
    return std::unique_ptr<OwnedHandle>(std::make_unique<OwnedContext>(std::move(context)));
  }

  StatusOr<DeviceInfo> device_of(cudnnHandle_t handle) override {
    CONVPLAN_ASSIGN_OR_RETURN(int device, device_of_handle(handle));
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = devices_.find(device);
      if (it != devices_.end()) return it->second;
    }
    // Queried outside the lock (it takes ~ms); a racing thread computes the same value. The
    // first use of a device also checks that this build has kernels for its architecture.
    CONVPLAN_RETURN_IF_ERROR(cudnn_detail::check_device_architecture(device));
    CONVPLAN_ASSIGN_OR_RETURN(DeviceInfo info, cudnn_detail::query_device(device));
    std::lock_guard<std::mutex> lock(mu_);
    devices_.emplace(device, info);
    return info;
  }

  // Without a chain: the engines of the convolution's graph. With one, two kinds, interleaved so
  // that a shortened list still holds both: engines of the whole graph (fused), and engines of
  // the plain convolution marked unfused (convplan's epilogue runs after them). A chain cuDNN
  // cannot build a graph for leaves the unfused kind alone.
  StatusOr<std::vector<Candidate>> candidates(cudnnHandle_t handle, const ConvProblem& problem,
                                              CandidateSource source) override {
    if (handle == nullptr) return invalid_argument("handle is null");
    CONVPLAN_RETURN_IF_ERROR(problem.validate());
    if (problem.post_ops.empty()) return list_candidates(handle, problem, source, false);
    StatusOr<std::vector<Candidate>> fused = list_candidates(handle, problem, source, false);
    if (!fused.ok() && fused.status().code() != StatusCode::kNotSupported &&
        fused.status().code() != StatusCode::kCudnnError) {
      return fused.status();
    }
    CONVPLAN_ASSIGN_OR_RETURN(std::vector<Candidate> unfused,
                              list_candidates(handle, problem.without_post_ops(), source, true));
    std::vector<Candidate> out;
    const std::vector<Candidate> none;
    const std::vector<Candidate>& f = fused.ok() ? *fused : none;
    const std::vector<Candidate>& u = unfused;
    for (size_t i = 0; i < std::max(f.size(), u.size()); ++i) {
      for (const std::vector<Candidate>* list : {&f, &u}) {
        if (i >= list->size()) continue;
        out.push_back((*list)[i]);
        out.back().rank = static_cast<int>(out.size()) - 1;
      }
    }
    return out;
  }

  // With a chain: the engine's knobs on the whole graph, else on the plain convolution's (the
  // knob variants the tuner makes from them are fused candidates).
  StatusOr<std::vector<KnobInfo>> knobs(cudnnHandle_t handle, const ConvProblem& problem,
                                        int64_t engine_id) override {
    if (handle == nullptr) return invalid_argument("handle is null");
    StatusOr<std::vector<KnobInfo>> on_graph = engine_knobs(handle, problem, engine_id);
    if (on_graph.ok() || problem.post_ops.empty()) return on_graph;
    return engine_knobs(handle, problem.without_post_ops(), engine_id);
  }

  StatusOr<std::unique_ptr<Plan>> build(cudnnHandle_t handle, const ConvProblem& problem,
                                        const EngineConfig& config) override {
    cudnn_detail::KernelCaches* caches = kernel_caches_for(handle);
    if (config.unfused) return cudnn_detail::build_unfused_plan(handle, problem, config, caches);
    CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<cudnn_detail::CudnnPlan> plan,
                              cudnn_detail::build_plan(handle, problem, config, caches));
    return std::unique_ptr<Plan>(std::move(plan));
  }

  StatusOr<std::unique_ptr<Plan>> build_from_json(cudnnHandle_t handle, const ConvProblem& problem,
                                                  std::string_view json) override {
    if (json.substr(0, cudnn_detail::kUnfusedJsonPrefix.size()) ==
        cudnn_detail::kUnfusedJsonPrefix) {
      return cudnn_detail::unfused_plan_from_json(handle, problem, json);
    }
    CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<cudnn_detail::CudnnPlan> plan,
                              cudnn_detail::plan_from_json(handle, problem, json));
    return std::unique_ptr<Plan>(std::move(plan));
  }

  DeviceAllocator& default_allocator(cudnnHandle_t handle) override {
    StatusOr<int> device = device_of_handle(handle);
    if (!device.ok()) return cuda_allocator();
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<CudaDeviceAllocator>& a = allocators_[*device];
    if (a == nullptr) a = std::make_unique<CudaDeviceAllocator>(*device);
    return *a;
  }

  Status copy_to_device(cudnnHandle_t handle, void* dst, const void* src, size_t bytes) override {
    return copy(handle, dst, src, bytes, cudaMemcpyHostToDevice);
  }
  Status copy_to_host(cudnnHandle_t handle, void* dst, const void* src, size_t bytes) override {
    return copy(handle, dst, src, bytes, cudaMemcpyDeviceToHost);
  }

  Status fill(cudnnHandle_t handle, void* dst, uint8_t byte, size_t bytes) override {
    if (bytes == 0) return ok_status();
    CONVPLAN_ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(handle));
    CONVPLAN_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, stream));
    CONVPLAN_RETURN_IF_ERROR(cudnn_detail::synchronize_stream(stream));
    return ok_status();
  }

  // A kernel instead of host threads and an upload: a ResNet-50 layer's inputs at batch 256 took
  // up to 1.2 s to make on the host (issue 21).
  Status fill_hashed(cudnnHandle_t handle, void* dst, DataType type, int64_t elements,
                     uint64_t seed) override {
    if (elements <= 0) return ok_status();
    CONVPLAN_ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(handle));
    CONVPLAN_ASSIGN_OR_RETURN(int device, cudnn_detail::device_of_stream(stream));
    DeviceGuard guard(device);
    CONVPLAN_RETURN_IF_ERROR(guard.status());
    CONVPLAN_CUDA_CHECK(
        cudnn_detail::enqueue_fill_hashed(stream, dst, static_cast<int>(type), elements, seed));
    CONVPLAN_RETURN_IF_ERROR(cudnn_detail::synchronize_stream(stream));
    return ok_status();
  }

  // On the device, so that only the checked elements cross to the host: the whole output
  // (0.4 GB for a ResNet-50 layer at batch 256) once per candidate dominated tuning. Where the
  // offsets alone outweigh the span (every element checked), the host does it.
  StatusOr<int64_t> read_output(cudnnHandle_t handle, const void* src, const TensorShape& shape,
                                int64_t elem_bytes, bool scan_poison,
                                const std::vector<int64_t>& offsets, void* dst) override {
    if (offsets.size() * sizeof(int64_t) >=
        static_cast<size_t>(shape.span_elements() * elem_bytes)) {
      return Backend::read_output(handle, src, shape, elem_bytes, scan_poison, offsets, dst);
    }
    CONVPLAN_ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(handle));
    CONVPLAN_ASSIGN_OR_RETURN(int device, cudnn_detail::device_of_stream(stream));
    DeviceGuard guard(device);
    CONVPLAN_RETURN_IF_ERROR(guard.status());
    return cudnn_detail::read_output_on_device(stream, src, shape, elem_bytes, scan_poison, offsets,
                                               dst);
  }

  StatusOr<std::vector<float>> time(Plan& plan, const TensorPointers& tensors, void* workspace,
                                    int warmup, int runs, bool flush_l2, float cutoff_ms) override {
    const cudnnHandle_t handle = plan.handle();
    CONVPLAN_ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(handle));
    CONVPLAN_ASSIGN_OR_RETURN(int device, cudnn_detail::device_of_stream(stream));
    DeviceGuard guard(device);  // events belong to the stream's device
    CONVPLAN_RETURN_IF_ERROR(guard.status());
    FlushBuffer* flush = nullptr;
    if (flush_l2) {
      CONVPLAN_ASSIGN_OR_RETURN(flush, flush_buffer(handle, device));
    }
    CONVPLAN_ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::create());
    CONVPLAN_ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::create());
    // With a cutoff, the first warm-up run is timed too: a candidate whose warm-up alone is past
    // it goes no further (see event_ms).
    int untimed_from = 0;
    if (warmup > 0 && cutoff_ms > 0) {
      float host_ms = 0;
      CONVPLAN_ASSIGN_OR_RETURN(float ms,
                                event_ms(plan, tensors, workspace, stream, start, stop, &host_ms));
      const float bound = std::max(0.0f, ms - host_ms);
      if (bound > cutoff_ms) return std::vector<float>{bound};
      untimed_from = 1;
    }
    for (int i = untimed_from; i < warmup; ++i) {
      CONVPLAN_RETURN_IF_ERROR(plan.execute(handle, tensors, workspace));
    }
    std::vector<float> times;
    times.reserve(static_cast<size_t>(runs > 0 ? runs : 0));
    for (int i = 0; i < runs; ++i) {
      if (flush != nullptr) {
        CONVPLAN_CUDA_CHECK(
            cudaMemsetAsync(flush->buffer.get(), i & 0xff, flush->buffer.size(), stream));
      }
      CONVPLAN_ASSIGN_OR_RETURN(float ms, event_ms(plan, tensors, workspace, stream, start, stop));
      times.push_back(ms);
      if (cutoff_ms > 0 && ms > cutoff_ms) break;
    }
    return times;
  }

 private:
  struct FlushBuffer {
    DeviceBuffer buffer;
  };

  // One run of `plan` between two events on `stream`: the milliseconds between them, and, when
  // host_ms is given, the host's time spent recording them and launching the run. Less that host
  // time, the event time is a lower bound of the run's device time, as the GPU may have waited
  // for the launches meanwhile (a first run's module loading, say). time() stops at a warm-up run
  // whose bound is already past the cutoff: an exhaustive tune of ResNet-50 at batch 256 ran
  // engine 0 (85 ms a run) twice per layer, the warm-up and the first timed run, 3.9 s of its
  // 7.9 s of timing on an H100 (issue 21).
  static StatusOr<float> event_ms(Plan& plan, const TensorPointers& tensors, void* workspace,
                                  cudaStream_t stream, const CudaEvent& start,
                                  const CudaEvent& stop, float* host_ms = nullptr) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now();
    CONVPLAN_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    CONVPLAN_RETURN_IF_ERROR(plan.execute(plan.handle(), tensors, workspace));
    CONVPLAN_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    if (host_ms != nullptr) {
      *host_ms = std::chrono::duration<float, std::milli>(Clock::now() - t0).count();
    }
    CONVPLAN_RETURN_IF_ERROR(
        cudnn_detail::wait_for_event(stop, cudnn_detail::kDeviceDeadlineSeconds));
    float ms = 0;
    CONVPLAN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return ms;
  }

  // The candidates of the graph of `graph_problem` from `source`, each with config.unfused set
  // to `unfused`; notes are checked against the problem's types (those of both graphs alike).
  StatusOr<std::vector<Candidate>> list_candidates(cudnnHandle_t handle,
                                                   const ConvProblem& graph_problem,
                                                   CandidateSource source, bool unfused) {
    CONVPLAN_ASSIGN_OR_RETURN(cudnn_detail::ConvGraph graph,
                              cudnn_detail::build_conv_graph(handle, graph_problem));
    std::vector<Candidate> out;
    auto add = [&](EngineConfig config, NoteSet notes) {
      if (!cudnn_detail::check_notes_allowed(graph_problem, config.engine_id, notes).ok()) return;
      Candidate c;
      c.config = std::move(config);
      c.config.unfused = unfused;
      c.notes = notes;
      c.rank = static_cast<int>(out.size());
      out.push_back(std::move(c));
    };
    if (source == CandidateSource::kAllEngines) {
      CONVPLAN_ASSIGN_OR_RETURN(int64_t count, cudnn_detail::engine_global_count(graph.graph));
      for (int64_t id = 0; id < count; ++id) {
        StatusOr<BackendDescriptor> engine = cudnn_detail::make_engine(graph.graph, id);
        if (!engine.ok()) continue;  // this index does not support the problem
        CONVPLAN_ASSIGN_OR_RETURN(NoteSet notes, cudnn_detail::engine_notes(*engine));
        EngineConfig config;
        config.engine_id = id;
        add(std::move(config), notes);
      }
      return out;
    }
    CONVPLAN_ASSIGN_OR_RETURN(std::vector<cudnn_detail::HeuristicResult> results,
                              cudnn_detail::heuristic_configs(graph.graph, heur_mode(source)));
    for (cudnn_detail::HeuristicResult& r : results) add(std::move(r.config), r.notes);
    return out;
  }

  StatusOr<std::vector<KnobInfo>> engine_knobs(cudnnHandle_t handle, const ConvProblem& problem,
                                               int64_t engine_id) {
    CONVPLAN_ASSIGN_OR_RETURN(cudnn_detail::ConvGraph graph,
                              cudnn_detail::build_conv_graph(handle, problem));
    StatusOr<BackendDescriptor> engine = cudnn_detail::make_engine(graph.graph, engine_id);
    if (!engine.ok()) return engine.status().with_context("engine " + std::to_string(engine_id));
    return cudnn_detail::knob_infos(*engine);
  }

  Status copy(cudnnHandle_t handle, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return ok_status();
    CONVPLAN_ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(handle));
    CONVPLAN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    CONVPLAN_RETURN_IF_ERROR(cudnn_detail::synchronize_stream(stream));
    return ok_status();
  }

  // The device's L2-flush buffer (2x L2, at least 32 MiB), allocated on first use and kept.
  StatusOr<FlushBuffer*> flush_buffer(cudnnHandle_t handle, int device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = flush_.find(device);
      if (it != flush_.end()) return it->second.get();
    }
    CONVPLAN_ASSIGN_OR_RETURN(DeviceInfo info, device_of(handle));
    const size_t bytes = std::max<size_t>(2 * static_cast<size_t>(info.l2_bytes), size_t{32} << 20);
    CONVPLAN_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                              DeviceBuffer::allocate(default_allocator(handle), bytes));
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<FlushBuffer>& slot = flush_[device];
    if (slot == nullptr) slot = std::make_unique<FlushBuffer>(FlushBuffer{std::move(buffer)});
    return slot.get();  // a racing thread's extra buffer is freed on return
  }

  // The kernel caches of the handle's device; null when the option is off (or the device of the
  // handle cannot be told: the plan is then built without).
  cudnn_detail::KernelCaches* kernel_caches_for(cudnnHandle_t handle) {
    if (!kernel_cache_) return nullptr;
    StatusOr<int> device = device_of_handle(handle);
    if (!device.ok()) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<cudnn_detail::KernelCaches>& slot = kernel_caches_[*device];
    if (slot == nullptr) slot = std::make_unique<cudnn_detail::KernelCaches>();
    return slot.get();
  }

  const bool kernel_cache_;
  std::mutex mu_;
  std::map<int, std::unique_ptr<cudnn_detail::KernelCaches>> kernel_caches_;  // GUARDED_BY(mu_)
  std::map<int, DeviceInfo> devices_;                                         // GUARDED_BY(mu_)
  std::map<int, std::unique_ptr<CudaDeviceAllocator>> allocators_;            // GUARDED_BY(mu_)
  std::map<int, std::unique_ptr<FlushBuffer>> flush_;                         // GUARDED_BY(mu_)
};

}  // namespace

StatusOr<CudnnBackendOptions> CudnnBackendOptions::from_environment() {
  CudnnBackendOptions options;
  if (std::optional<std::string_view> v = env_value("CONVPLAN_KERNEL_CACHE")) {
    CONVPLAN_ASSIGN_OR_RETURN(options.kernel_cache, parse_bool_value("CONVPLAN_KERNEL_CACHE", *v));
  }
  return options;
}

std::shared_ptr<Backend> make_cudnn_backend() { return make_cudnn_backend(CudnnBackendOptions{}); }

std::shared_ptr<Backend> make_cudnn_backend(const CudnnBackendOptions& options) {
  return std::make_shared<CudnnBackend>(options);
}

StatusOr<std::vector<EngineReport>> inspect_engines(cudnnHandle_t handle,
                                                    const ConvProblem& problem) {
  if (handle == nullptr) return invalid_argument("handle is null");
  CONVPLAN_ASSIGN_OR_RETURN(cudnn_detail::ConvGraph graph,
                            cudnn_detail::build_conv_graph(handle, problem));
  CONVPLAN_ASSIGN_OR_RETURN(int64_t count, cudnn_detail::engine_global_count(graph.graph));
  std::vector<EngineReport> out;
  for (int64_t id = 0; id < count; ++id) {
    EngineReport r;
    r.engine_id = id;
    StatusOr<BackendDescriptor> engine = cudnn_detail::make_engine(graph.graph, id);
    if (!engine.ok()) {
      r.status = engine.status();
      out.push_back(std::move(r));
      continue;
    }
    StatusOr<NoteSet> notes = cudnn_detail::engine_notes(*engine);
    if (notes.ok()) r.notes = *notes;
    StatusOr<std::vector<KnobInfo>> knobs = cudnn_detail::knob_infos(*engine);
    if (knobs.ok()) r.knobs = std::move(knobs).value();
    EngineConfig config;
    config.engine_id = id;
    StatusOr<std::unique_ptr<cudnn_detail::CudnnPlan>> plan =
        cudnn_detail::build_plan(handle, problem, config);
    if (plan.ok()) {
      r.workspace_bytes = (*plan)->workspace_bytes();
    } else {
      r.status = plan.status();
    }
    if (r.status.ok() && !notes.ok()) r.status = notes.status();
    if (r.status.ok() && !knobs.ok()) r.status = knobs.status();
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace convplan
