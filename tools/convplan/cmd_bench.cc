// convplan bench: every distinct convolution of a suite, tuned and timed, one row each.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

#include "commands.h"
#include "convplan/cudnn_backend.h"
#include "convplan/tuning_record.h"
#include "gpu.h"
#include "report.h"
#include "stuck_device.h"
#include "suite.h"

namespace convplan::cli {

namespace {

struct Row {
  SuiteProblem layer;
  Status status;  // why it has no time, when not ok
  std::optional<Measurement> measured;
  std::optional<Verification> verification;
  double floor_ms = -1;
  double median_ms() const { return measured ? measured->time.median_ms : -1; }
  double tflops() const {
    const double ms = median_ms();
    return ms > 0 ? layer.problem.flops() / (ms * 1e9) : -1;
  }
  double gbps() const {
    const double ms = median_ms();
    return ms > 0 ? layer.problem.min_bytes() / (ms * 1e6) : -1;
  }
  double share() const {
    const double ms = median_ms();
    return floor_ms > 0 && ms > 0 ? floor_ms / ms : -1;
  }
};

struct Totals {
  int64_t count = 0;
  int layers = 0;
  int failed = 0;
  double time_ms = 0;   // sum of count * median over the layers that ran
  double flops = 0;     // of those
  double floor_ms = 0;  // of those, where known
  bool floor_known = true;
  double tuning_ms = 0;
  double tflops() const { return time_ms > 0 ? flops / (time_ms * 1e9) : -1; }
  double share() const { return floor_known && time_ms > 0 ? floor_ms / time_ms : -1; }
};

Totals totals_of(const std::vector<Row>& rows) {
  Totals t;
  for (const Row& r : rows) {
    t.count += r.layer.count;
    ++t.layers;
    if (!r.measured) {
      ++t.failed;
      continue;
    }
    const double c = static_cast<double>(r.layer.count);
    t.time_ms += c * r.median_ms();
    t.flops += c * r.layer.problem.flops();
    t.tuning_ms += r.measured->tuning_ms;
    if (r.floor_ms > 0) {
      t.floor_ms += c * r.floor_ms;
    } else {
      t.floor_known = false;
    }
  }
  return t;
}

// The command's phases (ms): the set-up (the session, the rates, the tensors) from the command's
// start; then preparing the suite (PlanCache::prepare; 0 without --prepare-threads); and when
// the first convolution's result came, from the start (-1 when it had none).
struct Timeline {
  double setup_ms = 0;
  double prepare_ms = 0;
  double first_result_ms = -1;
};

std::string percent(double share) { return share < 0 ? "-" : fixed(100 * share, 1); }

nlohmann::json num(double v) { return v < 0 ? nlohmann::json() : nlohmann::json(v); }

nlohmann::json row_json(const Row& r) {
  nlohmann::json j;
  j["name"] = r.layer.name;
  j["count"] = r.layer.count;
  j["descriptor"] = r.layer.problem.to_string();
  j["problem"] = problem_json(r.layer.problem);
  if (r.measured) {
    const Measurement& m = *r.measured;
    j["engine"] = m.config.to_string();
    j["knobs"] = knobs_json(m.config);
    j["notes"] = notes_to_string(m.notes);
    j["workspace_bytes"] = m.workspace_bytes;
    j["median_ms"] = m.time.median_ms;
    j["min_ms"] = m.time.min_ms;
    j["p10_ms"] = m.time.p10_ms;
    j["p90_ms"] = m.time.p90_ms;
    j["max_ms"] = m.time.max_ms;
    j["runs"] = m.time.runs;
    j["tuning_ms"] = m.tuning_ms;
    j["source"] = m.source;
  } else {
    for (const char* k : {"engine", "knobs", "notes", "workspace_bytes", "median_ms", "min_ms",
                          "p10_ms", "p90_ms", "max_ms", "runs", "tuning_ms", "source"}) {
      j[k] = nullptr;
    }
  }
  j["tflops"] = num(r.tflops());
  j["gbps"] = num(r.gbps());
  j["roofline_floor_ms"] = num(r.floor_ms);
  j["roofline_share"] = num(r.share());
  if (r.verification) {
    j["verification"] = {{"passed", r.verification->passed},
                         {"relative_error", r.verification->relative_error},
                         {"tolerance", r.verification->tolerance},
                         {"elements_checked", r.verification->elements_checked},
                         {"wall_ms", r.verification->wall_ms}};
  } else {
    j["verification"] = nullptr;
  }
  j["error"] = r.status.ok() ? nlohmann::json() : nlohmann::json(r.status.to_string());
  return j;
}

const std::vector<std::string> kCsvHeader = {
    "name",      "count",  "descriptor",     "direction", "data_type",         "layout",
    "n",         "engine", "knobs",          "notes",     "workspace_bytes",   "median_ms",
    "min_ms",    "max_ms", "tflops",         "gbps",      "roofline_floor_ms", "roofline_share",
    "tuning_ms", "source", "relative_error", "error"};

std::string csv_number(double v, int digits) { return v < 0 ? "" : fixed(v, digits); }

std::vector<std::string> csv_row(const Row& r) {
  const ConvProblem& p = r.layer.problem;
  const Measurement* m = r.measured ? &*r.measured : nullptr;
  char relerr[32] = "";
  if (r.verification) std::snprintf(relerr, sizeof(relerr), "%.3g", r.verification->relative_error);
  return {r.layer.name,
          std::to_string(r.layer.count),
          p.to_string(),
          to_string(p.direction),
          to_string(p.data_type),
          to_string(p.layout),
          std::to_string(p.n),
          m ? m->config.to_string() : "",
          m ? knobs_text(m->config) : "",
          m ? notes_to_string(m->notes) : "",
          m ? std::to_string(m->workspace_bytes) : "",
          csv_number(r.median_ms(), 6),
          m ? csv_number(m->time.min_ms, 6) : "",
          m ? csv_number(m->time.max_ms, 6) : "",
          csv_number(r.tflops(), 3),
          csv_number(r.gbps(), 2),
          csv_number(r.floor_ms, 6),
          csv_number(r.share(), 4),
          m ? csv_number(m->tuning_ms, 2) : "",
          m ? m->source : "",
          relerr,
          r.status.ok() ? "" : r.status.to_string()};
}

// Progress on standard error: a bar on a terminal, one line per convolution otherwise.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(STDERR_FILENO) == 1) {}
  void start(size_t i, const std::string& name) {
    if (!tty_) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * i / (total_ == 0 ? 1 : total_));
    std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu %s", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), i, total_, name.c_str());
    std::fflush(stderr);
  }
  void done(size_t i, const Row& r) {
    if (tty_) return;
    std::ostringstream line;
    line << "convplan: [" << i + 1 << "/" << total_ << "] " << r.layer.name << ": ";
    if (r.measured) {
      line << fixed(r.median_ms(), 4) << " ms, " << r.measured->config.to_string() << ", "
           << r.measured->source << " in " << fixed(r.measured->tuning_ms, 1) << " ms";
      if (r.verification) {
        line << (r.verification->passed ? ", verified" : ", VERIFY FAILED") << " in "
             << fixed(r.verification->wall_ms, 1) << " ms";
      }
    } else {
      line << "failed: " << r.status.to_string();
    }
    std::cerr << line.str() << "\n";
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  size_t total_;
  bool tty_;
};

nlohmann::json settings_json(const BenchOptions& o, const Suite& suite, const TunePolicy* policy) {
  nlohmann::json s;
  s["suite"] = suite.name;
  s["source"] = suite.source;
  const ProblemOverrides d = bench_defaults();
  const ProblemOverrides f = o.problem.overrides();
  s["direction"] = o.problem.direction.empty() ? to_string(*d.direction) : to_string(*f.direction);
  s["data_type"] = o.problem.data_type.empty() ? to_string(*d.data_type) : to_string(*f.data_type);
  s["layout"] = o.problem.layout.empty() ? to_string(*d.layout) : to_string(*f.layout);
  s["batch"] = o.problem.batch ? nlohmann::json(*o.problem.batch) : nlohmann::json();
  s["default_batch"] = *d.batch;
  s["tune"] = policy ? nlohmann::json(to_string(policy->mode)) : nlohmann::json();
  s["iters"] = o.timing.iters;
  s["warmup"] = o.timing.warmup;
  s["flush_l2"] = o.timing.flush_l2;
  s["verify"] = o.verify;
  s["prepare_threads"] = o.prepare_threads;
  s["timing"] = "CUDA events around each run of the acquired plan (Backend::time); median";
  return s;
}

Status write_outputs(const BenchOptions& o, const nlohmann::json& j, const std::vector<Row>& rows) {
  if (!o.json_path.empty()) CONVPLAN_RETURN_IF_ERROR(write_text(o.json_path, j.dump(2) + "\n"));
  if (!o.csv_path.empty()) {
    std::string csv = csv_line(kCsvHeader);
    for (const Row& r : rows) csv += csv_line(csv_row(r));
    CONVPLAN_RETURN_IF_ERROR(write_text(o.csv_path, csv));
  }
  return ok_status();
}

int list_suites() {
  Table t({"suite", "convolutions", "in the model"}, {false, true, true});
  for (const std::string& name : builtin_suite_names()) {
    StatusOr<Suite> s = builtin_suite(name);
    if (!s.ok()) return fail(kExitFailure, s.status().message());
    t.add_row({name, std::to_string(s->entries.size()), std::to_string(s->total_count())});
  }
  t.print(std::cout);
  return kExitOk;
}

// The roofline rates, one per (data type, tensor cores) the rows use.
struct RateTable {
  std::map<std::pair<DataType, bool>, Rates> rates;
  std::optional<Rates> any;  // the first found: its copy bandwidth is the one reported
};

int dry_run(const BenchOptions& o, const Suite& suite, const std::vector<Row>& rows,
            std::ostream& human) {
  Table t({"layer", "count", "descriptor", "GFLOP", "min MB"}, {false, true, false, true, true});
  for (const Row& r : rows) {
    t.add_row({r.layer.name, std::to_string(r.layer.count), r.layer.problem.to_string(),
               fixed(r.layer.problem.flops() / 1e9, 3),
               fixed(r.layer.problem.min_bytes() / 1e6, 2)});
  }
  human << suite.source << ": " << rows.size() << " distinct convolutions, " << suite.total_count()
        << " in the model\n";
  t.print(human);
  nlohmann::json j = {{"format", "convplan-bench"},
                      {"version", 1},
                      {"date", utc_timestamp()},
                      {"dry_run", true},
                      {"settings", settings_json(o, suite, nullptr)}};
  j["rows"] = nlohmann::json::array();
  for (const Row& r : rows) j["rows"].push_back(row_json(r));
  const Totals tot = totals_of(rows);
  j["totals"] = {{"layers", tot.layers}, {"count", tot.count}};
  if (Status s = write_outputs(o, j, rows); !s.ok()) return fail(kExitFailure, s.to_string());
  return kExitOk;
}

// Measured first, while the device memory is free. A type without rates gets no floor.
RateTable measure_rates(Session& session, const BenchOptions& o, const std::vector<Row>& rows) {
  RateSource rate_source(o.timing.peak_tflops, o.timing.peak_gbps);
  RateTable table;
  for (const Row& r : rows) {
    const std::pair<DataType, bool> key{r.layer.problem.data_type,
                                        r.layer.problem.allow_tensor_cores};
    if (table.rates.count(key) > 0) continue;
    StatusOr<Rates> got = rate_source.rates_for(session, r.layer.problem);
    if (!got.ok()) {
      warn(std::string("no roofline for ") + to_string(key.first) + ": " +
           got.status().to_string());
      continue;
    }
    table.rates.emplace(key, *got);
    if (!table.any) table.any = *got;
  }
  return table;
}

// Tunes, times (and verifies) each row in turn; true when a verification failed.
bool measure_rows(Session& session, const BenchOptions& o, const MeasureOptions& mo,
                  const RateTable& rates, DeviceTensors& tensors, std::vector<Row>& rows) {
  std::optional<DataType> filled;
  Progress progress(rows.size());
  bool verify_failed = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& r = rows[i];
    const ConvProblem& p = r.layer.problem;
    progress.start(i, r.layer.name);
    r.status = [&]() -> Status {
      if (filled != p.data_type) {
        CONVPLAN_RETURN_IF_ERROR(fill_random(session, tensors, p.data_type, 1));
        filled = p.data_type;
      }
      CONVPLAN_ASSIGN_OR_RETURN(Measurement m, tune_and_time(session, p, tensors, mo));
      r.measured = std::move(m);
      if (o.verify) {
        CONVPLAN_ASSIGN_OR_RETURN(Verification v, verify(session, p));
        r.verification = v;
        if (!v.passed) verify_failed = true;
      }
      return ok_status();
    }();
    exit_now_if_device_stuck(r.status);
    auto rate = rates.rates.find({p.data_type, p.allow_tensor_cores});
    if (rate != rates.rates.end()) r.floor_ms = roofline_floor_ms(p, rate->second);
    progress.done(i, r);
  }
  progress.finish();
  return verify_failed;
}

