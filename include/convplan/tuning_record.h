// TuningRecord: the result of tuning one problem on one model of device, as plain data. It holds
// no live object, so it is copied freely between threads, stored in the tuning database and
// shared by every handle and every identical device; a plan is built (cloned) from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "convplan/device.h"
#include "convplan/engine_config.h"
#include "convplan/export.h"
#include "convplan/problem.h"
#include "convplan/record_key.h"
#include "convplan/status.h"

namespace convplan {

// What the tuner saw of one candidate, for reports.
struct CONVPLAN_EXPORT CandidateResult {
  EngineConfig config;
  NoteSet notes = 0;
  int rank = 0;  // heuristic rank, used to break timing ties
  int64_t workspace_bytes = 0;
  std::vector<float> times_ms;  // each timed run; empty when it was not timed
  double median_ms = -1;
  double relative_error = -1;  // vs the reference; -1 when not checked
  // "ok", or why it was dropped: "filtered: engine 5 disabled by CONVPLAN_DISABLED_FWD_ENGINES",
  // "rejected: relative error 0.3 > 0.01", "guard bytes overwritten after output", ...
  std::string outcome = "ok";
  bool operator==(const CandidateResult&) const = default;
};

struct CONVPLAN_EXPORT TuningRecord {
  // The key parts (a RecordKey in text, as stored): everything that can change the answer.
  std::string device_model;      // DeviceInfo::model_key()
  std::string problem;           // ConvProblem::to_string()
  std::string policy;            // TunePolicy::key()
  std::string convplan_version;  // the library that tuned it
  int tuner_format = 1;          // kTunerFormatVersion of the tuner that wrote it
  // The answer.
  EngineConfig config;
  NoteSet notes = 0;
  double time_ms = -1;  // median of the chosen candidate; -1 when not timed
  int64_t workspace_bytes = 0;
  std::string plan_json;                    // serialized plan, kept for runtime-compiled engines
  int64_t tuned_at_unix = 0;                // seconds since the epoch
  double tuning_ms = 0;                     // how long the tune took
  std::vector<CandidateResult> candidates;  // may be empty

  // record_key_text() of the key parts: RecordKey::to_string() of the key it was tuned under.
  std::string key() const;
  // Sets the key parts from `key`.
  void set_key(const RecordKey& key);
  // The key parts as a RecordKey; fails (naming the part) when the problem does not parse.
  StatusOr<RecordKey> record_key() const;
  bool operator==(const TuningRecord&) const = default;
};

// JSON (nlohmann-json inside; nothing of it in this header). from_json names the field at fault.
CONVPLAN_EXPORT std::string to_json(const TuningRecord& record);
CONVPLAN_EXPORT StatusOr<TuningRecord> tuning_record_from_json(std::string_view json);

}  // namespace convplan
