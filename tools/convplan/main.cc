// convplan: the command line. Parses the arguments with CLI11 and hands them to a command
// (commands.h). Every parse error (unknown flag, bad value, missing file, missing argument) exits
// with kExitUsage and a message naming the flag.
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <string>

#include "commands.h"
#include "convplan/environment.h"
#include "convplan/log.h"
#include "convplan/problem.h"
#include "convplan/tune_policy.h"
#include "convplan/tuning_db.h"
#include "convplan/tuning_record.h"

namespace convplan::cli {
namespace {

constexpr const char* kExitStatusHelp =
    "Exit status: 0 ok; 1 runtime failure (tuning, execution, I/O, damaged database); 2 usage\n"
    "error (unknown flag, bad value, malformed descriptor, missing file); 3 no usable GPU;\n"
    "4 verification failed (run/bench --verify, db verify).";

constexpr const char* kDescriptorHelp =
    "convolution in benchdnn's text form with an optional prefix of flags, e.g.\n"
    "dir:bwd_data,dt:bf16,layout:nhwc/g1mb32ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1";

// A CLI11 validator that accepts what `check` accepts and otherwise reports its message.
template <typename F>
CLI::Validator status_validator(F check, std::string type_name) {
  return CLI::Validator(
      [check](std::string& s) -> std::string {
        const Status st = check(s);
        return st.ok() ? std::string() : st.message();
      },
      std::move(type_name));
}

const CLI::Validator kDirection = status_validator(
    [](const std::string& s) { return parse_direction(s).status(); }, "fwd|bwd_data|bwd_filter");
const CLI::Validator kDataType = status_validator(
    [](const std::string& s) { return parse_data_type(s).status(); }, "f32|f16|bf16|f64");
const CLI::Validator kLayout = status_validator(
    [](const std::string& s) -> Status {
      StatusOr<Layout> l = parse_layout(s);
      if (!l.ok()) return l.status();
      if (*l == Layout::kExplicit) {
        return invalid_argument("'" + s +
                                "': explicit strides are given in the descriptor (xs:, "
                                "ws:, ys:), not here; use nchw or nhwc");
      }
      return ok_status();
    },
    "nchw|nhwc");
// A finite number in (0, max] (NaN and infinities are refused: CLI11's own range checks let
// NaN through).
CLI::Validator finite_number(double min, double max, bool min_exclusive, std::string type_name) {
  return status_validator(
      [=](const std::string& s) {
        return parse_number_value("value", s, min, max, min_exclusive).status();
      },
      std::move(type_name));
}

const CLI::Validator kTuneMode =
    status_validator([](const std::string& s) { return parse_tune_mode(s).status(); },
                     "heuristic|limited|exhaustive|background");

void add_problem_flags(CLI::App* cmd, ProblemFlags& f, int64_t& batch, CLI::Option*& batch_opt,
                       bool with_batch) {
  cmd->add_option("--dir", f.direction, "direction (overrides the descriptor's dir:)")
      ->check(kDirection);
  cmd->add_option("--dtype", f.data_type, "data type (overrides dt:; compute type follows)")
      ->check(kDataType);
  cmd->add_option("--layout", f.layout, "memory layout (overrides layout:)")->check(kLayout);
  if (with_batch) {
    batch_opt = cmd->add_option("--batch", batch, "batch size mb (overrides the descriptor's)")
                    ->check(CLI::PositiveNumber);
  }
}

struct TimingFlagOptions {
  double peak_tflops = 0, peak_gbps = 0;
  CLI::Option* tflops = nullptr;
  CLI::Option* gbps = nullptr;
};

void add_timing_flags(CLI::App* cmd, TimingFlags& t, TimingFlagOptions& o) {
  cmd->add_option("--gpu", t.gpu, "CUDA device ordinal")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--tune", t.tune, "tuning mode (default: $CONVPLAN_TUNE, else limited)")
      ->check(kTuneMode);
  cmd->add_option("--iters", t.iters, "timed runs per convolution (CUDA events; median)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--warmup", t.warmup, "untimed runs before them")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_flag("--flush-l2", t.flush_l2, "flush the L2 cache before each timed run");
  o.tflops = cmd->add_option("--peak-tflops", o.peak_tflops,
                             "matrix rate for the roofline floor, TFLOP/s (else measured)")
                 ->check(finite_number(0, 1e6, true, "TFLOPS"));
  o.gbps = cmd->add_option("--peak-gbps", o.peak_gbps,
                           "memory bandwidth for the roofline floor, GB/s (else measured)")
               ->check(finite_number(0, 1e8, true, "GBPS"));
}

void finish_timing_flags(TimingFlags& t, const TimingFlagOptions& o) {
  if (o.tflops->count() > 0) t.peak_tflops = o.peak_tflops;
  if (o.gbps->count() > 0) t.peak_gbps = o.peak_gbps;
}

// Every command's options, filled by the parser; `action` runs the command that was given.
struct Commands {
  GlobalOptions global;
  bool quiet = false;
  bool allow_shared_folder = false;  // --db-allow-shared-folder
  std::function<int()> action;