void print_table(std::ostream& human, const Suite& suite, const std::vector<Row>& rows,
                 const Environment& env, const TunePolicy& policy, const MeasureOptions& mo) {
  const Totals tot = totals_of(rows);
  Table t({"layer", "count", "descriptor", "engine", "ms", "TFLOP/s", "% roofline", "tuning ms"},
          {false, true, false, false, true, true, true, true});
  for (const Row& r : rows) {
    t.add_row({r.layer.name, std::to_string(r.layer.count), r.layer.problem.to_string(),
               r.measured ? r.measured->config.to_string() : "FAILED", fixed(r.median_ms(), 4),
               fixed(r.tflops(), 1), percent(r.share()),
               r.measured ? fixed(r.measured->tuning_ms, 1) : "-"});
  }
  t.add_separator();
  t.add_row({"total (count x ms)", std::to_string(tot.count), suite.source,
             std::to_string(tot.layers - tot.failed) + "/" + std::to_string(tot.layers) + " ran",
             fixed(tot.time_ms, 3), fixed(tot.tflops(), 1), percent(tot.share()),
             fixed(tot.tuning_ms, 1)});
  human << suite.source << " on " << env.device.name << ", cuDNN "
        << cudnn_version_text(env.cudnn_version) << ", tune " << to_string(policy.mode) << ", "
        << mo.iters << " timed runs each\n";
  t.print(human);
}

