// TuningRecord keys and their JSON form.
//
// The JSON form of a record (one object; field order is not significant, unknown fields are
// ignored so a later minor version may add some):
//   {"device_model": "NVIDIA H200|sm90|sms132|cudnn91900", "problem": "...", "policy": "...",
//    "convplan_version": "0.1.0",
//    "config": {"text": "eng12:k3=1", "engine_id": 12, "knobs": [{"type": 3, "value": 1}]},
//      (with "unfused": true for an unfused configuration of a post-op chain; absent = false),
//    "notes": 5, "time_ms": 0.42, "workspace_bytes": 1024, "plan_json": "...",
//    "tuned_at_unix": 1700000000, "tuning_ms": 350.5,
//    "candidates": [{"config": {...}, "notes": 5, "rank": 0, "workspace_bytes": 0,
//                    "times_ms": [0.41, 0.42], "median_ms": 0.42, "relative_error": 1e-6,
//                    "outcome": "ok"}]}
// A config of a rewritten problem (convplan/rewrite.h) adds "rewrite": "s2d2" and its text reads
// "s2d2+eng12:k3=1"; records without one are unchanged. The config's rewrite, engine_id and knobs
// are authoritative; "text" is its to_string() form for people
// and is checked against them on reading. A non-finite number (a NaN relative error, say) is
// written as the string "nan", "inf" or "-inf", since JSON has no such numbers.
// Required on reading: the four key fields, config, notes, time_ms, workspace_bytes and
// tuned_at_unix. plan_json, tuning_ms, candidates and tuner_format may be absent (empty, 0, none,
// 1).
#include "convplan/tuning_record.h"

#include "convplan/input_limits.h"

#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace convplan {

std::string TuningRecord::key() const {
  return record_key_text(device_model, problem, policy, convplan_version, tuner_format);
}

void TuningRecord::set_key(const RecordKey& key) {
  device_model = key.device_model;
  problem = key.problem.to_string();
  policy = key.policy;
  convplan_version = key.library_version;
  tuner_format = key.tuner_format;
}

StatusOr<RecordKey> TuningRecord::record_key() const {
  StatusOr<ConvProblem> parsed = parse_problem(problem);
  if (!parsed.ok()) return parsed.status().with_context("tuning record: problem");
  RecordKey key;
  key.device_model = device_model;
  key.problem = *parsed;
  key.policy = policy;
  key.library_version = convplan_version;
  key.tuner_format = tuner_format;
  return key;
}

namespace {

using Json = nlohmann::json;

Json number_to_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

Json config_to_json(const EngineConfig& config) {
  Json knobs = Json::array();
  for (const KnobChoice& k : config.knobs) knobs.push_back({{"type", k.type}, {"value", k.value}});
  Json j = {
      {"text", config.to_string()}, {"engine_id", config.engine_id}, {"knobs", std::move(knobs)}};
  // Only when there is one, so that records without a rewrite keep their old form.
  if (!config.rewrite.empty()) j["rewrite"] = config.rewrite;
  if (config.unfused) j["unfused"] = true;  // absent otherwise: records without chains unchanged
  return j;
}

Json candidate_to_json(const CandidateResult& c) {
  Json times = Json::array();
  for (float t : c.times_ms) times.push_back(number_to_json(t));
  return {{"config", config_to_json(c.config)},
          {"notes", c.notes},
          {"rank", c.rank},
          {"workspace_bytes", c.workspace_bytes},
          {"times_ms", std::move(times)},
          {"median_ms", number_to_json(c.median_ms)},
          {"relative_error", number_to_json(c.relative_error)},
          {"outcome", c.outcome}};
}

// Reading: each helper names the field by its path ("candidates[2].times_ms[0]").
const char* json_type_name(const Json& j) { return j.type_name(); }

Status field_error(const std::string& path, const std::string& what) {
  return corrupt_data("tuning record: field '" + path + "' " + what);
}

// The member `name` of `obj`, or nullptr when absent (or null).
const Json* member(const Json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Status read_string(const Json& j, const std::string& path, std::string* out) {
  if (!j.is_string())
    return field_error(path, std::string("must be a string, is ") + json_type_name(j));
  *out = j.get<std::string>();
  return ok_status();
}

// "=V REST", built by appending: "=" + std::to_string(v) trips GCC 12's false -Wrestrict at -O3
// (see core/quoted.h).
template <typename Int>
std::string value_text(Int v, const char* rest) {
  std::string text = "=";
  text += std::to_string(v);
  text += rest;
  return text;
}

Status read_int64(const Json& j, const std::string& path, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return field_error(path, value_text(u, " is out of range"));
    *out = static_cast<int64_t>(u);
    return ok_status();
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return ok_status();
  }
  return field_error(path,
                     std::string("must be an integer, is ") +
                         (j.is_number_float() ? "a fraction: " + j.dump() : json_type_name(j)));
}

Status read_int(const Json& j, const std::string& path, int* out) {
  int64_t v = 0;
  CONVPLAN_RETURN_IF_ERROR(read_int64(j, path, &v));
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    return field_error(path, value_text(v, " is out of range"));
  *out = static_cast<int>(v);
  return ok_status();
}

Status read_notes(const Json& j, const std::string& path, NoteSet* out) {
  int64_t v = 0;
  CONVPLAN_RETURN_IF_ERROR(read_int64(j, path, &v));
  if (v < 0 || v > std::numeric_limits<NoteSet>::max())
    return field_error(path, value_text(v, " is not a note bit set"));
  *out = static_cast<NoteSet>(v);
  return ok_status();
}

Status read_double(const Json& j, const std::string& path, double* out) {
  if (j.is_number()) {
    *out = j.get<double>();
    return ok_status();
  }
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s == "nan")
      *out = std::numeric_limits<double>::quiet_NaN();
    else if (s == "inf")
      *out = std::numeric_limits<double>::infinity();
    else if (s == "-inf")
      *out = -std::numeric_limits<double>::infinity();
    else
      return field_error(path, "=\"" + s + "\" is not a number");
    return ok_status();
  }
  return field_error(path, std::string("must be a number, is ") + json_type_name(j));
}

