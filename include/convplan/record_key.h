// RecordKey: what identifies one tuning result, and its one text form.
//
// A tuning result holds for one device model, one problem, one tuner policy, one library version
// and one version of what the tuner writes; change any of them and the result may differ, so all
// are in the key. The policy enters as its digest, computed by the caller (TunePolicy::key() in
// the tuner layer): the core knows nothing of the tuner. A later post-op chain is part of the
// ConvProblem and so rides in the problem's text; a rewrite is part of the answer, not the key.
//
// Text form (the key under which the tuning database stores a record; unchanged since schema 1):
//   device_model '|' problem '|' policy '|' convplan_version [';tuner=' N]
// The ";tuner=N" suffix appears only for tuner format versions above 1, so keys written before
// the field existed read as format 1. A plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "convplan/export.h"
#include "convplan/problem.h"
#include "convplan/status.h"

namespace convplan {

// What the tuner writes into a record. Bump it when a change to the tuner makes the records of
// earlier versions wrong: their keys then stop matching and the problems are tuned again.
inline constexpr int kTunerFormatVersion = 1;

// The version string of this library, e.g. "0.1.0".
CONVPLAN_EXPORT const char* convplan_version();

struct CONVPLAN_EXPORT RecordKey {
  std::string device_model;  // DeviceInfo::model_key(): "NVIDIA H200|sm90|sms132|cudnn91900"
  ConvProblem problem;
  std::string policy;  // the tuner policy's digest; must not be empty
  std::string library_version = convplan_version();
  int tuner_format = kTunerFormatVersion;

  std::string to_string() const;
  // Reads to_string()'s form back. The device model is its first four '|'-separated fields (as
  // model_key() makes it); the policy may itself contain '|'. Errors name the part at fault.
  static StatusOr<RecordKey> parse(std::string_view text);
  // FNV-1a (64 bits) over to_string(): the same in every process and build.
  uint64_t hash() const;
  bool operator==(const RecordKey&) const = default;
};

// The text form from parts already in text: what RecordKey::to_string() and TuningRecord::key()
// both use, so that a key is written one way only.
CONVPLAN_EXPORT std::string record_key_text(std::string_view device_model, std::string_view problem,
                                            std::string_view policy,
                                            std::string_view library_version,
                                            int tuner_format = kTunerFormatVersion);

// The cuDNN version at the end of a DeviceInfo::model_key() ("...|cudnn91900" -> 91900), if any.
CONVPLAN_EXPORT std::optional<int64_t> cudnn_version_of_model(std::string_view device_model);

}  // namespace convplan
