// TunePolicy: tune modes, engine rules, errata rules, the CONVPLAN_* environment variables and
// the policy's canonical key.
//
// Text forms accepted here:
//   engine rules   "5;7:k3=1,k10=0;12"  (';' or whitespace between rules, ',' between knobs)
//   booleans       0, 1, true, false (any case)
//   byte sizes     "1048576", "512K", "64M", "4G" (powers of 1024; "KB"/"KiB" spellings too)
//   errata files   JSON, see tune_policy.h; every field is checked, unknown ones are errors.
#include "convplan/tune_policy.h"

#include "convplan/environment.h"
#include "convplan/input_limits.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

namespace convplan {
namespace {

using Json = nlohmann::json;

bool is_rule_separator(char ch) {
  return ch == ';' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

// A whole-string decimal int64; false when `s` is not exactly one.
bool parse_int(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// One rule's text, e.g. "7:k3=1,k10=0". `what` receives the reason on failure.
bool parse_one_rule(std::string_view text, EngineRule& rule, std::string& what) {
  const size_t colon = text.find(':');
  const std::string_view id = text.substr(0, colon);
  if (!parse_int(id, rule.engine_id) || rule.engine_id < 0) {
    what = "not an engine index";
    if (!id.empty() && parse_int(id, rule.engine_id)) what = "engine index must be >= 0";
    return false;
  }
  if (colon == std::string_view::npos) return true;
  std::string_view rest = text.substr(colon + 1);
  if (rest.empty()) {
    what = "':' must be followed by knob choices k<type>=<value>";
    return false;
  }
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t eq = item.find('=');
    KnobChoice knob;
    if (item.size() < 2 || item[0] != 'k' || eq == std::string_view::npos ||
        !parse_int(item.substr(1, eq - 1), knob.type) ||
        !parse_int(item.substr(eq + 1), knob.value)) {
      what = "'" + std::string(item) + "' is not a knob choice k<type>=<value>";
      return false;
    }
    rule.knobs.push_back(knob);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  std::sort(rule.knobs.begin(), rule.knobs.end());
  for (size_t i = 1; i < rule.knobs.size(); ++i) {
    if (rule.knobs[i].type == rule.knobs[i - 1].type) {
      what = "knob type " + std::to_string(rule.knobs[i].type) + " is repeated";
      return false;
    }
  }
  return true;
}

bool knobs_include(const std::vector<KnobChoice>& have, const std::vector<KnobChoice>& wanted) {
  for (const KnobChoice& w : wanted) {
    if (std::find(have.begin(), have.end(), w) == have.end()) return false;
  }
  return true;
}

std::string rule_text(const EngineRule& r) {
  std::string s = std::to_string(r.engine_id);
  for (size_t i = 0; i < r.knobs.size(); ++i) {
    s += i == 0 ? ':' : ',';
    s += 'k' + std::to_string(r.knobs[i].type) + '=' + std::to_string(r.knobs[i].value);
  }
  return s;
}

// ---- Errata rules ----

// The value of a range field of `p`, or false for an unknown field name.
bool problem_field(const ConvProblem& p, std::string_view field, int64_t& out) {
  if (field == "n") return out = p.n, true;
  if (field == "c") return out = p.c, true;
  if (field == "k") return out = p.k, true;
  if (field == "groups") return out = p.groups, true;
  struct Spatial {
    const char* prefix;
    const SpatialDims ConvProblem::*dims;
  };
  static constexpr Spatial kSpatial[] = {{"input", &ConvProblem::input},
                                         {"filter", &ConvProblem::filter},
                                         {"stride", &ConvProblem::stride},
                                         {"dilation", &ConvProblem::dilation}};
  for (const Spatial& s : kSpatial) {
    const std::string_view prefix = s.prefix;
    if (field.size() == prefix.size() + 1 && field.substr(0, prefix.size()) == prefix) {
      const char d = field.back();
      if (d < '0' || d >= '0' + kMaxSpatialDims) return false;
      out = (p.*(s.dims))[static_cast<size_t>(d - '0')];
      return true;
    }
  }
  return false;
}

Status errata_error(std::string_view source, size_t index, const std::string& field,
                    const std::string& what) {
  std::string m = "errata " + std::string(source) + ": rule " + std::to_string(index);
  if (!field.empty()) m += " field '" + field + "'";
  return invalid_argument(m + ": " + what);
}

// A knob type from an errata "knobs" key: a number ("3") or a cuDNN knob name ("SPLIT_K").
bool knob_type_from_key(const std::string& key, int64_t& type) {
  if (parse_int(key, type)) return type >= 0;
  for (int64_t t = 0; t < 64; ++t) {
    if (knob_type_name(t) == key) return type = t, true;
  }
  return false;
}

StatusOr<ErrataRule> errata_rule_from_json(const Json& j, std::string_view source, size_t index) {
  if (!j.is_object()) return errata_error(source, index, "", "must be a JSON object");
  ErrataRule rule;
  rule.id = "#" + std::to_string(index);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "id") {
      if (!v.is_string()) return errata_error(source, index, name, "must be a string");
      rule.id = v.get<std::string>();
    } else if (name == "direction") {
      if (!v.is_string()) return errata_error(source, index, name, "must be a string");
      auto d = parse_direction(v.get<std::string>());
      if (!d.ok()) return errata_error(source, index, name, d.status().message());
      rule.direction = *d;
    } else if (name == "data_type") {
      if (!v.is_string()) return errata_error(source, index, name, "must be a string");
      auto t = parse_data_type(v.get<std::string>());
      if (!t.ok()) return errata_error(source, index, name, t.status().message());
      rule.data_type = *t;
    } else if (name == "engine") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return errata_error(source, index, name, "must be an engine index >= 0, got " + v.dump());
      }
      rule.engine_id = v.get<int64_t>();
    } else if (name == "knobs") {
      if (!v.is_object()) return errata_error(source, index, name, "must be an object {\"3\": 1}");
      for (auto k = v.begin(); k != v.end(); ++k) {
        KnobChoice choice;
        if (!knob_type_from_key(k.key(), choice.type)) {
          return errata_error(source, index, "knobs." + k.key(),
                              "not a knob type (a number or a name such as SPLIT_K)");
        }
        if (!k.value().is_number_integer()) {
          return errata_error(source, index, "knobs." + k.key(),
                              "value must be an integer, got " + k.value().dump());
        }
        choice.value = k.value().get<int64_t>();
        for (const KnobChoice& seen : rule.knobs) {
          if (seen.type == choice.type) {
            return errata_error(source, index, "knobs." + k.key(), "knob type repeated");
          }
        }
        rule.knobs.push_back(choice);
      }
      std::sort(rule.knobs.begin(), rule.knobs.end());
    } else if (name == "rewrite") {
      // "s2d2": that rewrite; "*": every rewrite; "": the problem itself (no rewrite).
      if (!v.is_string()) return errata_error(source, index, name, "must be a string");
      const std::string rw = v.get<std::string>();
      if (!rw.empty() && rw != "*" && !is_rewrite_name(rw)) {
        return errata_error(source, index, name,
                            "'" + rw + "' is not a rewrite name (e.g. s2d2), \"*\" or \"\"");
      }
      rule.rewrite = rw;
    } else if (name == "shape") {
      if (!v.is_object()) return errata_error(source, index, name, "must be an object");
      for (auto f = v.begin(); f != v.end(); ++f) {
        const std::string field = "shape." + f.key();
        int64_t dummy = 0;
        if (!problem_field(ConvProblem{}, f.key(), dummy)) {
          return errata_error(source, index, field,
                              "unknown shape field (n, c, k, groups, input0-2, filter0-2, "
                              "stride0-2, dilation0-2)");
        }
        ErrataRule::Range range;
        range.field = f.key();
        const Json& r = f.value();
        if (r.is_number_integer()) {
          range.min = range.max = r.get<int64_t>();
        } else if (r.is_array() && r.size() == 2) {
          int64_t* ends[2] = {&range.min, &range.max};
          for (size_t e = 0; e < 2; ++e) {
            if (r[e].is_null()) continue;
            if (!r[e].is_number_integer() || r[e].get<int64_t>() < 0) {
              return errata_error(source, index, field,
                                  "bounds must be integers >= 0 or null, got " + r.dump());
            }
            *ends[e] = r[e].get<int64_t>();
          }
          if (range.min >= 0 && range.max >= 0 && range.min > range.max) {
            return errata_error(source, index, field, "min > max in " + r.dump());
          }
        } else {
          return errata_error(
              source, index, field,
              "must be an integer or [min, max] (null: unbounded), got " + r.dump());
        }
        rule.ranges.push_back(range);
      }
    } else {
      return errata_error(source, index, name,
                          "unknown field (id, direction, data_type, engine, knobs, shape)");
    }
  }
  return rule;
}