// Reads a required member with `read`, or fails naming it as missing.
template <typename T, typename Reader>
Status read_required(const Json& obj, const std::string& prefix, const char* name, T* out,
                     Reader read) {
  const Json* j = member(obj, name);
  if (j == nullptr) return field_error(prefix + name, "is missing");
  return read(*j, prefix + name, out);
}

template <typename T, typename Reader>
Status read_optional(const Json& obj, const std::string& prefix, const char* name, T* out,
                     Reader read) {
  const Json* j = member(obj, name);
  if (j == nullptr) return ok_status();
  return read(*j, prefix + name, out);
}

Status read_config(const Json& j, const std::string& path, EngineConfig* out) {
  if (!j.is_object())
    return field_error(path, std::string("must be an object, is ") + json_type_name(j));
  EngineConfig config;
  CONVPLAN_RETURN_IF_ERROR(
      read_required(j, path + ".", "engine_id", &config.engine_id, read_int64));
  const Json* knobs = member(j, "knobs");
  if (knobs != nullptr) {
    if (!knobs->is_array()) return field_error(path + ".knobs", "must be an array");
    for (size_t i = 0; i < knobs->size(); ++i) {
      const Json& k = (*knobs)[i];
      std::string kpath = path + ".knobs[" + std::to_string(i) + "]";
      if (!k.is_object()) return field_error(kpath, "must be an object");
      KnobChoice choice;
      CONVPLAN_RETURN_IF_ERROR(read_required(k, kpath + ".", "type", &choice.type, read_int64));
      CONVPLAN_RETURN_IF_ERROR(read_required(k, kpath + ".", "value", &choice.value, read_int64));
      // The EngineConfig contract: sorted by type, one entry per type.
      if (!config.knobs.empty() && choice.type <= config.knobs.back().type)
        return field_error(kpath + ".type",
                           "=" + std::to_string(choice.type) + " is repeated or out of order");
      config.knobs.push_back(choice);
    }
  }
  const Json* rewrite = member(j, "rewrite");
  if (rewrite != nullptr) {
    CONVPLAN_RETURN_IF_ERROR(read_string(*rewrite, path + ".rewrite", &config.rewrite));
    if (!is_rewrite_name(config.rewrite))
      return field_error(
          path + ".rewrite",
          "=\"" + config.rewrite + "\" is not a rewrite name (lower-case letters and digits)");
  }
  const Json* unfused = member(j, "unfused");
  if (unfused != nullptr) {
    if (!unfused->is_boolean()) {
      return field_error(path + ".unfused",
                         std::string("must be true or false, is ") + json_type_name(*unfused));
    }
    config.unfused = unfused->get<bool>();
  }
  const Json* text = member(j, "text");
  if (text != nullptr) {
    std::string t;
    CONVPLAN_RETURN_IF_ERROR(read_string(*text, path + ".text", &t));
    std::string expected = config.to_string();
    if (t != expected)
      return field_error(path + ".text",
                         "=\"" + t + "\" does not match rewrite, engine_id, knobs and unfused (\"" +
                             expected + "\")");
  }
  *out = std::move(config);
  return ok_status();
}

Status read_candidate(const Json& j, const std::string& path, CandidateResult* out) {
  if (!j.is_object())
    return field_error(path, std::string("must be an object, is ") + json_type_name(j));
  const std::string p = path + ".";
  CandidateResult c;
  CONVPLAN_RETURN_IF_ERROR(read_required(j, p, "config", &c.config, read_config));
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, p, "notes", &c.notes, read_notes));
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, p, "rank", &c.rank, read_int));
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, p, "workspace_bytes", &c.workspace_bytes, read_int64));
  const Json* times = member(j, "times_ms");
  if (times != nullptr) {
    if (!times->is_array()) return field_error(p + "times_ms", "must be an array");
    for (size_t i = 0; i < times->size(); ++i) {
      double t = 0;
      CONVPLAN_RETURN_IF_ERROR(
          read_double((*times)[i], p + "times_ms[" + std::to_string(i) + "]", &t));
      c.times_ms.push_back(static_cast<float>(t));
    }
  }
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, p, "median_ms", &c.median_ms, read_double));
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, p, "relative_error", &c.relative_error, read_double));
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, p, "outcome", &c.outcome, read_string));
  *out = std::move(c);
  return ok_status();
}

