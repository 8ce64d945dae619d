// What a harness does when a property of the parsed result does not hold: print what was expected
// (with the detail on the same line, which is the line CI's summary table quotes) and abort, so
// that libFuzzer keeps the input (crash-<sha1>) and CI fails. assert() is not used because
// RelWithDebInfo builds define NDEBUG.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace convplan::fuzz {

[[noreturn]] inline void fail(const char* file, int line, const char* what,
                              const std::string& detail) {
  std::fprintf(stderr, "%s:%d: fuzz property failed: %s: %s\n", file, line, what, detail.c_str());
  std::abort();
}

// The fuzzer's bytes as text (they may hold NULs and invalid UTF-8; the parsers must cope).
inline std::string_view as_text(const unsigned char* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace convplan::fuzz

// Aborts with `detail` (a std::string expression) when `cond` is false.
#define CONVPLAN_FUZZ_CHECK(cond, detail)                                     \
  do {                                                                        \
    if (!(cond)) ::convplan::fuzz::fail(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)