std::string errata_text(const ErrataRule& r) {
  // The content only: the id is a label for messages and does not change what is dropped.
  std::string s = "{";
  if (r.direction) s += std::string("dir=") + to_string(*r.direction) + ",";
  if (r.data_type) s += std::string("dt=") + to_string(*r.data_type) + ",";
  if (r.engine_id >= 0) s += "eng=" + std::to_string(r.engine_id) + ",";
  if (r.rewrite) s += "rw=" + *r.rewrite + ",";
  for (const KnobChoice& k : r.knobs) {
    s += 'k' + std::to_string(k.type) + '=' + std::to_string(k.value) + ',';
  }
  for (const ErrataRule::Range& range : r.ranges) {
    s += range.field + "=[" + std::to_string(range.min) + "," + std::to_string(range.max) + "],";
  }
  if (s.back() == ',') s.pop_back();
  return s + "}";
}

// ---- Environment ----

Status env_error(const char* var, std::string_view value, const std::string& what) {
  return invalid_argument(std::string(var) + "='" + std::string(value) + "': " + what);
}

StatusOr<bool> parse_bool(const char* var, std::string_view value) {
  return parse_bool_value(var, value);
}

const char* get_env(const char* var) { return std::getenv(var); }

}  // namespace

const char* to_string(TuneMode m) {
  switch (m) {
    case TuneMode::kHeuristic: return "heuristic";
    case TuneMode::kLimited: return "limited";
    case TuneMode::kExhaustive: return "exhaustive";
    case TuneMode::kBackground: return "background";
  }
  return "?";
}