void print_notes(std::ostream& human, const std::vector<Row>& rows, const RateTable& rates,
                 const CacheStats& stats, const Timeline& t) {
  for (const Row& r : rows) {
    if (!r.status.ok()) human << r.layer.name << ": " << r.status.to_string() << "\n";
    if (r.verification && !r.verification->passed) {
      human << r.layer.name << ": verification FAILED, relative error "
            << r.verification->relative_error << " > " << r.verification->tolerance << "\n";
    }
  }
  if (rates.any) {
    human << "roofline floor = max(flops / matrix rate, bytes / copy bandwidth); rates: ";
    bool first = true;
    for (const auto& [key, rate] : rates.rates) {
      human << (first ? "" : "; ") << to_string(key.first) << (key.second ? "" : " (no TC)") << " "
            << fixed(rate.matrix_tflops, 1) << " TFLOP/s";
      first = false;
    }
    human << "; copy " << fixed(rates.any->copy_gbps, 0) << " GB/s\n";
  }
  human << "cache: " << stats.to_string() << "\n";
  human << "set-up " << fixed(t.setup_ms, 1) << " ms; first result at "
        << fixed(t.first_result_ms, 1) << " ms; plans found or tuned in "
        << fixed(t.prepare_ms + totals_of(rows).tuning_ms, 1) << " ms";
  if (t.prepare_ms > 0) human << " (" << fixed(t.prepare_ms, 1) << " of them preparing the suite)";
  human << "\n";
}

