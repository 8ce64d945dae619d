// RecordKey's text form and hash (see include/convplan/record_key.h).
#include "convplan/record_key.h"

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "convplan/device.h"

#ifndef CONVPLAN_VERSION_STRING
#error "CONVPLAN_VERSION_STRING must be defined by the build"
#endif

namespace convplan {
namespace {

constexpr std::string_view kTunerSuffix = ";tuner=";
constexpr int kDeviceModelFields = 4;  // name|smXY|smsN|cudnnV

std::vector<std::string_view> split_bars(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t bar = text.find('|', start);
    parts.push_back(text.substr(start, bar == std::string_view::npos ? bar : bar - start));
    if (bar == std::string_view::npos) return parts;
    start = bar + 1;
  }
}

std::string_view joined(std::string_view text, std::string_view first, std::string_view last) {
  const size_t begin = static_cast<size_t>(first.data() - text.data());
  const size_t end = static_cast<size_t>(last.data() - text.data()) + last.size();
  return text.substr(begin, end - begin);
}

Status key_error(std::string_view text, const std::string& what) {
  return invalid_argument("record key '" + std::string(text) + "': " + what);
}

// "0.1.0" or "0.1.0;tuner=2" -> version and format.
Status parse_version_part(std::string_view text, std::string_view part, RecordKey& key) {
  const size_t suffix = part.find(kTunerSuffix);
  key.library_version = std::string(part.substr(0, suffix));
  key.tuner_format = 1;
  if (suffix != std::string_view::npos) {
    const std::string_view digits = part.substr(suffix + kTunerSuffix.size());
    int v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc() || end != digits.data() + digits.size() || v < 2) {
      return key_error(text, "tuner format '" + std::string(digits) + "' is not an integer >= 2");
    }
    key.tuner_format = v;
  }
  if (key.library_version.empty()) return key_error(text, "the library version is empty");
  return ok_status();
}

}  // namespace

const char* convplan_version() { return CONVPLAN_VERSION_STRING; }

std::string DeviceInfo::model_key() const {
  return name + "|sm" + std::to_string(cc_major) + std::to_string(cc_minor) + "|sms" +
         std::to_string(sm_count) + "|cudnn" + std::to_string(cudnn_version);
}

std::string record_key_text(std::string_view device_model, std::string_view problem,
                            std::string_view policy, std::string_view library_version,
                            int tuner_format) {
  std::string k;
  k.reserve(device_model.size() + problem.size() + policy.size() + library_version.size() + 16);
  k += device_model;
  k += '|';
  k += problem;
  k += '|';
  k += policy;
  k += '|';
  k += library_version;
  if (tuner_format != 1) {
    k += kTunerSuffix;
    k += std::to_string(tuner_format);
  }
  return k;
}

std::string RecordKey::to_string() const {
  return record_key_text(device_model, problem.to_string(), policy, library_version, tuner_format);
}

StatusOr<RecordKey> RecordKey::parse(std::string_view text) {
  const std::vector<std::string_view> parts = split_bars(text);
  // device (4) + problem + policy (1 or more) + version
  if (parts.size() < kDeviceModelFields + 3) {
    return key_error(text, "has " + std::to_string(parts.size()) + " '|'-separated fields, " +
                               "expected at least " + std::to_string(kDeviceModelFields + 3));
  }
  RecordKey key;
  key.device_model = std::string(joined(text, parts[0], parts[kDeviceModelFields - 1]));
  StatusOr<ConvProblem> problem = parse_problem(parts[kDeviceModelFields]);
  if (!problem.ok()) return key_error(text, "problem: " + problem.status().message());
  key.problem = *problem;
  key.policy = std::string(joined(text, parts[kDeviceModelFields + 1], parts[parts.size() - 2]));
  if (key.policy.empty()) return key_error(text, "the policy is empty");
  CONVPLAN_RETURN_IF_ERROR(parse_version_part(text, parts.back(), key));
  return key;
}

uint64_t RecordKey::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : to_string()) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::optional<int64_t> cudnn_version_of_model(std::string_view device_model) {
  const size_t pos = device_model.rfind("|cudnn");
  if (pos == std::string_view::npos) return std::nullopt;
  const std::string_view digits = device_model.substr(pos + 6);
  if (digits.empty() || digits.size() > 12) return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace convplan
