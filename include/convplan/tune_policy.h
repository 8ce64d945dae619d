// TunePolicy: how the autotuner chooses an engine configuration for a problem: the mode, the
// filters, the workspace limit, timing and validation settings.
//
// A plain value type. from_environment() reads the CONVPLAN_* variables; the API wins over the
// environment simply by setting fields after reading it. Thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "convplan/device.h"
#include "convplan/engine_config.h"
#include "convplan/export.h"
#include "convplan/problem.h"
#include "convplan/record_key.h"
#include "convplan/status.h"

namespace convplan {

enum class TuneMode {
  kHeuristic,  // the first candidate that passes the filters; no timing
  // The default: time the heuristics' first candidates within the workspace limit (the first 8
  // of mode A's list, then of mode B's when A's best takes 0.1 ms or more, and past them each
  // precompiled engine's first configuration; of a rewrite's candidates, or the problem's own,
  // the rest after the first only when it came within 2x of the best; the others only when none
  // of those passes).
  kLimited,
  // Every engine index, then the knob combinations of those whose best configuration is within
  // 1.5x of the best of the others (the heuristics' and every engine's default); those of engines
  // compiled at run time stop after a wave of four that did not improve. Within budget_ms.
  kExhaustive,
  // For servers (PlanCache): the first call of a key gets the heuristic's first candidate that
  // passes validation at once, while the key is tuned in limited mode on a thread and handle of
  // the cache's own; later calls get the tuned plan. Its records are limited mode's (same key).
  kBackground,
};
CONVPLAN_EXPORT const char* to_string(
    TuneMode m);  // "heuristic", "limited", "exhaustive", "background"
CONVPLAN_EXPORT StatusOr<TuneMode> parse_tune_mode(std::string_view s);

// One disabled engine: every configuration of engine_id, or only those whose knobs include all
// of `knobs`. Text: "5" or "5:k3=1,k10=0"; lists are comma-free between entries: "5;7:k3=1;12".
struct CONVPLAN_EXPORT EngineRule {
  int64_t engine_id = -1;
  std::vector<KnobChoice> knobs;
  bool matches(const EngineConfig& config) const;
  bool operator==(const EngineRule&) const = default;
};
// Parses "5;7:k3=1;12" (';' or whitespace between rules). Errors name the offending rule and its
// position; an empty string gives an empty list.
CONVPLAN_EXPORT StatusOr<std::vector<EngineRule>> parse_engine_rules(std::string_view text);

// A rule of a rules file in the spirit of cudnn-frontend's errata filter: a candidate is dropped
// when every given field matches. JSON: {"rules":[{"id":"...","direction":"fwd",
// "data_type":"bf16","engine":5,"knobs":{"3":1},"shape":{"c":[1,64],"k":[64,null]}}]}
// "rewrite" matches candidates of a rewritten problem (convplan/rewrite.h): "s2d2" that rewrite,
// "*" every rewrite, "" only the problem itself; {"id":"no-s2d","rewrite":"s2d2"} disables s2d2
// for every engine. A disabled-engine rule ("5") matches engine 5 with or without a rewrite.
struct CONVPLAN_EXPORT ErrataRule {
  std::string id;  // for messages
  std::optional<Direction> direction;
  std::optional<DataType> data_type;
  int64_t engine_id = -1;              // -1: any
  std::vector<KnobChoice> knobs;       // all must match
  std::optional<std::string> rewrite;  // a name, "*" (any rewrite) or "" (none); unset: any
  // Inclusive ranges over the problem's fields (n, c, k, groups, and the spatial sizes
  // input0.., filter0.., stride0.., dilation0..): name, min, max (-1 = unbounded).
  struct Range {
    std::string field;
    int64_t min = -1;
    int64_t max = -1;
    bool operator==(const Range&) const = default;
  };
  std::vector<Range> ranges;
  bool matches(const ConvProblem& problem, const EngineConfig& config) const;
  bool operator==(const ErrataRule&) const = default;
};
// Errors name the file (or "<text>"), the rule's index and the field.
CONVPLAN_EXPORT StatusOr<std::vector<ErrataRule>> parse_errata_rules(std::string_view json_text,
                                                                     std::string_view source_name);
// Reads a rules file: kIoError when it cannot be opened or read; kInvalidArgument when it is not
// a regular file (a FIFO, a device) or is larger than max_input_bytes() (input_limits.h).
CONVPLAN_EXPORT StatusOr<std::vector<ErrataRule>> load_errata_file(const std::string& path);
// Candidates that faulted or never finished on the GPU when convplan ran them: a kernel fault is a
// sticky CUDA error, and a kernel that never finishes holds the device, so that nothing more can
// run on it in that process; the tuner never runs these (as it never runs what
// CONVPLAN_ERRATA_FILE names). Each rule's id names what was seen.
CONVPLAN_EXPORT const std::vector<ErrataRule>& known_fault_rules();

struct CONVPLAN_EXPORT TunePolicy {
  TuneMode mode = TuneMode::kLimited;
  std::vector<EngineRule> disabled_fwd;         // CONVPLAN_DISABLED_FWD_ENGINES
  std::vector<EngineRule> disabled_bwd_data;    // CONVPLAN_DISABLED_BWD_DATA_ENGINES
  std::vector<EngineRule> disabled_bwd_filter;  // CONVPLAN_DISABLED_BWD_FILTER_ENGINES
  std::vector<ErrataRule> errata;               // CONVPLAN_ERRATA_FILE (a path to JSON)
  NoteSet forbidden_notes = 0;                  // CONVPLAN_FORBIDDEN_NOTES ("fft,winograd")
  bool deterministic = false;             // CONVPLAN_DETERMINISTIC: forbids kNoteNonDeterministic
  bool allow_runtime_compilation = true;  // CONVPLAN_ALLOW_RUNTIME_COMPILATION
  int64_t workspace_limit = int64_t{4} << 30;  // bytes; CONVPLAN_WORKSPACE_LIMIT
  double budget_ms = 10000;                    // exhaustive: per problem; CONVPLAN_TUNE_BUDGET_MS
  int warmup_runs = 1;
  int timed_runs = 5;    // median of these
  bool validate = true;  // compare candidates' outputs with a reference
  // CONVPLAN_VERBOSE: 0, 1, 2 or 3 (3: each candidate as it starts, each compilation's time).
  int verbose = 0;
  // Threads that compile runtime-compiled candidates at once, each on a cuDNN handle of its own
  // (0: min(4, hardware threads); 1: one after another on the tune's handle). Changes the tuning
  // time only, never the choice. CONVPLAN_COMPILE_THREADS (0..64).
  int compile_threads = 0;
  // Candidates of rewritten problems (convplan/rewrite.h) may be chosen; CONVPLAN_REWRITES=off.
  bool rewrites = true;

