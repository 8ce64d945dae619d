// convplan: the command line. Parses the arguments with CLI11 and hands them to a command
// (commands.h). Every parse error (unknown flag, bad value, missing file, missing argument) exits
// with kExitUsage and a message naming the flag.
#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <string>

#include "commands.h"
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
                 ->check(CLI::PositiveNumber);
  o.gbps = cmd->add_option("--peak-gbps", o.peak_gbps,
                           "memory bandwidth for the roofline floor, GB/s (else measured)")
               ->check(CLI::PositiveNumber);
}

void finish_timing_flags(TimingFlags& t, const TimingFlagOptions& o) {
  if (o.tflops->count() > 0) t.peak_tflops = o.peak_tflops;
  if (o.gbps->count() > 0) t.peak_gbps = o.peak_gbps;
}

int parse_and_run(int argc, char** argv) {
  CLI::App app{
      "convplan: tuned cuDNN convolutions: run, benchmark and inspect them, and manage "
      "the tuning database.",
      "convplan"};
  app.set_version_flag("--version", std::string(convplan_version()));
  app.require_subcommand(1);
  app.fallthrough();
  app.footer(kExitStatusHelp);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("convplan: ") + e.what() + "\nRun with --help for more information.\n";
  });

  GlobalOptions global;
  app.add_option("--db", global.db_path,
                 "tuning database (default: $CONVPLAN_DB, else $XDG_CACHE_HOME/convplan/tuning.db, "
                 "else ~/.cache/convplan/tuning.db; 'off': none)");
  app.add_flag("-v,--verbose", global.verbose, "report the tuner's choices (repeat for more)");

  std::function<int()> action;

  // run
  RunOptions run;
  int64_t run_batch = 0;
  CLI::Option* run_batch_opt = nullptr;
  TimingFlagOptions run_timing;
  CLI::App* run_cmd = app.add_subcommand(
      "run",
      "tune one convolution (through the plan cache and the tuning database), run it on "
      "random data, time it and report the engine, the time and the roofline share");
  run_cmd->add_option("descriptor", run.descriptor, kDescriptorHelp)->required();
  add_problem_flags(run_cmd, run.problem, run_batch, run_batch_opt, true);
  add_timing_flags(run_cmd, run.timing, run_timing);
  run_cmd->add_flag("--verify", run.verify,
                    "compare the output with the float64 reference; exit 4 when it differs");
  run_cmd->add_option("--json", run.json_path, "write the result as JSON to a file ('-': stdout)");
  run_cmd->callback([&] {
    if (run_batch_opt->count() > 0) run.problem.batch = run_batch;
    finish_timing_flags(run.timing, run_timing);
    action = [&] { return run_command(global, run); };
  });

  // bench
  BenchOptions bench;
  int64_t bench_batch = 0;
  CLI::Option* bench_batch_opt = nullptr;
  TimingFlagOptions bench_timing;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench",
      "tune and time every distinct convolution of a model suite, one row each and a "
      "total (default: ResNet-50 forward, bf16, nhwc, batch 32)");
  CLI::Option* suite_opt =
      bench_cmd->add_option("--suite", bench.suite, "built-in suite (see --list-suites)");
  CLI::Option* file_opt = bench_cmd->add_option("--file", bench.file, "a suite file of your own")
                              ->check(CLI::ExistingFile);
  suite_opt->excludes(file_opt);
  add_problem_flags(bench_cmd, bench.problem, bench_batch, bench_batch_opt, true);
  add_timing_flags(bench_cmd, bench.timing, bench_timing);
  bench_cmd->add_flag("--verify", bench.verify,
                      "check each convolution against the float64 reference; exit 4 on a failure");
  bench_cmd->add_flag("--dry-run", bench.dry_run,
                      "list the suite's convolutions after the flags, without a GPU");
  bench_cmd->add_flag("--list-suites", bench.list_suites, "list the built-in suites");
  bench_cmd->add_option("--json", bench.json_path, "write the results as JSON ('-': stdout)");
  bench_cmd->add_option("--csv", bench.csv_path, "write one CSV row per convolution ('-': stdout)");
  bench_cmd->callback([&] {
    if (bench_batch_opt->count() > 0) bench.problem.batch = bench_batch;
    finish_timing_flags(bench.timing, bench_timing);
    action = [&] { return bench_command(global, bench); };
  });

  // engines
  EnginesOptions engines;
  int64_t engines_batch = 0;
  CLI::Option* engines_batch_opt = nullptr;
  CLI::App* engines_cmd = app.add_subcommand(
      "engines",
      "every cuDNN engine index for a convolution: whether it finalizes (or why not), "
      "its notes, knob ranges and workspace");
  engines_cmd->add_option("descriptor", engines.descriptor, kDescriptorHelp)->required();
  add_problem_flags(engines_cmd, engines.problem, engines_batch, engines_batch_opt, true);
  engines_cmd->add_option("--gpu", engines.gpu, "CUDA device ordinal")
      ->check(CLI::NonNegativeNumber);
  engines_cmd->add_option("--json", engines.json_path, "write the table as JSON ('-': stdout)");
  engines_cmd->callback([&] {
    if (engines_batch_opt->count() > 0) engines.problem.batch = engines_batch;
    action = [&] { return engines_command(global, engines); };
  });

  // explain
  ExplainOptions explain;
  int64_t explain_batch = 0;
  CLI::Option* explain_batch_opt = nullptr;
  CLI::App* explain_cmd = app.add_subcommand(
      "explain",
      "no GPU: the canonical problem, output shape, FLOPs, minimum bytes, roofline floor, and "
      "every exact rewrite that applies (space-to-depth, channel padding) with its problem");
  explain_cmd->add_option("descriptor", explain.descriptor, kDescriptorHelp)->required();
  add_problem_flags(explain_cmd, explain.problem, explain_batch, explain_batch_opt, true);
  explain_cmd->add_option("--peak-tflops", explain.peak_tflops, "matrix rate for the floor, TFLOP/s")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  explain_cmd->add_option("--peak-gbps", explain.peak_gbps, "memory bandwidth for the floor, GB/s")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  explain_cmd->add_option("--json", explain.json_path, "write it as JSON ('-': stdout)");
  explain_cmd->callback([&] {
    if (explain_batch_opt->count() > 0) explain.problem.batch = explain_batch;
    action = [&] { return explain_command(global, explain); };
  });

  // devices
  DevicesOptions devices;
  CLI::App* devices_cmd =
      app.add_subcommand("devices", "the GPUs, the CUDA runtime and driver, and cuDNN");
  devices_cmd->add_option("--json", devices.json_path, "write them as JSON ('-': stdout)");
  devices_cmd->callback([&] { action = [&] { return devices_command(global, devices); }; });

  // db
  DbOptions db;
  double older_than = 0;
  std::string device_model;
  int64_t cudnn_version = 0;
  CLI::App* db_cmd = app.add_subcommand(
      "db", "the tuning database (works without a GPU; --db PATH picks the file)");
  db_cmd->require_subcommand(1);
  db_cmd->add_subcommand("path", "print the database's path")->callback([&] {
    db.action = "path";
  });
  CLI::App* db_list = db_cmd->add_subcommand("list", "one line per record");
  db_list->add_flag("--json", db.json, "the records as a JSON array");
  db_list->callback([&] { db.action = "list"; });
  CLI::App* db_show = db_cmd->add_subcommand("show", "one record as JSON");
  db_show->add_option("key", db.key, "the record's key (see db list)")->required();
  db_show->callback([&] { db.action = "show"; });
  CLI::App* db_export = db_cmd->add_subcommand("export", "every record as one JSON document");
  db_export->add_option("file", db.file, "where to write it (default: stdout)");
  db_export->callback([&] { db.action = "export"; });
  CLI::App* db_import = db_cmd->add_subcommand(
      "import", "add the records of an exported document; they replace records with equal keys");
  db_import->add_option("file", db.file, "an exported JSON document")
      ->required()
      ->check(CLI::ExistingFile);
  db_import->callback([&] { db.action = "import"; });
  CLI::App* db_merge = db_cmd->add_subcommand(
      "merge", "add the records of an exported document; records already present win");
  db_merge->add_option("file", db.file, "an exported JSON document")
      ->required()
      ->check(CLI::ExistingFile);
  db_merge->callback([&] { db.action = "merge"; });
  db_cmd->add_subcommand("verify", "read every row and check it; exit 4 when any is bad")
      ->callback([&] { db.action = "verify"; });
  CLI::App* db_prune =
      db_cmd->add_subcommand("prune", "remove the records matching every given filter");
  CLI::Option* older_opt =
      db_prune->add_option("--older-than", older_than, "tuned more than DAYS days ago")
          ->check(CLI::NonNegativeNumber);
  CLI::Option* device_opt =
      db_prune->add_option("--device", device_model, "device model key, as db list shows it");
  CLI::Option* cudnn_opt =
      db_prune
          ->add_option("--cudnn", cudnn_version, "cuDNN version as cudnnGetVersion(), e.g. 91900")
          ->check(CLI::PositiveNumber);
  db_prune->add_flag("--all", db.all, "remove every record");
  db_prune->callback([&] {
    db.action = "prune";
    if (older_opt->count() > 0) db.older_than_days = older_than;
    if (device_opt->count() > 0) db.device_model = device_model;
    if (cudnn_opt->count() > 0) db.cudnn_version = cudnn_version;
  });
  db_cmd->callback([&] { action = [&] { return db_command(global, db); }; });

  for (CLI::App* sub : app.get_subcommands({})) sub->footer(kExitStatusHelp);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports a mistyped command as a missing one; name the word that was given instead.
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
  if (!action) return fail(kExitUsage, "no command given");
  if (global.db_path.empty()) global.db_path = TuningDatabase::default_path();
  return action();
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