StatusOr<TuneMode> parse_tune_mode(std::string_view s) {
  const std::string v = lower(s);
  if (v == "heuristic") return TuneMode::kHeuristic;
  if (v == "limited") return TuneMode::kLimited;
  if (v == "exhaustive") return TuneMode::kExhaustive;
  if (v == "background") return TuneMode::kBackground;
  return invalid_argument("tune mode '" + std::string(s) +
                          "' is not one of heuristic, limited, exhaustive, background");
}

bool EngineRule::matches(const EngineConfig& config) const {
  return config.engine_id == engine_id && knobs_include(config.knobs, knobs);
}

StatusOr<std::vector<EngineRule>> parse_engine_rules(std::string_view text) {
  std::vector<EngineRule> rules;
  size_t pos = 0;
  while (pos < text.size()) {
    if (is_rule_separator(text[pos])) {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && !is_rule_separator(text[end])) ++end;
    const std::string_view item = text.substr(pos, end - pos);
    EngineRule rule;
    std::string what;
    if (!parse_one_rule(item, rule, what)) {
      return invalid_argument("at " + std::to_string(pos) + " ('" + std::string(item) +
                              "'): " + what);
    }
    rules.push_back(std::move(rule));
    pos = end;
  }
  return rules;
}

bool ErrataRule::matches(const ConvProblem& problem, const EngineConfig& config) const {
  if (direction && *direction != problem.direction) return false;
  if (data_type && *data_type != problem.data_type) return false;
  if (engine_id >= 0 && engine_id != config.engine_id) return false;
  if (rewrite && !(*rewrite == "*" ? !config.rewrite.empty() : *rewrite == config.rewrite))
    return false;
  if (!knobs_include(config.knobs, knobs)) return false;
  for (const Range& r : ranges) {
    int64_t v = 0;
    if (!problem_field(problem, r.field, v)) return false;  // not parsed from a file: no match
    if (r.min >= 0 && v < r.min) return false;
    if (r.max >= 0 && v > r.max) return false;
  }
  return true;
}