nlohmann::json results_json(const BenchOptions& o, const Suite& suite, const Environment& env,
                            const TunePolicy& policy, const RateTable& rates,
                            const std::vector<Row>& rows, const CacheStats& stats,
                            const Timeline& t) {
  const Totals tot = totals_of(rows);
  nlohmann::json j = {
      {"format", "convplan-bench"}, {"version", 1}, {"date", utc_timestamp()}, {"dry_run", false}};
  j.update(environment_json(env));
  j["settings"] = settings_json(o, suite, &policy);
  nlohmann::json rates_j = nlohmann::json::array();
  for (const auto& [key, rate] : rates.rates) {
    rates_j.push_back({{"data_type", to_string(key.first)},
                       {"allow_tensor_cores", key.second},
                       {"matrix_tflops", rate.matrix_tflops},
                       {"matrix_source", rate.matrix_source},
                       {"copy_gbps", rate.copy_gbps},
                       {"copy_source", rate.copy_source}});
  }
  j["rates"] = rates_j;
  j["rows"] = nlohmann::json::array();
  for (const Row& r : rows) j["rows"].push_back(row_json(r));
  j["totals"] = {{"layers", tot.layers},
                 {"failed", tot.failed},
                 {"count", tot.count},
                 {"time_ms", tot.time_ms},
                 {"tflops", num(tot.tflops())},
                 {"roofline_floor_ms", tot.floor_known ? num(tot.floor_ms) : nlohmann::json()},
                 {"roofline_share", num(tot.share())},
                 // The wall time to have every plan: preparing, then each layer's acquire.
                 {"tuning_ms", t.prepare_ms + tot.tuning_ms},
                 {"prepare_ms", t.prepare_ms},
                 {"setup_ms", t.setup_ms},
                 {"first_result_ms", t.first_result_ms}};
  j["cache_stats"] = {{"text", stats.to_string()},  {"hits", stats.hits},
                      {"misses", stats.misses},     {"tunes", stats.tunes},
                      {"clones", stats.clones},     {"db_hits", stats.db_hits},
                      {"failures", stats.failures}, {"tune_ms", stats.tune_ms},
                      {"plans", stats.plans},       {"records", stats.records}};
  return j;
}

