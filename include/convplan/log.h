// Logging: where the library's messages go (warnings about the tuning database, the tuner's
// CONVPLAN_VERBOSE report, ...). The library never writes to stderr itself: it hands each message
// at or above the current level to the sink the application set. The default sink writes
// "convplan: <message>" and a newline to stderr; the default level is kInfo.
//
// Thread-safe: the sink and the level may be set at any time from any thread (a message being
// delivered meanwhile goes to the old sink or the new). The sink is called from whichever thread
// logs, possibly several at once, so it must be thread-safe itself; it must not log.
#pragma once

#include <functional>
#include <string_view>

#include "convplan/export.h"
#include "convplan/status.h"

namespace convplan {

enum class LogLevel { kDebug, kInfo, kWarning, kError, kOff };
CONVPLAN_EXPORT const char* to_string(
    LogLevel level);  // "debug", "info", "warning", "error", "off"
// The names above; anything else is kInvalidArgument naming the value.
CONVPLAN_EXPORT StatusOr<LogLevel> parse_log_level(std::string_view text);

// `message` has no prefix and no trailing newline.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Replaces the sink; null restores the default (stderr).
CONVPLAN_EXPORT void set_log_sink(LogSink sink);
// Messages below `level` are dropped before they reach the sink; kOff drops all.
CONVPLAN_EXPORT void set_log_level(LogLevel level);
CONVPLAN_EXPORT LogLevel log_level();
// Sets the level from CONVPLAN_LOG_LEVEL when it is set and not empty; a bad value is
// kInvalidArgument naming the variable and the value, and leaves the level as it was.
CONVPLAN_EXPORT Status set_log_level_from_environment();

// True when a message at `level` would reach the sink (to skip building one that would not).
CONVPLAN_EXPORT bool log_enabled(LogLevel level);
CONVPLAN_EXPORT void log(LogLevel level, std::string_view message);

}  // namespace convplan
