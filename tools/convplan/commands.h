// The convplan commands, each a function from parsed options to an exit status. main.cc parses
// the command line (CLI11) into these structs; the functions print and return an ExitCode.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "convplan/problem.h"
#include "convplan/tune_policy.h"
#include "problem_args.h"

namespace convplan::cli {

// Exit statuses a script can rely on (printed by `convplan --help`).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,       // a runtime failure (tuning, execution, I/O, a damaged database)
  kExitUsage = 2,         // bad command line: unknown flag, malformed descriptor, missing file
  kExitNoGpu = 3,         // the command needs a GPU and there is none usable
  kExitVerifyFailed = 4,  // --verify or `db verify` found wrong results or bad records
};

// Prints "convplan: <message>" to standard error and returns `code`.
int fail(int code, const std::string& message);
// "convplan: warning: <message>" on stderr, unless the log level (--quiet, CONVPLAN_LOG_LEVEL)
// drops warnings.
void warn(const std::string& message);
// kExitNoGpu for kNoDevice, kExitFailure for any other error, kExitOk for ok; for
// kDeadlineExceeded it does not return (exit_now_if_device_stuck).
int exit_code_for(const Status& s);
// Reads and checks every CONVPLAN_* variable (the tuning policy, the input size limit, the
// database's), so that a bad value is a usage error before anything else happens.
Status check_configuration();
// kExitOk when a GPU is usable; otherwise prints why and returns kExitNoGpu.
int gpu_missing();
// --tune: nullopt when not given. REQUIRES: checked by the CLI's validator.
std::optional<TuneMode> tune_mode_flag(const std::string& s);

struct GlobalOptions {
  std::string db_path;  // --db, else TuningDatabase::default_path()
  int verbose = 0;      // -v, repeatable
};

// The flags run, engines and bench share.
struct ProblemFlags {
  std::string direction, data_type, layout;  // "" when not given
  std::optional<int64_t> batch;
  // The flags as overrides. REQUIRES: the strings were checked by the CLI's validators.
  ProblemOverrides overrides() const;
};

struct TimingFlags {
  int gpu = 0;
  std::string tune;  // "" when not given: CONVPLAN_TUNE, else limited
  int iters = 20;
  int warmup = 3;
  bool flush_l2 = false;
  std::optional<double> peak_tflops;
  std::optional<double> peak_gbps;
};

class Session;  // gpu.h
// Checks for a GPU and opens the session that the flags ask for. On failure prints why, sets
// *exit_code (kExitNoGpu; kExitUsage for a malformed CONVPLAN_* variable; else by the status)
// and returns null.
std::unique_ptr<Session> open_session(const GlobalOptions& global, const TimingFlags& timing,
                                      int* exit_code);

struct RunOptions {
  std::string descriptor;
  ProblemFlags problem;
  TimingFlags timing;
  bool verify = false;
  std::string json_path;  // "" none, "-" standard output
};
int run_command(const GlobalOptions& global, const RunOptions& options);

struct EnginesOptions {
  std::string descriptor;
  ProblemFlags problem;
  int gpu = 0;
  std::string json_path;
};
int engines_command(const GlobalOptions& global, const EnginesOptions& options);

struct DevicesOptions {
  std::string json_path;
};
int devices_command(const GlobalOptions& global, const DevicesOptions& options);

struct BenchOptions {
  std::string suite;  // built-in name; "" with file
  std::string file;
  ProblemFlags problem;
  TimingFlags timing;
  bool verify = false;
  bool dry_run = false;  // parse and list; no GPU
  bool list_suites = false;
  int prepare_threads = 0;  // > 0: PlanCache::prepare the suite on that many threads first
  std::string json_path, csv_path;
};
int bench_command(const GlobalOptions& global, const BenchOptions& options);

struct ExplainOptions {
  std::string descriptor;
  ProblemFlags problem;
  double peak_tflops = 989.0;  // the roofline's rates (explain.h's defaults: an H200)
  double peak_gbps = 4800.0;
  std::string json_path;  // "" none, "-" standard output (then no text)
};
int explain_command(const GlobalOptions& global, const ExplainOptions& options);

struct DbOptions {
  std::string action;  // path, list, show, export, import, merge, verify, prune
  std::string key;     // show
  std::string file;    // export (optional), import, merge
  bool json = false;   // list
  std::optional<double> older_than_days;
  std::optional<std::string> device_model;
  std::optional<int64_t> cudnn_version;
  bool all = false;  // prune everything
};
int db_command(const GlobalOptions& global, const DbOptions& options);

}  // namespace convplan::cli
