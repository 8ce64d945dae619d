// convplan run, engines and devices.
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "commands.h"
#include "convplan/cudnn_backend.h"
#include "convplan/engine_config.h"
#include "convplan/tuning_record.h"
#include "gpu.h"
#include "report.h"

namespace convplan::cli {

namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

StatusOr<ConvProblem> problem_from(const std::string& descriptor, const ProblemFlags& flags) {
  StatusOr<ConvProblem> p = make_problem(descriptor, flags.overrides());
  if (!p.ok()) return invalid_argument("descriptor '" + descriptor + "': " + p.status().message());
  return p;
}

// What one run measured, and what it is compared with.
struct RunResult {
  Measurement m;
  std::optional<Verification> verification;
  StatusOr<Rates> rates = not_found("not measured");
  double tflops = -1, gbps = -1, floor_ms = -1, share = -1;
};

// Tunes and times the problem (and verifies it), then measures the rates. Returns the exit code
// of a failure, after its message.
std::optional<int> measure(Session& session, const ConvProblem& problem, const RunOptions& o,
                           const MeasureOptions& mo, RunResult& r) {
  StatusOr<DeviceTensors> tensors = allocate_tensors(session, TensorBytes::of(problem));
  if (!tensors.ok()) return fail(exit_code_for(tensors.status()), tensors.status().to_string());
  if (Status s = fill_random(session, *tensors, problem.data_type, 1); !s.ok()) {
    return fail(exit_code_for(s), s.to_string());
  }
  StatusOr<Measurement> measured = tune_and_time(session, problem, *tensors, mo);
  if (!measured.ok()) {
    return fail(exit_code_for(measured.status()),
                problem.to_string() + ": " + measured.status().to_string());
  }
  r.m = *measured;
  if (o.verify) {
    StatusOr<Verification> v = verify(session, problem);
    if (!v.ok()) return fail(exit_code_for(v.status()), "verification: " + v.status().to_string());
    r.verification = *v;
  }
  // Room for the rate measurements' buffers.
  tensors->x.reset();
  tensors->w.reset();
  tensors->y.reset();
  RateSource rate_source(o.timing.peak_tflops, o.timing.peak_gbps);
  r.rates = rate_source.rates_for(session, problem);
  if (!r.rates.ok()) {
    warn("no roofline: " + r.rates.status().to_string());
  }
  const double median = r.m.time.median_ms;
  r.tflops = median > 0 ? problem.flops() / (median * 1e9) : -1;
  r.gbps = median > 0 ? problem.min_bytes() / (median * 1e6) : -1;
  r.floor_ms = r.rates.ok() ? roofline_floor_ms(problem, *r.rates) : -1;
  r.share = r.floor_ms > 0 && median > 0 ? r.floor_ms / median : -1;
  return std::nullopt;
}

std::string run_report(const ConvProblem& problem, const Environment& env, const RunResult& r,
                       const MeasureOptions& mo, const TunePolicy& policy,
                       const CacheStats& stats) {
  const Measurement& m = r.m;
  std::ostringstream out;
  out << "problem    " << problem.to_string() << "\n";
  out << "device     " << env.device.name << " (sm" << env.device.cc_major << env.device.cc_minor
      << ", " << env.device.sm_count << " SMs), cuDNN " << cudnn_version_text(env.cudnn_version)
      << ", CUDA runtime " << cuda_version_text(env.cuda_runtime_version) << "\n";
  out << "engine     " << m.config.to_string() << "  knobs: " << knobs_text(m.config) << "\n";
  out << "notes      " << (m.notes ? notes_to_string(m.notes) : "(none)") << "\n";
  out << "workspace  " << human_bytes(static_cast<double>(m.workspace_bytes)) << "\n";
  out << "tuning     " << fixed(m.tuning_ms, 1) << " ms (" << m.source << ", mode "
      << to_string(policy.mode) << ")\n";
  out << "time       median " << fixed(m.time.median_ms, 4) << " ms over " << m.time.runs
      << " runs (min " << fixed(m.time.min_ms, 4) << ", p10 " << fixed(m.time.p10_ms, 4) << ", p90 "
      << fixed(m.time.p90_ms, 4) << ", max " << fixed(m.time.max_ms, 4)
      << "); CUDA events around each run of the acquired plan after " << mo.warmup
      << " warm-up runs" << (mo.flush_l2 ? ", L2 flushed before each" : "") << "\n";
  out << "rate       " << fixed(r.tflops, 2) << " TFLOP/s, " << fixed(r.gbps, 1) << " GB/s\n";
  if (r.rates.ok()) {
    out << "roofline   floor " << fixed(r.floor_ms, 4) << " ms = " << fixed(100 * r.share, 1)
        << "% of the median; matrix " << fixed(r.rates->matrix_tflops, 1) << " TFLOP/s ("
        << r.rates->matrix_source << "), copy " << fixed(r.rates->copy_gbps, 0) << " GB/s ("
        << r.rates->copy_source << ")\n";
  }
  if (r.verification) {
    const Verification& v = *r.verification;
    out << "verify     " << (v.passed ? "passed" : "FAILED") << ": relative error "
        << sci(v.relative_error) << (v.passed ? " <= " : " > ") << sci(v.tolerance) << " over "
        << v.elements_checked << (v.full ? " elements (all)" : " sampled elements") << " in "
        << fixed(v.wall_ms, 1) << " ms\n";
  }
  out << "cache      " << stats.to_string() << "\n";
  return out.str();
}

nlohmann::json run_json(const ConvProblem& problem, const Environment& env, const RunResult& r,
                        const MeasureOptions& mo, const TunePolicy& policy,
                        const CacheStats& stats) {
  const Measurement& m = r.m;
  nlohmann::json j;
  j["format"] = "convplan-run";
  j["version"] = 1;
  j["date"] = utc_timestamp();
  j.update(environment_json(env));
  j["problem"] = problem_json(problem);
  j["engine"] = m.config.to_string();
  j["knobs"] = knobs_json(m.config);
  j["notes"] = notes_to_string(m.notes);
  j["workspace_bytes"] = m.workspace_bytes;
  j["tune_mode"] = to_string(policy.mode);
  j["tuning_ms"] = m.tuning_ms;
  j["source"] = m.source;
  j["time"] = {{"method", "CUDA events around each run of the acquired plan (Backend::time)"},
               {"warmup", mo.warmup},
               {"flush_l2", mo.flush_l2},
               {"runs", m.time.runs},
               {"median_ms", m.time.median_ms},
               {"min_ms", m.time.min_ms},
               {"p10_ms", m.time.p10_ms},
               {"p90_ms", m.time.p90_ms},
               {"max_ms", m.time.max_ms},
               {"times_ms", m.times_ms}};
  j["tflops"] = r.tflops;
  j["gbps"] = r.gbps;
  j["roofline"] = nullptr;
  if (r.rates.ok()) {
    j["roofline"] = {{"floor_ms", r.floor_ms},
                     {"share", r.share},
                     {"matrix_tflops", r.rates->matrix_tflops},
                     {"matrix_source", r.rates->matrix_source},
                     {"copy_gbps", r.rates->copy_gbps},
                     {"copy_source", r.rates->copy_source}};
  }
  j["verification"] = nullptr;
  if (r.verification) {
    j["verification"] = {{"passed", r.verification->passed},
                         {"relative_error", r.verification->relative_error},
                         {"tolerance", r.verification->tolerance},
                         {"elements_checked", r.verification->elements_checked},
                         {"full", r.verification->full}};
  }
  j["cache_stats"] = stats.to_string();
  return j;
}

}  // namespace

