#include "gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>

#include "commands.h"
#include "convplan/reference.h"
#include "convplan/rewrite.h"
#include "convplan/tuner.h"
#include "convplan/tuning_record.h"

namespace convplan::cli {
namespace {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  (void)cudaGetLastError();
  return Status(StatusCode::kCudaError, std::string(what) + " failed: " + cudaGetErrorName(e) +
                                            ": " + cudaGetErrorString(e));
}
#define CLI_CUDA(expr) CONVPLAN_RETURN_IF_ERROR(cuda_status((expr), #expr))

// A timing event of the current device. Move-less; lives in one scope.
class Event {
 public:
  Event() : status_(cuda_status(cudaEventCreate(&event_), "cudaEventCreate")) {}
  ~Event() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  const Status& status() const { return status_; }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  Status status_;
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The buffer of the tensor a direction writes, and of the others.
const DeviceBuffer& output_buffer(const ConvProblem& p, const DeviceTensors& t) {
  switch (p.output_tensor()) {
    case TensorRole::kX: return t.x;
    case TensorRole::kW: return t.w;
    default: return t.y;
  }
}

}  // namespace

Session::Session(CudnnContext context, std::shared_ptr<Backend> backend)
    : context_(std::move(context)), backend_(std::move(backend)) {}

Session::~Session() {
  cache_.reset();  // plans before the handle they were built on
}

StatusOr<std::unique_ptr<Session>> Session::open(const SessionOptions& options) {
  CONVPLAN_RETURN_IF_ERROR(gpu_available());
  CONVPLAN_ASSIGN_OR_RETURN(CudnnContext context, CudnnContext::create(options.gpu));
  // The runtime calls made here directly (events, copies) go to the session's device.
  CLI_CUDA(cudaSetDevice(options.gpu));
  CONVPLAN_ASSIGN_OR_RETURN(CudnnBackendOptions backend_options,
                            CudnnBackendOptions::from_environment());
  std::unique_ptr<Session> s(
      new Session(std::move(context), with_rewrites(make_cudnn_backend(backend_options))));
  CONVPLAN_ASSIGN_OR_RETURN(s->device_, s->backend_->device_of(s->handle()));
  CONVPLAN_ASSIGN_OR_RETURN(s->policy_, TunePolicy::from_environment());
  if (options.mode) s->policy_.mode = *options.mode;
  if (options.verbose > 0) s->policy_.verbose = options.verbose;
  if (options.db_path != "off" && options.db_path != ":memory:" && !options.db_path.empty()) {
    StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(options.db_path);
    if (db.ok()) {
      s->db_ = std::move(db).value();
      s->db_path_ = options.db_path;
      const DbOpenReport& r = s->db_->report();
      if (!r.moved_aside.empty()) {
        warn("the tuning database was damaged (" + r.reason + "); moved aside to " + r.moved_aside);
      }
    } else {
      warn("tuning database '" + options.db_path + "' not used: " + db.status().to_string());
    }
  }
  PlanCacheOptions cache_options;
  cache_options.backend = s->backend_;
  cache_options.policy = s->policy_;
  cache_options.database = s->db_;
  // The tuner skips some runtime compilation near the roofline floor; the floor comes from the
  // rates this session measured (before any tune) or else those kept in the database (never
  // measured during a tune). The cache, and with it the tuner, is destroyed before db_.
  cache_options.tuner.roofline_floor_ms =
      roofline_floor_source(s->rates_, s->db_.get(), s->device_.model_key());
  CONVPLAN_ASSIGN_OR_RETURN(s->cache_, PlanCache::create(std::move(cache_options)));
  return s;
}

TensorBytes TensorBytes::of(const ConvProblem& p) {
  const auto size = static_cast<size_t>(size_of(p.data_type));
  const bool bias = p.post_ops.has(PostOpKind::kBias), add = p.post_ops.has(PostOpKind::kAdd);
  return {static_cast<size_t>(p.x_shape().span_elements()) * size,
          static_cast<size_t>(p.w_shape().span_elements()) * size,
          static_cast<size_t>(p.y_shape().span_elements()) * size,
          bias ? static_cast<size_t>(p.bias_shape().span_elements()) * size : 0,
          add ? static_cast<size_t>(p.residual_shape().span_elements()) * size : 0};
}

void TensorBytes::grow_to(const TensorBytes& o) {
  x = std::max(x, o.x);
  w = std::max(w, o.w);
  y = std::max(y, o.y);
  bias = std::max(bias, o.bias);
  residual = std::max(residual, o.residual);
}

StatusOr<DeviceTensors> allocate_tensors(Session& session, const TensorBytes& bytes) {
  DeviceTensors t;
  DeviceAllocator& a = session.allocator();
  CONVPLAN_ASSIGN_OR_RETURN(t.x, DeviceBuffer::allocate(a, bytes.x));
  CONVPLAN_ASSIGN_OR_RETURN(t.w, DeviceBuffer::allocate(a, bytes.w));
  CONVPLAN_ASSIGN_OR_RETURN(t.y, DeviceBuffer::allocate(a, bytes.y));
  CONVPLAN_ASSIGN_OR_RETURN(t.bias, DeviceBuffer::allocate(a, bytes.bias));
  CONVPLAN_ASSIGN_OR_RETURN(t.residual, DeviceBuffer::allocate(a, bytes.residual));
  return t;
}

Status fill_random(Session& session, DeviceTensors& tensors, DataType t, uint64_t seed) {
  const size_t elem = static_cast<size_t>(size_of(t));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (DeviceBuffer* b : {&tensors.x, &tensors.w, &tensors.y, &tensors.bias, &tensors.residual}) {
    const size_t elements = b->size() / elem;
    if (elements == 0) continue;
    const size_t block = std::min<size_t>(elements, size_t{1} << 20);
    std::vector<double> values(block);
    for (double& v : values) v = uniform(rng);
    std::vector<uint8_t> raw(block * elem);
    to_data_type(t, values.data(), raw.data(), static_cast<int64_t>(block));
    for (size_t done = 0; done < elements; done += block) {
      const size_t n = std::min(block, elements - done);
      CONVPLAN_RETURN_IF_ERROR(session.backend().copy_to_device(
          session.handle(), static_cast<uint8_t*>(b->get()) + done * elem, raw.data(), n * elem));
    }
  }
  return ok_status();
}

namespace {

// Backend::time of `plan` on workspace of its own (allocated for the timing, freed after).
StatusOr<std::vector<float>> time_plan(Session& session, Plan& plan, const TensorPointers& pointers,
                                       const MeasureOptions& options) {
  CONVPLAN_ASSIGN_OR_RETURN(
      DeviceBuffer workspace,
      DeviceBuffer::allocate(session.allocator(), static_cast<size_t>(plan.workspace_bytes())));
  return session.backend().time(plan, pointers, workspace.get(), options.warmup, options.iters,
                                options.flush_l2, /*cutoff_ms=*/0);
}

}  // namespace

StatusOr<Measurement> tune_and_time(Session& session, const ConvProblem& problem,
                                    const DeviceTensors& tensors, const MeasureOptions& options) {
  Measurement m;
  const auto start = std::chrono::steady_clock::now();
  AcquireOutcome outcome = AcquireOutcome::kHit;
  CONVPLAN_ASSIGN_OR_RETURN(PlanRef plan,
                            session.cache().acquire(session.handle(), problem, &outcome));
  m.tuning_ms = ms_since(start);
  m.source = outcome == AcquireOutcome::kTuned         ? "tuned"
             : outcome == AcquireOutcome::kDatabaseHit ? "database"
             : outcome == AcquireOutcome::kProvisional ? "provisional"
                                                       : "memory";
  m.config = plan->config();
  m.notes = plan->notes();
  m.workspace_bytes = plan->workspace_bytes();
  const TensorPointers pointers = tensors.pointers();
  // The public call path once (it sets up the handle's workspace arena), then the plan itself.
  CONVPLAN_RETURN_IF_ERROR(session.cache().execute(session.handle(), problem, pointers));
  // One byte of the output read back waits for that first convolution to finish.
  uint8_t first_byte = 0;
  CONVPLAN_RETURN_IF_ERROR(session.backend().copy_to_host(
      session.handle(), &first_byte, output_buffer(problem, tensors).get(), 1));
  m.first_result_ms = ms_since(start);
  CONVPLAN_ASSIGN_OR_RETURN(m.times_ms, time_plan(session, plan.plan(), pointers, options));
  m.time = summarize(m.times_ms);
  return m;
}

StatusOr<Verification> verify(Session& session, const ConvProblem& problem) {
  // The plan the cache serves this handle, checked by the tuner's own check (issue 15: one set
  // of rules; issue 21: sampled on the device, seconds instead of minutes on large problems).
  CONVPLAN_ASSIGN_OR_RETURN(PlanRef ref, session.cache().acquire(session.handle(), problem));
  const auto start = std::chrono::steady_clock::now();
  Tuner tuner(session.shared_backend());
  CONVPLAN_ASSIGN_OR_RETURN(
      OutputCheck c, tuner.check(session.handle(), problem, ref.plan(), &session.allocator()));
  Verification v;
  v.relative_error = c.relative_error;
  v.tolerance = c.tolerance;
  v.elements_checked = c.elements_checked;
  v.full = c.full;
  v.passed = c.passed;
  v.failure = c.failure;
  v.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return v;
}

StatusOr<double> measure_copy_gbps(Session& session) {
  constexpr size_t kBytes = size_t{256} << 20;
  CONVPLAN_ASSIGN_OR_RETURN(DeviceBuffer src, DeviceBuffer::allocate(session.allocator(), kBytes));
  CONVPLAN_ASSIGN_OR_RETURN(DeviceBuffer dst, DeviceBuffer::allocate(session.allocator(), kBytes));
  CONVPLAN_RETURN_IF_ERROR(session.backend().fill(session.handle(), src.get(), 0x3c, kBytes));
  Event start, stop;
  CONVPLAN_RETURN_IF_ERROR(start.status());
  CONVPLAN_RETURN_IF_ERROR(stop.status());
  float best = 0;
  for (int i = 0; i < 12; ++i) {
    CLI_CUDA(cudaEventRecord(start.get(), session.stream()));
    CLI_CUDA(
        cudaMemcpyAsync(dst.get(), src.get(), kBytes, cudaMemcpyDeviceToDevice, session.stream()));
    CLI_CUDA(cudaEventRecord(stop.get(), session.stream()));
    CLI_CUDA(cudaEventSynchronize(stop.get()));
    float ms = 0;
    CLI_CUDA(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    if (i >= 2 && (best == 0 || ms < best)) best = ms;  // the first two warm up
  }
  if (best <= 0) return internal_error("the copy took no measurable time");
  return 2.0 * static_cast<double>(kBytes) / (static_cast<double>(best) * 1e6);
}

StatusOr<std::pair<double, std::string>> measure_matrix_tflops(Session& session, DataType data_type,
                                                               bool allow_tensor_cores) {
  ConvProblem p = ConvProblem::with_data_type(ConvProblem{}, data_type);
  p.n = 8;
  p.c = 8192;
  p.k = 8192;
  p.input = {32, 32, 1};
  p.filter = {1, 1, 1};
  p.layout = Layout::kChannelsLast;
  p.allow_tensor_cores = allow_tensor_cores;
  CONVPLAN_RETURN_IF_ERROR(p.validate());
  CONVPLAN_ASSIGN_OR_RETURN(DeviceTensors t, allocate_tensors(session, TensorBytes::of(p)));
  CONVPLAN_RETURN_IF_ERROR(fill_random(session, t, data_type, 7));
  // The probe gives a rate, it is not a user's problem: tuned in limited mode whatever the
  // session's mode (exhaustive mode's tune of it took most of a 4.8 s set-up with the database
  // off, issue 21), and neither cached nor kept as a tuning record.
  TunePolicy policy = session.policy();
  policy.mode = TuneMode::kLimited;
  Tuner tuner(session.shared_backend());
  CONVPLAN_ASSIGN_OR_RETURN(TuningRecord record,
                            tuner.tune(session.handle(), p, policy, &session.allocator()));
  // The tuner's own plan in JSON where it kept one (runtime-compiled: not compiled again).
  CONVPLAN_ASSIGN_OR_RETURN(
      std::unique_ptr<Plan> plan,
      record.plan_json.empty()
          ? session.backend().build(session.handle(), p, record.config)
          : session.backend().build_from_json(session.handle(), p, record.plan_json));
  MeasureOptions options;
  options.warmup = 3;
  options.iters = 10;
  CONVPLAN_ASSIGN_OR_RETURN(std::vector<float> times,
                            time_plan(session, *plan, t.pointers(), options));
  const double best = summarize(times).min_ms;
  if (best <= 0) return internal_error("the matrix-rate convolution took no measurable time");
  return std::make_pair(p.flops() / (best * 1e9), p.to_string());
}

namespace {

// A rate from the tuning database (measured before on this device model), or measured now and
// kept there: measuring took most of a cold start's set-up (issue 21: up to 3.65 s).
StatusOr<std::pair<double, std::string>> kept_rate(
    Session& session, const std::string& name,
    const std::function<StatusOr<std::pair<double, std::string>>()>& measure) {
  TuningDatabase* db = session.database();
  const std::string model = session.device().model_key();
  if (db != nullptr) {
    StatusOr<DeviceRate> kept = db->find_device_rate(model, name);
    if (kept.ok()) return std::make_pair(kept->value, kept->source + " (kept in the database)");
    if (kept.status().code() != StatusCode::kNotFound &&
        kept.status().code() != StatusCode::kNotSupported) {
      std::cerr << "convplan: warning: " << kept.status().to_string() << "; measuring again\n";
    }
  }
  CONVPLAN_ASSIGN_OR_RETURN(auto measured, measure());
  if (db != nullptr) {
    Status s = db->put_device_rate(DeviceRate{model, name, measured.first, measured.second,
                                              static_cast<int64_t>(std::time(nullptr))});
    if (!s.ok() && s.code() != StatusCode::kNotSupported) {
      std::cerr << "convplan: warning: the measured " << name << " was not kept: " << s.to_string()
                << "\n";
    }
  }
  return measured;
}

}  // namespace

StatusOr<Rates> RateSource::rates_for(Session& session, const ConvProblem& problem) {
  Rates r;
  if (peak_gbps_) {
    r.copy_gbps = *peak_gbps_;
    r.copy_source = "--peak-gbps";
  } else {
    if (!copy_) {
      CONVPLAN_ASSIGN_OR_RETURN(
          copy_, kept_rate(session, "copy_gbps", [&]() -> StatusOr<std::pair<double, std::string>> {
            CONVPLAN_ASSIGN_OR_RETURN(double gbps, measure_copy_gbps(session));
            return std::make_pair(gbps, std::string("measured: 256 MiB device-to-device "
                                                    "cudaMemcpyAsync, best of 10"));
          }));
    }
    r.copy_gbps = copy_->first;
    r.copy_source = copy_->second;
  }
  if (peak_tflops_) {
    r.matrix_tflops = *peak_tflops_;
    r.matrix_source = "--peak-tflops";
  } else {
    const std::pair<DataType, bool> key{problem.data_type, problem.allow_tensor_cores};
    auto it = matrix_.find(key);
    if (it == matrix_.end()) {
      const std::string name = matrix_rate_name(key.first, key.second);
      CONVPLAN_ASSIGN_OR_RETURN(
          auto rate, kept_rate(session, name, [&]() -> StatusOr<std::pair<double, std::string>> {
            CONVPLAN_ASSIGN_OR_RETURN(auto measured,
                                      measure_matrix_tflops(session, key.first, key.second));
            return std::make_pair(measured.first,
                                  "measured: " + measured.second + " through convplan, best of 10");
          }));
      it = matrix_.emplace(key, rate).first;
    }
    r.matrix_tflops = it->second.first;
    r.matrix_source = it->second.second;
  }
  session.remember_rate("copy_gbps", r.copy_gbps);
  session.remember_rate(matrix_rate_name(problem.data_type, problem.allow_tensor_cores),
                        r.matrix_tflops);
  return r;
}

std::string cuda_version_text(int v) {
  if (v <= 0) return "";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cudnn_version_text(int64_t v) {
  if (v <= 0) return "";
  // cuDNN 9: major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
         std::to_string(v % 100);
}

std::string nvidia_driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed ..."
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    if (!word.empty() && std::isdigit(static_cast<unsigned char>(word[0])) &&
        word.find('.') != std::string::npos) {
      return word;
    }
  }
  return "";
}

int driver_cuda_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
}

