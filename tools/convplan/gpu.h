// The GPU side of the commands: a session (a cuDNN context, the cuDNN backend, the tuning
// database and a plan cache over them), device tensors with random contents, tuning and timing
// one problem, checking it against the float64 reference, and measuring the machine's rates.
//
// Everything goes through the public API, except the CUDA runtime calls for the copy-bandwidth
// measurement, the driver version and the current device. One Session is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convplan/backend.h"
#include "convplan/cudnn_backend.h"
#include "convplan/plan_cache.h"
#include "convplan/problem.h"
#include "convplan/status.h"
#include "convplan/tune_policy.h"
#include "convplan/tuning_db.h"
#include "known_rates.h"
#include "report.h"

namespace convplan::cli {

struct SessionOptions {
  int gpu = 0;
  std::string db_path;           // "off" or ":memory:": no persistence
  std::optional<TuneMode> mode;  // over CONVPLAN_TUNE
  int verbose = 0;               // over CONVPLAN_VERBOSE when > 0
};

class Session {
 public:
  // REQUIRES: gpu_available().ok() (else its kNoDevice). Reads TunePolicy::from_environment().
  static StatusOr<std::unique_ptr<Session>> open(const SessionOptions& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  cudnnHandle_t handle() const { return context_.handle(); }
  cudaStream_t stream() const { return context_.stream(); }
  Backend& backend() { return *backend_; }
  const std::shared_ptr<Backend>& shared_backend() const { return backend_; }
  PlanCache& cache() { return *cache_; }
  const TunePolicy& policy() const { return policy_; }
  const DeviceInfo& device() const { return device_; }
  DeviceAllocator& allocator() { return backend_->default_allocator(handle()); }
  // Where the tuning database is ("" when off) and what opening it reported.
  const std::string& db_path() const { return db_path_; }
  const DbOpenReport* db_report() const { return db_ ? &db_->report() : nullptr; }
  TuningDatabase* database() { return db_.get(); }  // null when off
  // A rate of the machine this session measured or was given. The tuner's roofline floor reads
  // these before the database's, so that it has one with the database off.
  void remember_rate(const std::string& name, double value) { rates_->put(name, value); }

 private:
  Session(CudnnContext context, std::shared_ptr<Backend> backend);
  CudnnContext context_;  // destroyed last: the cache's plans live on its handle
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<TuningDatabase> db_;
  std::unique_ptr<PlanCache> cache_;
  TunePolicy policy_;
  DeviceInfo device_;
  std::string db_path_;
  std::shared_ptr<KnownRates> rates_ = std::make_shared<KnownRates>();
};

// The tensors of a problem in device memory, each at least as large as asked: x, w, y, and the
// bias and residual of a post-op chain (empty without one).
struct DeviceTensors {
  DeviceBuffer x, w, y, bias, residual;
  TensorPointers pointers() const {
    return {x.get(), w.get(), y.get(), bias.get(), residual.get()};
  }
};
// Bytes each tensor of `p` needs (span_elements * size_of(data type)); bias and residual 0 where
// the chain has no bias or add.
struct TensorBytes {
  size_t x = 0, w = 0, y = 0, bias = 0, residual = 0;
  static TensorBytes of(const ConvProblem& p);
  void grow_to(const TensorBytes& other);  // the larger of each
};
StatusOr<DeviceTensors> allocate_tensors(Session& session, const TensorBytes& bytes);
// Fills every buffer (bias and residual too) with values uniform in [-1, 1] of type `t` (a random
// block of up to 1 Mi elements, repeated), deterministic for a seed.
Status fill_random(Session& session, DeviceTensors& tensors, DataType t, uint64_t seed);

struct MeasureOptions {
  int warmup = 3;
  int iters = 20;
  bool flush_l2 = false;
};

// One problem tuned (through the plan cache) and timed.
struct Measurement {
  EngineConfig config;
  NoteSet notes = 0;
  int64_t workspace_bytes = 0;
  double tuning_ms = 0;         // wall time of the PlanCache::acquire that found or tuned the plan
  double first_result_ms = 0;   // from the acquire's start until its first execute had finished
  std::string source;           // "tuned", "database", "memory" (this process had it) or
                                // "provisional" (background mode: tuning goes on meanwhile)
  std::vector<float> times_ms;  // Backend::time: CUDA events around each run
  TimeSummary time;
};
// Acquires the plan (timing that), runs it once through PlanCache::execute, then times it with
// Backend::time on the acquired plan: `warmup` untimed runs, `iters` timed ones.
// REQUIRES: tensors hold at least TensorBytes::of(problem).
StatusOr<Measurement> tune_and_time(Session& session, const ConvProblem& problem,
                                    const DeviceTensors& tensors, const MeasureOptions& options);

struct Verification {
  double relative_error = -1;
  double tolerance = -1;
  int64_t elements_checked = 0;
  bool full = false;  // the whole output (else a random sample of it)
  bool passed = false;
  std::string failure;  // why not, as the tuner words a rejected candidate
  double wall_ms = 0;   // what the check cost (issue 21: <= 2 s on the suites' problems)
};
// Checks the plan the cache serves for (session's handle, problem) with Tuner::check: the
// tuner's scratch buffers (fresh inputs, poisoned output, guard bytes), every output element or
// a sample of them against the float64 reference, relative_error_tolerance. The caller's
// tensors are not touched.
StatusOr<Verification> verify(Session& session, const ConvProblem& problem);

// Device memory bandwidth: a 256 MiB device-to-device cudaMemcpyAsync, best of 10, counting the
// bytes read and written.
StatusOr<double> measure_copy_gbps(Session& session);
// The matrix rate for `data_type` (tensor cores as `allow_tensor_cores`): an 8192^3 GEMM as a
// channels-last 1x1 convolution (n8 c8192 k8192 32x32) tuned and run through the plan cache, best
// of 10. Also returns the problem's descriptor.
StatusOr<std::pair<double, std::string>> measure_matrix_tflops(Session& session, DataType data_type,
                                                               bool allow_tensor_cores);

// Rates for problems of (data type, tensor cores), from the flags where given, else from the
// tuning database (device rates of this device model), else measured and kept there: measured
// once per device model, not on every start (issue 21's set-up goal). Once per process without
// a database.
class RateSource {
 public:
  RateSource(std::optional<double> peak_tflops, std::optional<double> peak_gbps)
      : peak_tflops_(peak_tflops), peak_gbps_(peak_gbps) {}
  StatusOr<Rates> rates_for(Session& session, const ConvProblem& problem);

 private:
  std::optional<double> peak_tflops_, peak_gbps_;
  std::optional<std::pair<double, std::string>> copy_;  // rate and source
  std::map<std::pair<DataType, bool>, std::pair<double, std::string>> matrix_;
};

// What the machine runs: GPU, driver, CUDA runtime, cuDNN and convplan versions.
struct Environment {
  DeviceInfo device;
  std::string driver_version;   // from /proc/driver/nvidia/version; "" when unknown
  int driver_cuda_version = 0;  // cudaDriverGetVersion, e.g. 12080
  int cuda_runtime_version = 0;
  int64_t cudnn_version = 0;
  std::string convplan_version;
};
Environment environment(const Session& session);
nlohmann::json environment_json(const Environment& env);
// 12080 -> "12.8"; 91900 -> "9.19.0".
std::string cuda_version_text(int v);
std::string cudnn_version_text(int64_t v);
std::string nvidia_driver_version();
int driver_cuda_version();  // cudaDriverGetVersion(), 0 without a driver

}  // namespace convplan::cli
