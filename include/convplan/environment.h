// Reading the CONVPLAN_* environment variables: one parser per kind of value, shared by every
// part of the library and the CLI, so that a variable means the same thing wherever it is read.
//
//   booleans     1/0, true/false, yes/no, on/off (any case)
//   whole numbers decimal, within the range the caller gives
//   numbers      decimal, finite, within the range the caller gives
//   byte sizes   "1048576", "512K", "64M", "4G" (powers of 1024; "KB"/"KiB" spellings too)
//
// Every failure is kInvalidArgument and reads "NAME='value': what is wrong". An unset variable
// means "not given"; one set to the empty string is a value like any other (and refused by every
// parser here). Stateless functions; as thread-safe as getenv (no thread may setenv meanwhile).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "convplan/export.h"
#include "convplan/status.h"

namespace convplan {

// The value of `name`, or nullopt when it is unset.
CONVPLAN_EXPORT std::optional<std::string_view> env_value(const char* name);

CONVPLAN_EXPORT StatusOr<bool> parse_bool_value(std::string_view name, std::string_view text);
CONVPLAN_EXPORT StatusOr<int64_t> parse_int_value(std::string_view name, std::string_view text,
                                                  int64_t min, int64_t max);
// A finite number in [min, max] (or (min, max] with min_exclusive).
CONVPLAN_EXPORT StatusOr<double> parse_number_value(std::string_view name, std::string_view text,
                                                    double min, double max,
                                                    bool min_exclusive = false);
// A byte count >= 0 that fits in int64.
CONVPLAN_EXPORT StatusOr<int64_t> parse_byte_size_value(std::string_view name,
                                                        std::string_view text);

// The variable `name` read with the parser above; `fallback` when it is not given.
CONVPLAN_EXPORT StatusOr<bool> env_bool(const char* name, bool fallback);
CONVPLAN_EXPORT StatusOr<int64_t> env_byte_size(const char* name, int64_t fallback);

}  // namespace convplan
