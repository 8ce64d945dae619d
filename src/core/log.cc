// The logging sink (see include/convplan/log.h). The sink is held in a shared_ptr swapped under a
// mutex, and copied out before the call, so a sink is never called with the lock held (a slow
// sink delays no set_log_sink) and a replaced sink lives until its last call returns.
#include "convplan/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "core/mutex.h"

namespace convplan {
namespace {

void stderr_sink(LogLevel, std::string_view message) {
  // One write per line, so that lines of several threads do not interleave.
  std::string line = "convplan: ";
  line.append(message);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

struct Logger {
  Mutex mu;
  std::shared_ptr<const LogSink> sink GUARDED_BY(mu);
  std::atomic<LogLevel> level{LogLevel::kInfo};
};

Logger& logger() {
  static Logger* const instance = new Logger;  // never destroyed: threads may log at exit
  return *instance;
}

std::shared_ptr<const LogSink> current_sink() {
  Logger& l = logger();
  MutexLock lock(l.mu);
  return l.sink;
}

}  // namespace

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
}

StatusOr<LogLevel> parse_log_level(std::string_view text) {
  for (LogLevel l :
       {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError, LogLevel::kOff}) {
    if (text == to_string(l)) return l;
  }
  return invalid_argument("log level '" + std::string(text) +
                          "' is not one of debug, info, warning, error, off");
}

void set_log_sink(LogSink sink) {
  std::shared_ptr<const LogSink> fresh;
  if (sink) fresh = std::make_shared<const LogSink>(std::move(sink));
  Logger& l = logger();
  MutexLock lock(l.mu);
  l.sink = std::move(fresh);
}

void set_log_level(LogLevel level) { logger().level.store(level, std::memory_order_relaxed); }

LogLevel log_level() { return logger().level.load(std::memory_order_relaxed); }

Status set_log_level_from_environment() {
  const char* text = std::getenv("CONVPLAN_LOG_LEVEL");
  if (text == nullptr || *text == '\0') return ok_status();
  StatusOr<LogLevel> level = parse_log_level(text);
  if (!level.ok()) {
    return invalid_argument("CONVPLAN_LOG_LEVEL='" + std::string(text) +
                            "' is not one of debug, info, warning, error, off");
  }
  set_log_level(*level);
  return ok_status();
}

bool log_enabled(LogLevel level) { return level != LogLevel::kOff && level >= log_level(); }

void log(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) return;
  const std::shared_ptr<const LogSink> sink = current_sink();
  if (sink != nullptr) {
    (*sink)(level, message);
  } else {
    stderr_sink(level, message);
  }
}

}  // namespace convplan