  const std::vector<EngineRule>& disabled_for(Direction d) const;

  // Reads the variables of kTunePolicyVariables over `base`. A malformed variable is
  // kInvalidArgument naming the variable, its value and the offending part.
  static StatusOr<TunePolicy> from_environment(const TunePolicy& base);
  static StatusOr<TunePolicy> from_environment();  // over the defaults

  // The fields that can change the chosen configuration, canonically, for the cache and
  // database keys (not verbose, not timing repetitions).
  std::string key() const;
  bool operator==(const TunePolicy&) const = default;
};

// Every environment variable TunePolicy::from_environment() reads (tests clear them; the fuzzer
// sets each to its input).
inline constexpr const char* kTunePolicyVariables[] = {"CONVPLAN_TUNE",
                                                       "CONVPLAN_DISABLED_FWD_ENGINES",
                                                       "CONVPLAN_DISABLED_BWD_DATA_ENGINES",
                                                       "CONVPLAN_DISABLED_BWD_FILTER_ENGINES",
                                                       "CONVPLAN_ERRATA_FILE",
                                                       "CONVPLAN_FORBIDDEN_NOTES",
                                                       "CONVPLAN_DETERMINISTIC",
                                                       "CONVPLAN_ALLOW_RUNTIME_COMPILATION",
                                                       "CONVPLAN_WORKSPACE_LIMIT",
                                                       "CONVPLAN_TUNE_BUDGET_MS",
                                                       "CONVPLAN_REWRITES",
                                                       "CONVPLAN_VERBOSE",
                                                       "CONVPLAN_COMPILE_THREADS"};

// The key of `problem` tuned on `device` under `policy` by this library.
CONVPLAN_EXPORT RecordKey record_key(const DeviceInfo& device, const ConvProblem& problem,
                                     const TunePolicy& policy);

}  // namespace convplan