int run_command(const GlobalOptions& global, const RunOptions& o) {
  StatusOr<ConvProblem> parsed = problem_from(o.descriptor, o.problem);
  if (!parsed.ok()) return fail(kExitUsage, parsed.status().message());
  const ConvProblem& problem = *parsed;
  int rc = kExitOk;
  std::unique_ptr<Session> opened = open_session(global, o.timing, &rc);
  if (!opened) return rc;
  Session& session = *opened;

  MeasureOptions mo;
  mo.iters = o.timing.iters;
  mo.warmup = o.timing.warmup;
  mo.flush_l2 = o.timing.flush_l2;
  RunResult result;
  if (std::optional<int> failed = measure(session, problem, o, mo, result)) return *failed;
  const Environment env = environment(session);
  // The report goes to standard error when the JSON goes to standard output.
  (o.json_path == "-" ? std::cerr : std::cout)
      << run_report(problem, env, result, mo, session.policy(), session.cache().stats());
  if (!o.json_path.empty()) {
    const nlohmann::json j =
        run_json(problem, env, result, mo, session.policy(), session.cache().stats());
    if (Status s = write_text(o.json_path, j.dump(2) + "\n"); !s.ok()) {
      return fail(kExitFailure, s.to_string());
    }
  }
  if (result.verification && !result.verification->passed) {
    return fail(kExitVerifyFailed, "verification failed for " + problem.to_string());
  }
  return kExitOk;
}

