// Host time per call of PlanCache::execute (a cache hit) against a hand-written
// cudnnBackendExecute with a ready plan and variant pack, on the same handle and stream, for a tiny
// problem (n1 c8 k8 8x8, 3x3, fp32, NCHW) whose kernel is short so that the host side shows.
// Also Plan::execute on the cache's pinned plan, to split the cache lookup from the plan wrapper.
//
// The raw path builds the same engine configuration (engine index and knobs) that the cache
// chose, straight through cuDNN's backend API, so both run the same kernel. Each benchmark runs
// calls in batches of 1000 and synchronizes the stream after each batch, inside the timed region:
// the time per call is host time, as long as the kernel is shorter than it (the kernel's own time
// is printed to tell).
//
//   host_overhead [--benchmark_out=FILE --benchmark_out_format=json] [Google Benchmark flags]
//
// Prints the ratios at the end and adds them to the JSON file. Exits 0 with a message when there
// is no GPU. A benchmark: it asserts nothing.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "convplan/plan_cache.h"
#include "convplan/problem.h"
#include "convplan/reference.h"

namespace {

using convplan::Status;

constexpr int kBatch = 1000;  // calls between stream synchronizations

std::string cudnn_error(cudnnStatus_t s, const char* what) {
  char message[512] = "";
  cudnnGetLastErrorString(message, sizeof(message));
  return std::string(what) + ": " + cudnnGetErrorString(s) +
         (message[0] ? std::string(" (") + message + ")" : "");
}

// One cuDNN backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    status_ = cudnnBackendCreateDescriptor(type, &desc_);
  }
  ~Descriptor() {
    if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return desc_; }
  cudnnStatus_t status() const { return status_; }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
};