Status read_key_part(const Json& obj, const char* name, std::string* out) {
  CONVPLAN_RETURN_IF_ERROR(read_required(obj, "", name, out, read_string));
  if (out->empty()) return field_error(name, "is empty");
  return ok_status();
}

StatusOr<TuningRecord> record_from_json_value(const Json& j) {
  if (!j.is_object())
    return corrupt_data(std::string("tuning record: must be a JSON object, is ") +
                        json_type_name(j));
  TuningRecord r;
  CONVPLAN_RETURN_IF_ERROR(read_key_part(j, "device_model", &r.device_model));
  CONVPLAN_RETURN_IF_ERROR(read_key_part(j, "problem", &r.problem));
  CONVPLAN_RETURN_IF_ERROR(read_key_part(j, "policy", &r.policy));
  CONVPLAN_RETURN_IF_ERROR(read_key_part(j, "convplan_version", &r.convplan_version));
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, "", "tuner_format", &r.tuner_format, read_int));
  if (r.tuner_format < 1)
    return field_error("tuner_format", "=" + std::to_string(r.tuner_format) + " must be >= 1");
  CONVPLAN_RETURN_IF_ERROR(read_required(j, "", "config", &r.config, read_config));
  CONVPLAN_RETURN_IF_ERROR(read_required(j, "", "notes", &r.notes, read_notes));
  CONVPLAN_RETURN_IF_ERROR(read_required(j, "", "time_ms", &r.time_ms, read_double));
  CONVPLAN_RETURN_IF_ERROR(read_required(j, "", "workspace_bytes", &r.workspace_bytes, read_int64));
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, "", "plan_json", &r.plan_json, read_string));
  CONVPLAN_RETURN_IF_ERROR(read_required(j, "", "tuned_at_unix", &r.tuned_at_unix, read_int64));
  CONVPLAN_RETURN_IF_ERROR(read_optional(j, "", "tuning_ms", &r.tuning_ms, read_double));
  const Json* candidates = member(j, "candidates");
  if (candidates != nullptr) {
    if (!candidates->is_array()) return field_error("candidates", "must be an array");
    r.candidates.resize(candidates->size());
    for (size_t i = 0; i < candidates->size(); ++i) {
      CONVPLAN_RETURN_IF_ERROR(read_candidate(
          (*candidates)[i], "candidates[" + std::to_string(i) + "]", &r.candidates[i]));
    }
  }
  return r;
}

}  // namespace

std::string to_json(const TuningRecord& record) {
  try {
    Json candidates = Json::array();
    for (const CandidateResult& c : record.candidates) candidates.push_back(candidate_to_json(c));
    Json j = {{"device_model", record.device_model},
              {"problem", record.problem},
              {"policy", record.policy},
              {"convplan_version", record.convplan_version},
              {"config", config_to_json(record.config)},
              {"notes", record.notes},
              {"time_ms", number_to_json(record.time_ms)},
              {"workspace_bytes", record.workspace_bytes},
              {"plan_json", record.plan_json},
              {"tuned_at_unix", record.tuned_at_unix},
              {"tuning_ms", number_to_json(record.tuning_ms)},
              {"candidates", std::move(candidates)}};
    // Invalid UTF-8 in a string is replaced (U+FFFD) rather than thrown on: this function cannot
    // fail, and a record whose key changes that way is refused by TuningDatabase::put.
    // Written only when not 1, so that format-1 records stay byte for byte as before.
    if (record.tuner_format != 1) j["tuner_format"] = record.tuner_format;
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
  } catch (const std::exception&) {
    // Only allocation failure can reach here; an empty string never parses as a record.
    return std::string();
  }
}

StatusOr<TuningRecord> tuning_record_from_json(std::string_view json) {
  // A record is a few KB (its plan_json included); the limits keep a hostile one from costing
  // more than that, or recursion depth (docs/bad-inputs.md).
  constexpr int64_t kMaxRecordBytes = int64_t{4} << 20;
  if (Status s = check_json_limits(json, "tuning record", kMaxRecordBytes); !s.ok()) {
    return corrupt_data(s.message());
  }
  try {
    return record_from_json_value(Json::parse(json.begin(), json.end()));
  } catch (const Json::parse_error& e) {
    return corrupt_data(std::string("tuning record: not valid JSON: ") + e.what());
  } catch (const std::exception& e) {
    return corrupt_data(std::string("tuning record: ") + e.what());
  }
}

}  // namespace convplan