int engines_command(const GlobalOptions& /*global*/, const EnginesOptions& o) {
  StatusOr<ConvProblem> parsed = problem_from(o.descriptor, o.problem);
  if (!parsed.ok()) return fail(kExitUsage, parsed.status().message());
  if (int rc = gpu_missing(); rc != kExitOk) return rc;
  StatusOr<CudnnContext> ctx = CudnnContext::create(o.gpu);
  if (!ctx.ok()) {
    return fail(ctx.status().code() == StatusCode::kInvalidArgument ? kExitUsage
                                                                    : exit_code_for(ctx.status()),
                ctx.status().to_string());
  }
  StatusOr<std::vector<EngineReport>> reports = inspect_engines(ctx->handle(), *parsed);
  if (!reports.ok()) return fail(exit_code_for(reports.status()), reports.status().to_string());

  Table table(
      {"engine", "finalizes", "workspace", "notes", "knobs (min..max step, default)", "why not"},
      {true, false, true, false, false, false});
  nlohmann::json rows = nlohmann::json::array();
  int finalized = 0;
  for (const EngineReport& r : *reports) {
    std::string knobs;
    nlohmann::json knobs_j = nlohmann::json::array();
    for (const KnobInfo& k : r.knobs) {
      if (!knobs.empty()) knobs += ' ';
      knobs += k.name + "[" + std::to_string(k.min_value) + ".." + std::to_string(k.max_value) +
               (k.stride != 1 ? " step " + std::to_string(k.stride) : "") + ", " +
               std::to_string(k.default_value) + "]";
      knobs_j.push_back({{"type", k.type},
                         {"name", k.name},
                         {"min", k.min_value},
                         {"max", k.max_value},
                         {"stride", k.stride},
                         {"default", k.default_value}});
    }
    const bool ok = r.status.ok();
    finalized += ok ? 1 : 0;
    table.add_row({std::to_string(r.engine_id), ok ? "yes" : "no",
                   ok ? human_bytes(static_cast<double>(r.workspace_bytes)) : "-",
                   notes_to_string(r.notes), knobs, ok ? "" : r.status.to_string()});
    rows.push_back(
        {{"engine", r.engine_id},
         {"finalizes", ok},
         {"status", r.status.to_string()},
         {"notes", notes_to_string(r.notes)},
         {"knobs", knobs_j},
         {"workspace_bytes", ok ? nlohmann::json(r.workspace_bytes) : nlohmann::json()}});
  }
  std::ostream& human = o.json_path == "-" ? std::cerr : std::cout;
  human << parsed->to_string() << ": " << reports->size() << " engine indices, " << finalized
        << " finalize with default knobs\n";
  table.print(human);
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"format", "convplan-engines"},
                        {"version", 1},
                        {"date", utc_timestamp()},
                        {"problem", problem_json(*parsed)},
                        {"cudnn_version", cudnn_version_text(cudnn_runtime_version())},
                        {"engines", rows}};
    if (Status s = write_text(o.json_path, j.dump(2) + "\n"); !s.ok()) {
      return fail(kExitFailure, s.to_string());
    }
  }
  return kExitOk;
}