#define RAW_CHECK(expr)                                                                  \
  do {                                                                                   \
    const cudnnStatus_t raw_status_ = (expr);                                            \
    if (raw_status_ != CUDNN_STATUS_SUCCESS) {                                           \
      return Status(convplan::StatusCode::kCudnnError, cudnn_error(raw_status_, #expr)); \
    }                                                                                    \
  } while (0)

// The forward convolution of `p` (NCHW fp32, 2-D) as a finalized execution plan for `config`, and
// its variant pack over fixed device pointers: everything built once, executed many times.
class RawPlan {
 public:
  Status build(cudnnHandle_t handle, const convplan::ConvProblem& p,
               const convplan::EngineConfig& config, const convplan::TensorPointers& t) {
    const cudnnDataType_t type = CUDNN_DATA_FLOAT;
    const int64_t alignment = 16;
    int64_t uid = 0;
    for (auto [desc, shape] : {std::pair{x_.get(), p.x_shape()}, std::pair{w_.get(), p.w_shape()},
                               std::pair{y_.get(), p.y_shape()}}) {
      RAW_CHECK(cudnnBackendSetAttribute(desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
                                         &type));
      RAW_CHECK(cudnnBackendSetAttribute(desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64,
                                         shape.rank, shape.dims.data()));
      RAW_CHECK(cudnnBackendSetAttribute(desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64,
                                         shape.rank, shape.strides.data()));
      ++uid;
      RAW_CHECK(
          cudnnBackendSetAttribute(desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
      RAW_CHECK(cudnnBackendSetAttribute(desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64,
                                         1, &alignment));
      RAW_CHECK(cudnnBackendFinalize(desc));
    }
    const int64_t dims = p.spatial_dims;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    RAW_CHECK(cudnnBackendSetAttribute(conv_.get(), CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
                                       CUDNN_TYPE_DATA_TYPE, 1, &compute));
    RAW_CHECK(cudnnBackendSetAttribute(conv_.get(), CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                       CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    RAW_CHECK(cudnnBackendSetAttribute(conv_.get(), CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
                                       CUDNN_TYPE_INT64, 1, &dims));
    RAW_CHECK(cudnnBackendSetAttribute(conv_.get(), CUDNN_ATTR_CONVOLUTION_DILATIONS,
                                       CUDNN_TYPE_INT64, dims, p.dilation.data()));
    RAW_CHECK(cudnnBackendSetAttribute(conv_.get(), CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
                                       CUDNN_TYPE_INT64, dims, p.stride.data()));
    RAW_CHECK(cudnnBackendSetAttribute(conv_.get(), CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
                                       CUDNN_TYPE_INT64, dims, p.pad_before.data()));
    RAW_CHECK(cudnnBackendSetAttribute(conv_.get(), CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
                                       CUDNN_TYPE_INT64, dims, p.pad_after.data()));
    RAW_CHECK(cudnnBackendFinalize(conv_.get()));

    cudnnBackendDescriptor_t x = x_.get(), w = w_.get(), y = y_.get(), conv = conv_.get();
    const float alpha = 1.0f, beta = 0.0f;
    RAW_CHECK(cudnnBackendSetAttribute(op_.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    RAW_CHECK(cudnnBackendSetAttribute(op_.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    RAW_CHECK(cudnnBackendSetAttribute(op_.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    RAW_CHECK(cudnnBackendSetAttribute(op_.get(),
                                       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    RAW_CHECK(cudnnBackendSetAttribute(op_.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                       CUDNN_TYPE_FLOAT, 1, &alpha));
    RAW_CHECK(cudnnBackendSetAttribute(op_.get(), CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                       CUDNN_TYPE_FLOAT, 1, &beta));
    RAW_CHECK(cudnnBackendFinalize(op_.get()));

    cudnnBackendDescriptor_t op = op_.get();
    RAW_CHECK(cudnnBackendSetAttribute(graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                                       CUDNN_TYPE_HANDLE, 1, &handle));
    RAW_CHECK(cudnnBackendSetAttribute(graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    RAW_CHECK(cudnnBackendFinalize(graph_.get()));

    cudnnBackendDescriptor_t graph = graph_.get();
    const int64_t engine_id = config.engine_id;
    RAW_CHECK(cudnnBackendSetAttribute(engine_.get(), CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    RAW_CHECK(cudnnBackendSetAttribute(engine_.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                       CUDNN_TYPE_INT64, 1, &engine_id));
    RAW_CHECK(cudnnBackendFinalize(engine_.get()));

    std::vector<cudnnBackendDescriptor_t> choices;
    for (const convplan::KnobChoice& k : config.knobs) {
      knobs_.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
      Descriptor& d = *knobs_.back();
      RAW_CHECK(d.status());
      const auto type = static_cast<cudnnBackendKnobType_t>(k.type);
      RAW_CHECK(cudnnBackendSetAttribute(d.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                         CUDNN_TYPE_KNOB_TYPE, 1, &type));
      RAW_CHECK(cudnnBackendSetAttribute(d.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                         CUDNN_TYPE_INT64, 1, &k.value));
      RAW_CHECK(cudnnBackendFinalize(d.get()));
      choices.push_back(d.get());
    }
    cudnnBackendDescriptor_t engine = engine_.get();
    RAW_CHECK(cudnnBackendSetAttribute(config_.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine));
    if (!choices.empty()) {
      RAW_CHECK(cudnnBackendSetAttribute(config_.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                         static_cast<int64_t>(choices.size()), choices.data()));
    }
    RAW_CHECK(cudnnBackendFinalize(config_.get()));

    cudnnBackendDescriptor_t cfg = config_.get();
    RAW_CHECK(cudnnBackendSetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                       CUDNN_TYPE_HANDLE, 1, &handle));
    RAW_CHECK(cudnnBackendSetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    RAW_CHECK(cudnnBackendFinalize(plan_.get()));
    int64_t count = 0;
    RAW_CHECK(cudnnBackendGetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, &count, &workspace_bytes_));
    if (workspace_bytes_ > 0 &&
        cudaMalloc(&workspace_, static_cast<size_t>(workspace_bytes_)) != cudaSuccess) {
      return convplan::out_of_memory("raw plan workspace");
    }

    const int64_t uids[3] = {1, 2, 3};
    void* pointers[3] = {t.x, t.w, t.y};
    RAW_CHECK(cudnnBackendSetAttribute(pack_.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                       CUDNN_TYPE_INT64, 3, uids));
    RAW_CHECK(cudnnBackendSetAttribute(pack_.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                       CUDNN_TYPE_VOID_PTR, 3, pointers));
    RAW_CHECK(cudnnBackendSetAttribute(pack_.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                       CUDNN_TYPE_VOID_PTR, 1, &workspace_));
    RAW_CHECK(cudnnBackendFinalize(pack_.get()));
    handle_ = handle;
    return convplan::ok_status();
  }

  ~RawPlan() {
    if (workspace_ != nullptr) cudaFree(workspace_);
  }

  cudnnStatus_t execute() const { return cudnnBackendExecute(handle_, plan_.get(), pack_.get()); }

 private:
  Descriptor x_{CUDNN_BACKEND_TENSOR_DESCRIPTOR}, w_{CUDNN_BACKEND_TENSOR_DESCRIPTOR},
      y_{CUDNN_BACKEND_TENSOR_DESCRIPTOR};
  Descriptor conv_{CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR};
  Descriptor op_{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR};
  Descriptor graph_{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
  Descriptor engine_{CUDNN_BACKEND_ENGINE_DESCRIPTOR};
  std::vector<std::unique_ptr<Descriptor>> knobs_;
  Descriptor config_{CUDNN_BACKEND_ENGINECFG_DESCRIPTOR};
  Descriptor plan_{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  Descriptor pack_{CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR};
  cudnnHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
};

// What the three benchmarks share: one context, the cache with the plan tuned, the raw plan.
struct Setup {
  std::optional<convplan::CudnnContext> context;
  std::shared_ptr<convplan::Backend> backend;
  std::unique_ptr<convplan::PlanCache> cache;
  convplan::PlanRef pinned;
  convplan::ConvProblem problem;
  convplan::DeviceBuffer x, w, y, workspace;
  convplan::TensorPointers tensors;
  RawPlan raw;
  std::string engine;
  std::string device;
  double kernel_us = -1;

  Status init() {
    CONVPLAN_ASSIGN_OR_RETURN(problem,
                              convplan::parse_problem("dt:f32/mb1ic8ih8iw8oc8kh3kw3ph1pw1"));
    CONVPLAN_ASSIGN_OR_RETURN(convplan::CudnnContext ctx, convplan::CudnnContext::create(0));
    context.emplace(std::move(ctx));
    cudaSetDevice(0);
    backend = convplan::make_cudnn_backend();
    CONVPLAN_ASSIGN_OR_RETURN(convplan::DeviceInfo info, backend->device_of(handle()));
    device = info.name;
    convplan::PlanCacheOptions options;
    options.backend = backend;  // no database: the first call tunes, in this process
    CONVPLAN_ASSIGN_OR_RETURN(cache, convplan::PlanCache::create(std::move(options)));
    convplan::DeviceAllocator& a = backend->default_allocator(handle());
    const size_t f = sizeof(float);
    CONVPLAN_ASSIGN_OR_RETURN(
        x, convplan::DeviceBuffer::allocate(a, problem.x_shape().span_elements() * f));
    CONVPLAN_ASSIGN_OR_RETURN(
        w, convplan::DeviceBuffer::allocate(a, problem.w_shape().span_elements() * f));
    CONVPLAN_ASSIGN_OR_RETURN(
        y, convplan::DeviceBuffer::allocate(a, problem.y_shape().span_elements() * f));
    for (convplan::DeviceBuffer* b : {&x, &w}) {
      std::vector<double> v(b->size() / f);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7919) % 17) / 8.0 - 1.0;
      std::vector<float> host(v.size());
      convplan::to_data_type(convplan::DataType::kFloat, v.data(), host.data(),
                             static_cast<int64_t>(v.size()));
      CONVPLAN_RETURN_IF_ERROR(backend->copy_to_device(handle(), b->get(), host.data(), b->size()));
    }
    tensors = {x.get(), w.get(), y.get()};
    CONVPLAN_RETURN_IF_ERROR(cache->execute(handle(), problem, tensors));  // tunes
    CONVPLAN_ASSIGN_OR_RETURN(pinned, cache->acquire(handle(), problem));
    engine = pinned->config().to_string();
    CONVPLAN_ASSIGN_OR_RETURN(workspace, convplan::DeviceBuffer::allocate(
                                             a, static_cast<size_t>(pinned->workspace_bytes())));
    CONVPLAN_ASSIGN_OR_RETURN(
        std::vector<float> times,
        backend->time(pinned.plan(), tensors, workspace.get(), 10, 50, false, 0));
    std::sort(times.begin(), times.end());
    kernel_us = 1000.0 * times[times.size() / 2];
    CONVPLAN_RETURN_IF_ERROR(raw.build(handle(), problem, pinned->config(), tensors)
                                 .with_context("the raw backend-API plan for " + engine));
    return convplan::ok_status();
  }
  cudnnHandle_t handle() const { return context->handle(); }
  cudaStream_t stream() const { return context->stream(); }
};

Setup* g_setup = nullptr;

template <typename Call>
void run_batches(benchmark::State& state, Call call) {
  while (state.KeepRunningBatch(kBatch)) {
    for (int i = 0; i < kBatch; ++i) {
      if (!call()) {
        state.SkipWithError("execution failed");
        return;
      }
    }
    cudaStreamSynchronize(g_setup->stream());
  }
  state.counters["kernel_us"] = g_setup->kernel_us;
}

void BM_RawBackendExecute(benchmark::State& state) {
  run_batches(state, [] { return g_setup->raw.execute() == CUDNN_STATUS_SUCCESS; });
}

void BM_PlanExecute(benchmark::State& state) {
  convplan::Plan& plan = g_setup->pinned.plan();
  run_batches(state, [&] {
    return plan.execute(g_setup->handle(), g_setup->tensors, g_setup->workspace.get()).ok();
  });
}

void BM_PlanCacheExecute(benchmark::State& state) {
  run_batches(state, [] {
    return g_setup->cache->execute(g_setup->handle(), g_setup->problem, g_setup->tensors).ok();
  });
}

BENCHMARK(BM_RawBackendExecute)->UseRealTime();
BENCHMARK(BM_PlanExecute)->UseRealTime();
BENCHMARK(BM_PlanCacheExecute)->UseRealTime();

// The console output, keeping each benchmark's time per call for the ratios.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (!r.error_occurred && r.run_type == Run::RT_Iteration && r.iterations > 0) {
        ns_per_call[r.benchmark_name()] =
            r.GetAdjustedRealTime() * (r.time_unit == benchmark::kNanosecond    ? 1.0
                                       : r.time_unit == benchmark::kMicrosecond ? 1e3
                                       : r.time_unit == benchmark::kMillisecond ? 1e6
                                                                                : 1e9);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> ns_per_call;
};

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--benchmark_out=", 0) == 0) out_path = a.substr(16);
  }
  const Status gpu = convplan::gpu_available();
  if (!gpu.ok()) {
    std::cout << "host_overhead: skipped: no usable GPU: " << gpu.message() << "\n";
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  Setup setup;
  if (Status s = setup.init(); !s.ok()) {
    std::cerr << "host_overhead: " << s.to_string() << "\n";
    return 1;
  }
  g_setup = &setup;
  benchmark::AddCustomContext("problem", setup.problem.to_string());
  benchmark::AddCustomContext("engine", setup.engine);
  benchmark::AddCustomContext("gpu", setup.device);
  benchmark::AddCustomContext("calls_per_sync", std::to_string(kBatch));
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  const auto& t = reporter.ns_per_call;
  auto get = [&](const char* name) {
    auto it = t.find(std::string(name) + "/real_time");  // UseRealTime() adds the suffix
    return it == t.end() ? -1.0 : it->second;
  };
  const double raw = get("BM_RawBackendExecute"), plan = get("BM_PlanExecute"),
               cache = get("BM_PlanCacheExecute");
  std::printf(
      "\n%s on %s, engine %s: %.2f us per run between CUDA events (an upper bound of the\n"
      "kernel's time; a time per call below it means the calls were host-bound anyway)\n",
      setup.problem.to_string().c_str(), setup.device.c_str(), setup.engine.c_str(),
      setup.kernel_us);
  std::printf("  raw cudnnBackendExecute   %8.2f us/call\n", raw / 1e3);
  std::printf("  Plan::execute             %8.2f us/call  (%.3fx raw)\n", plan / 1e3, plan / raw);
  std::printf("  PlanCache::execute (hit)  %8.2f us/call  (%.3fx raw)\n", cache / 1e3, cache / raw);
  setup.pinned = convplan::PlanRef();
  g_setup = nullptr;

  if (!out_path.empty() && raw > 0) {
    std::ifstream in(out_path);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    in.close();
    if (!j.is_discarded() && j.is_object()) {
      j["ratios"] = {{"plan_execute_over_raw", plan / raw},
                     {"plan_cache_execute_over_raw", cache / raw},
                     {"raw_ns_per_call", raw},
                     {"plan_ns_per_call", plan},
                     {"cache_ns_per_call", cache},
                     {"kernel_us", setup.kernel_us}};
      std::ofstream(out_path) << j.dump(2) << "\n";
    }
  }
  return 0;
}
