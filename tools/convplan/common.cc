#include <iostream>
#include <limits>
#include <optional>
#include <string_view>

#include "commands.h"
#include "convplan/cudnn_backend.h"
#include "convplan/environment.h"
#include "convplan/input_limits.h"
#include "convplan/log.h"
#include "convplan/tuning_db.h"
#include "gpu.h"
#include "stuck_device.h"

namespace convplan::cli {

int fail(int code, const std::string& message) {
  std::cerr << "convplan: " << message << "\n";
  return code;
}

void warn(const std::string& message) {
  if (log_enabled(LogLevel::kWarning)) std::cerr << "convplan: warning: " << message << "\n";
}

ProblemOverrides ProblemFlags::overrides() const {
  ProblemOverrides o;
  if (!direction.empty()) o.direction = *parse_direction(direction);
  if (!data_type.empty()) o.data_type = *parse_data_type(data_type);
  if (!layout.empty()) o.layout = *parse_layout(layout);
  o.batch = batch;
  return o;
}

int exit_code_for(const Status& s) {
  exit_now_if_device_stuck(s);
  switch (s.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kNoDevice: return kExitNoGpu;
    default: return kExitFailure;
  }
}

std::optional<TuneMode> tune_mode_flag(const std::string& s) {
  if (s.empty()) return std::nullopt;
  return *parse_tune_mode(s);
}

Status check_configuration() {
  CONVPLAN_RETURN_IF_ERROR(TunePolicy::from_environment().status());
  CONVPLAN_RETURN_IF_ERROR(CudnnBackendOptions::from_environment().status());
  // PlanCache::create reads it too (the same rule: a whole number >= 0, empty meaning unset);
  // checked here so that a bad value is a usage error before the GPU is looked for.
  if (std::optional<std::string_view> v = env_value("CONVPLAN_CACHE_CAPACITY"); v && !v->empty()) {
    CONVPLAN_RETURN_IF_ERROR(
        parse_int_value("CONVPLAN_CACHE_CAPACITY", *v, 0, std::numeric_limits<int64_t>::max())
            .status());
  }
  CONVPLAN_RETURN_IF_ERROR(max_input_bytes().status());
  return TuningDatabase::check_environment();
}

int gpu_missing() {
  const Status g = gpu_available();
  if (g.ok()) return kExitOk;
  return fail(kExitNoGpu, "no usable GPU: " + g.message());
}

std::unique_ptr<Session> open_session(const GlobalOptions& global, const TimingFlags& timing,
                                      int* exit_code) {
  *exit_code = gpu_missing();
  if (*exit_code != kExitOk) return nullptr;
  SessionOptions so;
  so.gpu = timing.gpu;
  so.db_path = global.db_path;
  so.mode = tune_mode_flag(timing.tune);
  so.verbose = global.verbose;
  StatusOr<std::unique_ptr<Session>> opened = Session::open(so);
  if (!opened.ok()) {
    const Status& s = opened.status();
    *exit_code = fail(s.code() == StatusCode::kInvalidArgument ? kExitUsage : exit_code_for(s),
                      s.to_string());
    return nullptr;
  }
  return std::move(opened).value();
}

}  // namespace convplan::cli