  RunOptions run;
  int64_t run_batch = 0;
  CLI::Option* run_batch_opt = nullptr;
  TimingFlagOptions run_timing;

  BenchOptions bench;
  int64_t bench_batch = 0;
  CLI::Option* bench_batch_opt = nullptr;
  TimingFlagOptions bench_timing;

  EnginesOptions engines;
  int64_t engines_batch = 0;
  CLI::Option* engines_batch_opt = nullptr;

  ExplainOptions explain;
  int64_t explain_batch = 0;
  CLI::Option* explain_batch_opt = nullptr;

  DevicesOptions devices;

  DbOptions db;
  double older_than = 0;
  std::string device_model;
  int64_t cudnn_version = 0;
};

void add_global_flags(CLI::App& app, Commands& c) {
  app.set_version_flag("--version", std::string(convplan_version()));
  app.require_subcommand(1);
  app.fallthrough();
  app.footer(kExitStatusHelp);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("convplan: ") + e.what() + "\nRun with --help for more information.\n";
  });
  app.add_option("--db", c.global.db_path,
                 "tuning database (default: $CONVPLAN_DB, else $XDG_CACHE_HOME/convplan/tuning.db, "
                 "else ~/.cache/convplan/tuning.db; 'off': none)");
  app.add_flag("-v,--verbose", c.global.verbose, "report the tuner's choices (-vv for more)");
  app.add_flag("-q,--quiet", c.quiet,
               "report errors only (the library's warnings and notes are dropped; "
               "else $CONVPLAN_LOG_LEVEL: debug, info, warning, error or off)");
  app.add_flag("--db-allow-shared-folder", c.allow_shared_folder,
               "use a tuning database in a folder other users own or may write "
               "(as CONVPLAN_DB_ALLOW_SHARED_FOLDER=1; see docs/bad-inputs.md)");
}

void add_run_command(CLI::App& app, Commands& c) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "tune one convolution (through the plan cache and the tuning database), run it on "
      "random data, time it and report the engine, the time and the roofline share");
  cmd->add_option("descriptor", c.run.descriptor, kDescriptorHelp)->required();
  add_problem_flags(cmd, c.run.problem, c.run_batch, c.run_batch_opt, true);
  add_timing_flags(cmd, c.run.timing, c.run_timing);
  cmd->add_flag("--verify", c.run.verify,
                "compare the output with the float64 reference; exit 4 when it differs");
  cmd->add_option("--json", c.run.json_path, "write the result as JSON to a file ('-': stdout)");
  cmd->callback([&c] {
    if (c.run_batch_opt->count() > 0) c.run.problem.batch = c.run_batch;
    finish_timing_flags(c.run.timing, c.run_timing);
    c.action = [&c] { return run_command(c.global, c.run); };
  });
}

void add_bench_command(CLI::App& app, Commands& c) {
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "tune and time every distinct convolution of a model suite, one row each and a "
      "total (default: ResNet-50 forward, bf16, nhwc, batch 32)");
  CLI::Option* suite_opt =
      cmd->add_option("--suite", c.bench.suite, "built-in suite (see --list-suites)");
  CLI::Option* file_opt =
      cmd->add_option("--file", c.bench.file, "a suite file of your own")->check(CLI::ExistingFile);
  suite_opt->excludes(file_opt);
  add_problem_flags(cmd, c.bench.problem, c.bench_batch, c.bench_batch_opt, true);
  add_timing_flags(cmd, c.bench.timing, c.bench_timing);
  cmd->add_flag("--verify", c.bench.verify,
                "check each convolution against the float64 reference; exit 4 on a failure");
  cmd->add_flag("--dry-run", c.bench.dry_run,
                "list the suite's convolutions after the flags, without a GPU");
  cmd->add_flag("--list-suites", c.bench.list_suites, "list the built-in suites");
  cmd->add_option("--prepare-threads", c.bench.prepare_threads,
                  "tune the suite's convolutions first, this many at once (PlanCache::prepare), "
                  "then time them; 0: each as it comes (default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", c.bench.json_path, "write the results as JSON ('-': stdout)");
  cmd->add_option("--csv", c.bench.csv_path, "write one CSV row per convolution ('-': stdout)");
  cmd->callback([&c] {
    if (c.bench_batch_opt->count() > 0) c.bench.problem.batch = c.bench_batch;
    finish_timing_flags(c.bench.timing, c.bench_timing);
    c.action = [&c] { return bench_command(c.global, c.bench); };
  });
}