StatusOr<std::vector<ErrataRule>> parse_errata_rules(std::string_view json_text,
                                                     std::string_view source_name) {
  CONVPLAN_ASSIGN_OR_RETURN(int64_t max_bytes, max_input_bytes());
  CONVPLAN_RETURN_IF_ERROR(
      check_json_limits(json_text, "errata " + std::string(source_name), max_bytes));
  Json doc;
  try {
    doc = Json::parse(json_text);
  } catch (const std::exception& e) {
    return invalid_argument("errata " + std::string(source_name) + ": not JSON: " + e.what());
  }
  if (!doc.is_object()) {
    return invalid_argument("errata " + std::string(source_name) +
                            ": must be an object {\"rules\": [...]}");
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() != "rules") {
      return invalid_argument("errata " + std::string(source_name) + ": unknown top-level field '" +
                              it.key() + "' (only \"rules\")");
    }
  }
  auto rules_it = doc.find("rules");
  if (rules_it == doc.end() || !rules_it->is_array()) {
    return invalid_argument("errata " + std::string(source_name) +
                            ": field 'rules' must be an array");
  }
  std::vector<ErrataRule> rules;
  for (size_t i = 0; i < rules_it->size(); ++i) {
    // No exception can come from here: every access is type-checked first.
    CONVPLAN_ASSIGN_OR_RETURN(ErrataRule rule,
                              errata_rule_from_json((*rules_it)[i], source_name, i));
    rules.push_back(std::move(rule));
  }
  return rules;
}

const std::vector<ErrataRule>& known_fault_rules() {
  static const std::vector<ErrataRule>* const rules = [] {
    // cuDNN 9.19.0 on an H100: the exhaustive tune of the 3-D U-Net's first convolution (bf16,
    // channels-last, 4 input channels) ran engine 71 (compiled at run time), whose first run
    // failed with cudaErrorMisalignedAddress, and every later CUDA call of the process with it
    // (2026-12-07, issue 21). Seen once, on that problem; matched wider (any type and rank,
    // 1-7 channels) since no other was tried. Its rewritten candidates pad the channels to 32
    // and are not matched.
    ErrataRule eng71;
    eng71.id = "cudnn-9.19-eng71-fwd-few-channels-misaligned-address";
    eng71.direction = Direction::kForward;
    eng71.engine_id = 71;
    eng71.rewrite = "";
    eng71.ranges = {{"c", 1, 7}};
    // With that rule in place, the U-Net's exhaustive tune faulted the same way on its last layer,
    // the 1x1x1 head of 32 input and 4 output channels (2026-12-07, no log of which candidate ran).
    // Engine 71 with few output channels is the likely twin (bf16 rows of 4 channels are 8 bytes,
    // under the 16 a vectorized access needs); not confirmed on a GPU.
    ErrataRule eng71_out = eng71;
    eng71_out.id = "cudnn-9.19-eng71-fwd-few-output-channels-misaligned-address";
    eng71_out.ranges = {{"k", 1, 7}};
    // The same cuDNN and GPU, exhaustive tunes of ResNet-50's backward directions at batch 256
    // (2026-12-07, issue 21). Engine 77 (compiled at run time) on backward-data: kernels that never
    // finished (the GPU at 100% for minutes, no error), its split-K configuration k17=9 on
    // layer1.0.conv1 and its default one on other 1x1 layers; the tune waited forever. No
    // backward-data choice in bench/results was engine 77, so every configuration on every
    // problem is left out.
    ErrataRule eng77;
    eng77.id = "cudnn-9.19-eng77-bwd-data-never-finishes";
    eng77.direction = Direction::kBackwardData;
    eng77.engine_id = 77;
    // Engine 1 on the stem's backward-filter rewritten by s2d2 (12 channels, 4x4 filter):
    // cudaErrorIllegalAddress, in both runs that reached it; the rest of the process's tunes failed
    // with it. Later the same on s2d2c8 (16 channels) in one serial run of three, while engine 1
    // ran the rewritten shape as a plain problem (4.9 ms). Intermittent, so every rewrite is left
    // out: engine 1 ran the rewritten stems in 8.6 ms against the winners' 0.56.
    ErrataRule eng1;
    eng1.id = "cudnn-9.19-eng1-bwd-filter-rewritten-illegal-address";
    eng1.direction = Direction::kBackwardFilter;
    eng1.engine_id = 1;
    eng1.rewrite = "*";
    std::vector<ErrataRule> all{eng71, eng71_out, eng77, eng1};
    // Engine 69 (compiled at run time) on backward-filter with split-K slices (knob 17,
    // SPLIT_K_SLC, at the values 9, 17 and 26 its knob combinations take), the same cuDNN and GPU
    // (2026-12-07, issue 21). Inferred, not seen by name: in three exhaustive ResNet-50 runs (b32
    // twice, b256) where a change of the tuner first let these combinations into a compile wave
    // beside engine 69's default, a stuck problem's wave reported engines 69, 70 and 74, and its
    // fourth candidate (by rank order engine 69 with k17=9) started and never finished; no run
    // finished. No run before had built them on a layer that engine 69 supports, none finished a
    // timed run in any log, and engine 77 hung on backward-data with the same choice (k17=9,
    // k24=0, above). Engine 69 was never a backward-filter choice in bench/results.
    for (int64_t slices : {9, 17, 26}) {
      ErrataRule eng69;
      eng69.id = "cudnn-9.19-eng69-bwd-filter-split-k-never-finishes";
      eng69.direction = Direction::kBackwardFilter;
      eng69.engine_id = 69;
      eng69.knobs = {{17, slices}};
      all.push_back(std::move(eng69));
    }
    return new std::vector<ErrataRule>(std::move(all));
  }();
  return *rules;
}