Environment environment(const Session& session) {
  Environment e;
  e.device = session.device();
  e.driver_version = nvidia_driver_version();
  e.driver_cuda_version = driver_cuda_version();
  e.cuda_runtime_version = cuda_runtime_version();
  e.cudnn_version = cudnn_runtime_version();
  e.convplan_version = convplan_version();
  return e;
}

nlohmann::json environment_json(const Environment& e) {
  nlohmann::json j;
  j["gpu"] = {{"name", e.device.name},
              {"uuid", e.device.uuid},
              {"ordinal", e.device.ordinal},
              {"compute_capability",
               std::to_string(e.device.cc_major) + "." + std::to_string(e.device.cc_minor)},
              {"sm_count", e.device.sm_count},
              {"l2_bytes", e.device.l2_bytes},
              {"memory_bytes", e.device.memory_bytes},
              {"model_key", e.device.model_key()}};
  j["driver_version"] = e.driver_version;
  j["driver_cuda_version"] = cuda_version_text(e.driver_cuda_version);
  j["cuda_runtime_version"] = cuda_version_text(e.cuda_runtime_version);
  j["cudnn_version"] = cudnn_version_text(e.cudnn_version);
  j["convplan_version"] = e.convplan_version;
  return j;
}

}  // namespace convplan::cli