void add_engines_command(CLI::App& app, Commands& c) {
  CLI::App* engines = app.add_subcommand(
      "engines",
      "every cuDNN engine index for a convolution: whether it finalizes (or why not), "
      "its notes, knob ranges and workspace");
  engines->add_option("descriptor", c.engines.descriptor, kDescriptorHelp)->required();
  add_problem_flags(engines, c.engines.problem, c.engines_batch, c.engines_batch_opt, true);
  engines->add_option("--gpu", c.engines.gpu, "CUDA device ordinal")->check(CLI::NonNegativeNumber);
  engines->add_option("--json", c.engines.json_path, "write the table as JSON ('-': stdout)");
  engines->callback([&c] {
    if (c.engines_batch_opt->count() > 0) c.engines.problem.batch = c.engines_batch;
    c.action = [&c] { return engines_command(c.global, c.engines); };
  });
}

void add_devices_command(CLI::App& app, Commands& c) {
  CLI::App* devices =
      app.add_subcommand("devices", "the GPUs, the CUDA runtime and driver, and cuDNN");
  devices->add_option("--json", c.devices.json_path, "write them as JSON ('-': stdout)");
  devices->callback([&c] { c.action = [&c] { return devices_command(c.global, c.devices); }; });
}

// db's subcommands that move records in or out: path, list, show, export, import, merge, verify.
void add_explain_command(CLI::App& app, Commands& c) {
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "no GPU: the canonical problem, output shape, FLOPs, minimum bytes, roofline floor, and "
      "every exact rewrite that applies (space-to-depth, channel padding) with its problem");
  cmd->add_option("descriptor", c.explain.descriptor, kDescriptorHelp)->required();
  add_problem_flags(cmd, c.explain.problem, c.explain_batch, c.explain_batch_opt, true);
  cmd->add_option("--peak-tflops", c.explain.peak_tflops, "matrix rate for the floor, TFLOP/s")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--peak-gbps", c.explain.peak_gbps, "memory bandwidth for the floor, GB/s")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--json", c.explain.json_path, "write it as JSON ('-': stdout)");
  cmd->callback([&c] {
    if (c.explain_batch_opt->count() > 0) c.explain.problem.batch = c.explain_batch;
    c.action = [&c] { return explain_command(c.global, c.explain); };
  });
}

void add_db_record_commands(CLI::App* db_cmd, DbOptions& db) {
  db_cmd->add_subcommand("path", "print the database's path")->callback([&db] {
    db.action = "path";
  });
  CLI::App* list = db_cmd->add_subcommand("list", "one line per record");
  list->add_flag("--json", db.json, "the records as a JSON array");
  list->callback([&db] { db.action = "list"; });
  CLI::App* show = db_cmd->add_subcommand("show", "one record as JSON");
  show->add_option("key", db.key, "the record's key (see db list)")->required();
  show->callback([&db] { db.action = "show"; });
  CLI::App* exp = db_cmd->add_subcommand("export", "every record as one JSON document");
  exp->add_option("file", db.file, "where to write it (default: stdout)");
  exp->callback([&db] { db.action = "export"; });
  CLI::App* imp = db_cmd->add_subcommand(
      "import", "add the records of an exported document; they replace records with equal keys");
  imp->add_option("file", db.file, "an exported JSON document")
      ->required()
      ->check(CLI::ExistingFile);
  imp->callback([&db] { db.action = "import"; });
  CLI::App* merge = db_cmd->add_subcommand(
      "merge", "add the records of an exported document; records already present win");
  merge->add_option("file", db.file, "an exported JSON document")
      ->required()
      ->check(CLI::ExistingFile);
  merge->callback([&db] { db.action = "merge"; });
  db_cmd->add_subcommand("verify", "read every row and check it; exit 4 when any is bad")
      ->callback([&db] { db.action = "verify"; });
}