// The suite's rows after the flags, or the usage error's exit code through `rc`.
std::optional<std::vector<Row>> load_rows(const BenchOptions& o, std::optional<Suite>& suite,
                                          int* rc) {
  StatusOr<Suite> loaded = !o.file.empty() ? load_suite_file(o.file)
                                           : builtin_suite(o.suite.empty() ? "resnet50" : o.suite);
  if (!loaded.ok()) {
    *rc = fail(kExitUsage, loaded.status().message());
    return std::nullopt;
  }
  suite = std::move(loaded).value();
  StatusOr<std::vector<SuiteProblem>> layers =
      suite_problems(*suite, o.problem.overrides(), bench_defaults());
  if (!layers.ok()) {
    *rc = fail(kExitUsage, layers.status().message());
    return std::nullopt;
  }
  std::vector<Row> rows;
  for (SuiteProblem& l : *layers) rows.push_back(Row{std::move(l), ok_status(), {}, {}, -1});
  return rows;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Tunes the suite's convolutions `threads` at once before they are timed (PlanCache::prepare). A
// failure is reported and left to the layers' own acquire, which reports it again per layer.
void prepare_suite(Session& session, int threads, const std::vector<Row>& rows, std::ostream& human,
                   Timeline& timeline) {
  std::vector<ConvProblem> problems;
  for (const Row& r : rows) problems.push_back(r.layer.problem);
  const auto start = std::chrono::steady_clock::now();
  const Status s =
      session.cache().prepare(session.device().ordinal, problems, session.policy(), threads);
  timeline.prepare_ms = ms_since(start);
  exit_now_if_device_stuck(s);
  human << "prepared " << problems.size() << " convolutions on " << threads << " threads in "
        << fixed(timeline.prepare_ms, 1) << " ms" << (s.ok() ? "" : ": " + s.to_string()) << "\n";
}

}  // namespace

int bench_command(const GlobalOptions& global, const BenchOptions& o) {
  const auto command_start = std::chrono::steady_clock::now();
  if (o.list_suites) return list_suites();
  int rc = kExitOk;
  std::optional<Suite> suite;
  std::optional<std::vector<Row>> rows = load_rows(o, suite, &rc);
  if (!rows) return rc;
  // The table goes to standard error when JSON or CSV goes to standard output.
  std::ostream& human = o.json_path == "-" || o.csv_path == "-" ? std::cerr : std::cout;
  if (o.dry_run) return dry_run(o, *suite, *rows, human);

  std::unique_ptr<Session> opened = open_session(global, o.timing, &rc);
  if (!opened) return rc;
  Session& session = *opened;
  const RateTable rates = measure_rates(session, o, *rows);
  TensorBytes bytes;
  for (const Row& r : *rows) bytes.grow_to(TensorBytes::of(r.layer.problem));
  StatusOr<DeviceTensors> tensors = allocate_tensors(session, bytes);
  if (!tensors.ok()) return fail(exit_code_for(tensors.status()), tensors.status().to_string());
  MeasureOptions mo;
  mo.iters = o.timing.iters;
  mo.warmup = o.timing.warmup;
  mo.flush_l2 = o.timing.flush_l2;
  Timeline timeline;
  timeline.setup_ms = ms_since(command_start);
  if (o.prepare_threads > 0) prepare_suite(session, o.prepare_threads, *rows, human, timeline);
  const bool verify_failed = measure_rows(session, o, mo, rates, *tensors, *rows);

  const Environment env = environment(session);
  const CacheStats stats = session.cache().stats();
  if (!rows->empty() && (*rows)[0].measured) {
    timeline.first_result_ms =
        timeline.setup_ms + timeline.prepare_ms + (*rows)[0].measured->first_result_ms;
  }
  print_table(human, *suite, *rows, env, session.policy(), mo);
  print_notes(human, *rows, rates, stats, timeline);
  const nlohmann::json j =
      results_json(o, *suite, env, session.policy(), rates, *rows, stats, timeline);
  if (Status s = write_outputs(o, j, *rows); !s.ok()) return fail(kExitFailure, s.to_string());
  if (verify_failed) return fail(kExitVerifyFailed, "verification failed (see above)");
  const Totals tot = totals_of(*rows);
  if (tot.failed > 0) {
    return fail(kExitFailure, std::to_string(tot.failed) + " of " + std::to_string(tot.layers) +
                                  " convolutions failed");
  }
  return kExitOk;
}

}  // namespace convplan::cli
