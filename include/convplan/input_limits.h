// Limits on what convplan reads from outside (JSON documents, rules files, suite files, exported
// databases), and the reader of input files that enforces them.
//
// - JSON nesting: at most kMaxJsonDepth levels of arrays and objects. convplan's own documents
//   nest 5 levels; deeper ones are refused before a parser sees them, so no recursion in a
//   parser or printer can run out of stack.
// - File size: at most max_input_bytes() (default kDefaultMaxInputBytes = 256 MiB, settable
//   with CONVPLAN_MAX_INPUT_BYTES, e.g. "1G"). Only regular files are read: a FIFO, a device
//   (/dev/zero) or a folder is refused before anything is read, so no read waits or grows
//   without bound.
//
// Stateless functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "convplan/export.h"
#include "convplan/status.h"

namespace convplan {

inline constexpr int kMaxJsonDepth = 32;
inline constexpr int64_t kDefaultMaxInputBytes = int64_t{256} << 20;

// CONVPLAN_MAX_INPUT_BYTES, else kDefaultMaxInputBytes; kInvalidArgument for a malformed value
// or one below 1 KiB.
CONVPLAN_EXPORT StatusOr<int64_t> max_input_bytes();

// kInvalidArgument "<what>: nested deeper than N levels (at byte B)" when `text` nests arrays
// and objects deeper than `max_depth`; ok otherwise (it need not be valid JSON: the parser that
// follows says what else is wrong). Linear, no recursion.
CONVPLAN_EXPORT Status check_json_nesting(std::string_view text, std::string_view what,
                                          int max_depth = kMaxJsonDepth);
// check_json_nesting, and kInvalidArgument when `text` is longer than `max_bytes`.
CONVPLAN_EXPORT Status check_json_limits(std::string_view text, std::string_view what,
                                         int64_t max_bytes, int max_depth = kMaxJsonDepth);

// The whole of the regular file `path`, described as `what` in messages ("errata file"):
// kNotFound when it does not exist, kInvalidArgument when it is not a regular file (a FIFO, a
// device, a folder) or is larger than `max_bytes`, kIoError when it cannot be read. Opening
// never blocks (O_NONBLOCK), so a FIFO is refused rather than waited on.
CONVPLAN_EXPORT StatusOr<std::string> read_input_file(const std::string& path,
                                                      std::string_view what, int64_t max_bytes);

}  // namespace convplan