StatusOr<std::vector<ErrataRule>> load_errata_file(const std::string& path) {
  CONVPLAN_ASSIGN_OR_RETURN(int64_t max_bytes, max_input_bytes());
  StatusOr<std::string> text = read_input_file(path, "errata file", max_bytes);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) {
    return Status(StatusCode::kIoError, text.status().message());  // as load_errata_file says
  }
  if (!text.ok()) return text.status();
  return parse_errata_rules(*text, "'" + path + "'");
}

const std::vector<EngineRule>& TunePolicy::disabled_for(Direction d) const {
  switch (d) {
    case Direction::kForward: return disabled_fwd;
    case Direction::kBackwardData: return disabled_bwd_data;
    case Direction::kBackwardFilter: return disabled_bwd_filter;
  }
  return disabled_fwd;
}

StatusOr<TunePolicy> TunePolicy::from_environment() { return from_environment(TunePolicy{}); }

StatusOr<TunePolicy> TunePolicy::from_environment(const TunePolicy& base) {
  TunePolicy p = base;
  if (const char* v = get_env("CONVPLAN_TUNE")) {
    auto m = parse_tune_mode(v);
    if (!m.ok())
      return env_error("CONVPLAN_TUNE", v, "not one of heuristic, limited, exhaustive, background");
    p.mode = *m;
  }
  struct RuleVar {
    const char* name;
    std::vector<EngineRule>* rules;
  };
  const RuleVar rule_vars[] = {{"CONVPLAN_DISABLED_FWD_ENGINES", &p.disabled_fwd},
                               {"CONVPLAN_DISABLED_BWD_DATA_ENGINES", &p.disabled_bwd_data},
                               {"CONVPLAN_DISABLED_BWD_FILTER_ENGINES", &p.disabled_bwd_filter}};
  for (const RuleVar& rv : rule_vars) {
    if (const char* v = get_env(rv.name)) {
      auto rules = parse_engine_rules(v);
      if (!rules.ok()) return env_error(rv.name, v, rules.status().message());
      *rv.rules = std::move(rules).value();
    }
  }
  if (const char* v = get_env("CONVPLAN_ERRATA_FILE")) {
    if (*v == '\0')
      return env_error("CONVPLAN_ERRATA_FILE", v, "empty path (unset it for no file)");
    auto rules = load_errata_file(v);
    if (!rules.ok()) return env_error("CONVPLAN_ERRATA_FILE", v, rules.status().message());
    p.errata = std::move(rules).value();
  }
  if (const char* v = get_env("CONVPLAN_FORBIDDEN_NOTES")) {
    auto notes = parse_notes(v);
    if (!notes.ok()) return env_error("CONVPLAN_FORBIDDEN_NOTES", v, notes.status().message());
    p.forbidden_notes = *notes;
  }
  if (const char* v = get_env("CONVPLAN_DETERMINISTIC")) {
    CONVPLAN_ASSIGN_OR_RETURN(p.deterministic, parse_bool("CONVPLAN_DETERMINISTIC", v));
  }
  if (const char* v = get_env("CONVPLAN_ALLOW_RUNTIME_COMPILATION")) {
    CONVPLAN_ASSIGN_OR_RETURN(p.allow_runtime_compilation,
                              parse_bool("CONVPLAN_ALLOW_RUNTIME_COMPILATION", v));
  }
  if (const char* v = get_env("CONVPLAN_WORKSPACE_LIMIT")) {
    CONVPLAN_ASSIGN_OR_RETURN(p.workspace_limit,
                              parse_byte_size_value("CONVPLAN_WORKSPACE_LIMIT", v));
  }
  if (const char* v = get_env("CONVPLAN_TUNE_BUDGET_MS")) {
    CONVPLAN_ASSIGN_OR_RETURN(double ms, parse_number_value("CONVPLAN_TUNE_BUDGET_MS", v, 0, 1e9,
                                                            /*min_exclusive=*/true));
    p.budget_ms = ms;
  }
  if (const char* v = get_env("CONVPLAN_REWRITES")) {
    CONVPLAN_ASSIGN_OR_RETURN(p.rewrites, parse_bool("CONVPLAN_REWRITES", v));
  }
  if (const char* v = get_env("CONVPLAN_VERBOSE")) {
    int64_t level = -1;
    if (!parse_int(v, level) || level < 0 || level > 3) {
      return env_error("CONVPLAN_VERBOSE", v, "must be 0, 1, 2 or 3");
    }
    p.verbose = static_cast<int>(level);
  }
  if (const char* v = get_env("CONVPLAN_COMPILE_THREADS")) {
    int64_t threads = -1;
    if (!parse_int(v, threads) || threads < 0 || threads > 64) {
      return env_error("CONVPLAN_COMPILE_THREADS", v, "must be an integer in 0..64 (0: automatic)");
    }
    p.compile_threads = static_cast<int>(threads);
  }
  return p;
}

