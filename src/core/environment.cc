#include "convplan/environment.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>

namespace convplan {
namespace {

Status value_error(std::string_view name, std::string_view text, const std::string& what) {
  return invalid_argument(std::string(name) + "='" + std::string(text) + "': " + what);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string number_text(double v) {
  std::ostringstream s;
  s.imbue(std::locale::classic());
  s << v;
  return s.str();
}

}  // namespace

std::optional<std::string_view> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string_view(v);
}

StatusOr<bool> parse_bool_value(std::string_view name, std::string_view text) {
  const std::string v = lower(text);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return value_error(name, text, "not a boolean (1/0, true/false, yes/no, on/off)");
}

StatusOr<int64_t> parse_int_value(std::string_view name, std::string_view text, int64_t min,
                                  int64_t max) {
  int64_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  std::string range = "[";  // appended: see core/quoted.h (GCC 12's false -Wrestrict at -O3)
  range += std::to_string(min);
  range += ", ";
  range += std::to_string(max);
  range += "]";
  if (r.ec == std::errc::result_out_of_range)
    return value_error(name, text, "out of range " + range);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size())
    return value_error(name, text, "not a whole number");
  if (v < min || v > max) return value_error(name, text, "out of range " + range);
  return v;
}

StatusOr<double> parse_number_value(std::string_view name, std::string_view text, double min,
                                    double max, bool min_exclusive) {
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec == std::errc::invalid_argument || r.ptr != text.data() + text.size())
    return value_error(name, text, "not a number");
  const std::string range =
      std::string(min_exclusive ? "(" : "[") + number_text(min) + ", " + number_text(max) + "]";
  if (!std::isfinite(v) || r.ec == std::errc::result_out_of_range)
    return value_error(name, text, "must be a finite number in " + range);
  if (v < min || (min_exclusive && v == min) || v > max)
    return value_error(name, text, "out of range " + range);
  return v;
}

StatusOr<int64_t> parse_byte_size_value(std::string_view name, std::string_view text) {
  size_t end = 0;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  const std::string suffix = lower(text.substr(end));
  const std::string_view digits = text.substr(0, end);
  int64_t n = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || r.ec == std::errc::invalid_argument)
    return value_error(name, text, "not a byte count (digits with an optional K, M or G suffix)");
  if (r.ec == std::errc::result_out_of_range) return value_error(name, text, "too large");
  int shift = 0;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    shift = 10;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    shift = 20;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    shift = 30;
  } else {
    return value_error(name, text,
                       "unknown size suffix '" + std::string(text.substr(end)) + "' (K, M or G)");
  }
  if (n > (std::numeric_limits<int64_t>::max() >> shift))
    return value_error(name, text, "too large");
  return n << shift;
}

StatusOr<bool> env_bool(const char* name, bool fallback) {
  const std::optional<std::string_view> v = env_value(name);
  if (!v) return fallback;
  return parse_bool_value(name, *v);
}

StatusOr<int64_t> env_byte_size(const char* name, int64_t fallback) {
  const std::optional<std::string_view> v = env_value(name);
  if (!v) return fallback;
  return parse_byte_size_value(name, *v);
}

}  // namespace convplan
