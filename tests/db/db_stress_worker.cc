// db_stress_worker: one of the processes of the db stress test (tuning_db_test.cc,
// StressWorkersKilledAndRestartedLoseNoCommittedRecord), started, killed and started again many
// times while the others share one database.
//
//   db_stress_worker <role> <db path> <log path> <worker> <seconds>
//
// Roles, each looping for <seconds>:
//   import  imports documents of 5 records of its own (ids from the worker and its pid)
//   tune    tunes small problems with the scripted backend and puts each record
//   prune   puts records of a device of its own and prunes them again (never another's)
//   verify  checks the file as it is (TuningDatabase::verify_file) and lists it
// After each write that returned ok, the keys it committed are appended to <log path> and
// fsynced, so the log never names a record whose write had not returned. Exit status: 0 when
// the time ran out, 1 on a failed operation (printed), 3 when verify found a problem, 2 on bad
// arguments.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "convplan/problem.h"
#include "convplan/tune_policy.h"
#include "convplan/tuner.h"
#include "convplan/tuning_db.h"
#include "db/db_test_records.h"
#include "support/scripted_backend.h"

namespace convplan {
namespace {

constexpr const char kPruneDevice[] = "Stress prune device|sm0|sms0|cudnn1";

struct Worker {
  std::unique_ptr<TuningDatabase> db;
  int log = -1;
  int index = 0;

  int failed(const char* what, const Status& s) const {
    std::fprintf(stderr, "db_stress_worker %d: %s: %s\n", index, what, s.to_string().c_str());
    return 1;
  }
  bool log_keys(const std::vector<std::string>& keys) const {
    std::string text;
    for (const std::string& k : keys) text += k + "\n";
    return ::write(log, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
           ::fsync(log) == 0;
  }
};

int import_step(Worker& w, int step) {
  const int first = 1000000 * (w.index + 1) + (getpid() % 10000) * 50 + (step % 10) * 5;
  std::string doc = "{\"format\":\"convplan-tuning\",\"version\":1,\"records\":[";
  std::vector<std::string> keys;
  for (int id = first; id < first + 5; ++id) {
    const TuningRecord r = testing::make_test_record(id, w.index);
    doc += (keys.empty() ? "" : ",") + to_json(r);
    keys.push_back(r.key());
  }
  doc += "]}";
  StatusOr<int64_t> n = w.db->import_json(doc, /*keep_existing=*/false);
  if (!n.ok()) return w.failed("import", n.status());
  return w.log_keys(keys) ? 0 : 1;
}

int tune_step(Worker& w, Tuner& tuner, int step) {
  const int c = 1 + (getpid() + step) % 24;
  StatusOr<ConvProblem> problem = parse_problem("mb1ic" + std::to_string(c) + "ih6iw6oc" +
                                                std::to_string(1 + w.index) + "kh3kw3ph1pw1");
  if (!problem.ok()) return w.failed("problem", problem.status());
  StatusOr<TuningRecord> record = tuner.tune(testing::scripted_handle(1), *problem, TunePolicy{});
  if (!record.ok()) return w.failed("tune", record.status());
  if (Status s = w.db->put(*record); !s.ok()) return w.failed("put", s);
  return w.log_keys({record->key()}) ? 0 : 1;
}

int prune_step(Worker& w, int step) {
  TuningRecord r = testing::make_test_record(step % 50, w.index);
  r.device_model = kPruneDevice;
  if (Status s = w.db->put(r); !s.ok()) return w.failed("put", s);
  PruneFilter filter;
  filter.device_model = kPruneDevice;
  StatusOr<int64_t> n = w.db->prune(filter);
  return n.ok() ? 0 : w.failed("prune", n.status());
}

int verify_step(Worker& w, const std::string& path) {
  StatusOr<DbVerifyReport> report = TuningDatabase::verify_file(path);
  if (!report.ok()) return w.failed("verify_file", report.status());
  if (!report->problems.empty()) {
    std::fprintf(stderr, "db_stress_worker %d: verify: %s\n", w.index, report->problems[0].c_str());
    return 3;
  }
  int64_t skipped = 0;
  StatusOr<std::vector<TuningRecord>> all = w.db->list(&skipped);
  if (!all.ok()) return w.failed("list", all.status());
  if (skipped != 0) {
    std::fprintf(stderr, "db_stress_worker %d: list skipped %lld rows\n", w.index,
                 static_cast<long long>(skipped));
    return 3;
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s <import|tune|prune|verify> <db> <log> <worker> <seconds>\n",
                 argv[0]);
    return 2;
  }
  const std::string role = argv[1], path = argv[2];
  Worker w;
  w.index = std::atoi(argv[4]);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoi(argv[5]));
  w.log = ::open(argv[3], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (w.log < 0) return 1;
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path);
  if (!db.ok()) return w.failed("open", db.status());
  w.db = std::move(db).value();
  Tuner tuner(std::make_shared<testing::ScriptedBackend>(testing::basic_engines()));
  for (int step = 0; std::chrono::steady_clock::now() < end; ++step) {
    int rc = 2;
    if (role == "import") rc = import_step(w, step);
    if (role == "tune") rc = tune_step(w, tuner, step);
    if (role == "prune") rc = prune_step(w, step);
    if (role == "verify") rc = verify_step(w, path);
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace
}  // namespace convplan

int main(int argc, char** argv) { return convplan::run(argc, argv); }