RecordKey record_key(const DeviceInfo& device, const ConvProblem& problem,
                     const TunePolicy& policy) {
  RecordKey key;
  key.device_model = device.model_key();
  key.problem = problem;
  key.policy = policy.key();
  return key;
}

std::string TunePolicy::key() const {
  // Rules are a set: sorted and deduplicated text, so "7;5" and "5;7;5" give one key.
  auto rules_key = [](const std::vector<EngineRule>& rules) {
    std::vector<std::string> items;
    for (const EngineRule& r : rules) items.push_back(rule_text(r));
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end()), items.end());
    std::string s;
    for (const std::string& i : items) s += (s.empty() ? "" : ";") + i;
    return s;
  };
  std::vector<std::string> errata_items;
  for (const ErrataRule& r : errata) errata_items.push_back(errata_text(r));
  std::sort(errata_items.begin(), errata_items.end());
  errata_items.erase(std::unique(errata_items.begin(), errata_items.end()), errata_items.end());
  std::string errata_key;
  for (const std::string& i : errata_items) errata_key += i;

  // A background tune ends in limited mode's record: one key, shared with limited-mode callers.
  std::string k =
      std::string("mode=") + to_string(mode == TuneMode::kBackground ? TuneMode::kLimited : mode);
  k += " fwd=[" + rules_key(disabled_fwd) + "]";
  k += " bwd_data=[" + rules_key(disabled_bwd_data) + "]";
  k += " bwd_filter=[" + rules_key(disabled_bwd_filter) + "]";
  k += " errata=[" + errata_key + "]";
  k += " forbid=[" + notes_to_string(forbidden_notes) + "]";
  k += std::string(" det=") + (deterministic ? "1" : "0");
  k += std::string(" rtc=") + (allow_runtime_compilation ? "1" : "0");
  k += " ws=" + std::to_string(workspace_limit);
  if (mode == TuneMode::kExhaustive) {
    std::ostringstream budget;
    budget.imbue(std::locale::classic());
    budget << budget_ms;
    k += " budget_ms=" + budget.str();
  }
  k += std::string(" validate=") + (validate ? "1" : "0");
  // Records tuned before rewrites existed never had rewritten candidates: rw=1 keeps them apart.
  k += std::string(" rw=") + (rewrites ? "1" : "0");
  return k;
}

}  // namespace convplan