namespace {

// The devices document; `no_gpu` is the reason when there is no usable GPU (gpus then empty).
nlohmann::json devices_json(const std::string& driver_version, int driver,
                            const nlohmann::json& gpus, const std::string& no_gpu) {
  nlohmann::json j = {{"format", "convplan-devices"},
                      {"version", 1},
                      {"date", utc_timestamp()},
                      {"driver_version", driver_version},
                      {"driver_cuda_version", cuda_version_text(driver)},
                      {"cuda_runtime_version", cuda_version_text(cuda_runtime_version())},
                      {"cudnn_version", cudnn_version_text(cudnn_runtime_version())},
                      {"convplan_version", convplan_version()},
                      {"gpus", gpus}};
  if (!no_gpu.empty()) j["no_gpu_reason"] = no_gpu;
  return j;
}

}  // namespace

int devices_command(const GlobalOptions& /*global*/, const DevicesOptions& o) {
  const int driver = driver_cuda_version();
  const std::string driver_version = nvidia_driver_version();
  std::ostream& human = o.json_path == "-" ? std::cerr : std::cout;
  human << "convplan " << convplan_version() << ", cuDNN "
        << cudnn_version_text(cudnn_runtime_version()) << ", CUDA runtime "
        << cuda_version_text(cuda_runtime_version()) << "\n";
  if (const Status g = gpu_available(); !g.ok()) {
    // Scripts asking for JSON get a document here too: no devices, and why (exit status 3).
    if (!o.json_path.empty()) {
      const nlohmann::json j =
          devices_json(driver_version, driver, nlohmann::json::array(), g.message());
      if (Status s = write_text(o.json_path, j.dump(2) + "\n"); !s.ok()) {
        return fail(kExitFailure, s.to_string());
      }
    }
    return gpu_missing();
  }
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  Table table({"gpu", "name", "cc", "SMs", "L2", "memory", "uuid", "model key"},
              {true, false, false, true, true, true, false, false});
  nlohmann::json gpus = nlohmann::json::array();
  for (int i = 0; i < cuda_device_count(); ++i) {
    StatusOr<CudnnContext> ctx = CudnnContext::create(i);
    if (!ctx.ok()) return fail(exit_code_for(ctx.status()), ctx.status().to_string());
    StatusOr<DeviceInfo> d = backend->device_of(ctx->handle());
    if (!d.ok()) return fail(exit_code_for(d.status()), d.status().to_string());
    const std::string cc = std::to_string(d->cc_major) + "." + std::to_string(d->cc_minor);
    table.add_row({std::to_string(d->ordinal), d->name, cc, std::to_string(d->sm_count),
                   human_bytes(static_cast<double>(d->l2_bytes)),
                   human_bytes(static_cast<double>(d->memory_bytes)), d->uuid, d->model_key()});
    gpus.push_back({{"ordinal", d->ordinal},
                    {"name", d->name},
                    {"uuid", d->uuid},
                    {"compute_capability", cc},
                    {"sm_count", d->sm_count},
                    {"l2_bytes", d->l2_bytes},
                    {"memory_bytes", d->memory_bytes},
                    {"cudnn_version", d->cudnn_version},
                    {"model_key", d->model_key()}});
  }
  human << "driver " << (driver_version.empty() ? "?" : driver_version) << " (CUDA "
        << cuda_version_text(driver) << ")\n";
  table.print(human);
  if (!o.json_path.empty()) {
    const nlohmann::json j = devices_json(driver_version, driver, gpus, "");
    if (Status s = write_text(o.json_path, j.dump(2) + "\n"); !s.ok()) {
      return fail(kExitFailure, s.to_string());
    }
  }
  return kExitOk;
}

}  // namespace convplan::cli