void add_db_command(CLI::App& app, Commands& c) {
  CLI::App* db_cmd = app.add_subcommand(
      "db", "the tuning database (works without a GPU; --db PATH picks the file)");
  db_cmd->require_subcommand(1);
  add_db_record_commands(db_cmd, c.db);
  CLI::App* prune =
      db_cmd->add_subcommand("prune", "remove the records matching every given filter");
  CLI::Option* older_opt =
      prune->add_option("--older-than", c.older_than, "tuned more than DAYS days ago")
          ->check(finite_number(0, 1e6, false, "DAYS"));
  CLI::Option* device_opt =
      prune->add_option("--device", c.device_model, "device model key, as db list shows it");
  CLI::Option* cudnn_opt =
      prune
          ->add_option("--cudnn", c.cudnn_version, "cuDNN version as cudnnGetVersion(), e.g. 91900")
          ->check(CLI::PositiveNumber);
  prune->add_flag("--all", c.db.all, "remove every record");
  prune->callback([&c, older_opt, device_opt, cudnn_opt] {
    c.db.action = "prune";
    if (older_opt->count() > 0) c.db.older_than_days = c.older_than;
    if (device_opt->count() > 0) c.db.device_model = c.device_model;
    if (cudnn_opt->count() > 0) c.db.cudnn_version = c.cudnn_version;
  });
  db_cmd->callback([&c] { c.action = [&c] { return db_command(c.global, c.db); }; });
}

// The exit code for a parse error, after its message. CLI11 reports a mistyped command as a
// missing one; this names the word that was given instead.
int report_parse_error(CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    CLI::App* level = &app;
    std::string path = "convplan";
    while (!level->get_subcommands().empty()) {
      level = level->get_subcommands().front();
      path += " " + level->get_name();
    }
    const std::vector<std::string> extra = app.remaining(true);
    if (level->get_require_subcommand_min() > 0 && !extra.empty()) {
      std::string known;
      for (const CLI::App* sub : level->get_subcommands({})) {
        known += (known.empty() ? "" : ", ") + sub->get_name();
      }
      return fail(kExitUsage, "unknown command '" + extra.front() + "' for '" + path +
                                  "' (commands: " + known + "; see --help)");
    }
  }
  const int code = app.exit(e);
  return code == 0 ? kExitOk : kExitUsage;
}

// The library's log level: --quiet, else $CONVPLAN_LOG_LEVEL (a bad value is a usage error).
int set_up_logging(const Commands& c) {
  const Status from_env = set_log_level_from_environment();
  if (!from_env.ok()) return fail(kExitUsage, from_env.message());
  if (c.quiet) set_log_level(LogLevel::kError);
  return kExitOk;
}

int parse_and_run(int argc, char** argv) {
  CLI::App app{
      "convplan: tuned cuDNN convolutions: run, benchmark and inspect them, and manage "
      "the tuning database.",
      "convplan"};
  Commands c;
  add_global_flags(app, c);
  add_run_command(app, c);
  add_bench_command(app, c);
  add_engines_command(app, c);
  add_explain_command(app, c);
  add_devices_command(app, c);
  add_db_command(app, c);
  for (CLI::App* sub : app.get_subcommands({})) sub->footer(kExitStatusHelp);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return report_parse_error(app, e);
  }
  if (!c.action) return fail(kExitUsage, "no command given");
  if (const int code = set_up_logging(c); code != kExitOk) return code;
  if (c.global.verbose > 2) {
    return fail(kExitUsage, "-v is given " + std::to_string(c.global.verbose) +
                                " times; there are two levels (-v, -vv)");
  }
  if (c.allow_shared_folder) ::setenv("CONVPLAN_DB_ALLOW_SHARED_FOLDER", "1", 1);
  // Before any command looks for a GPU: a bad value is a usage error on every machine.
  if (Status s = check_configuration(); !s.ok()) return fail(kExitUsage, s.message());
  if (c.global.db_path.empty()) c.global.db_path = TuningDatabase::default_path();
  return c.action();
}

}  // namespace
}  // namespace convplan::cli

int main(int argc, char** argv) {
  try {
    return convplan::cli::parse_and_run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "convplan: internal error: " << e.what() << "\n";
    return convplan::cli::kExitFailure;
  }
}
