// PlanCache with a TuningDatabase: a second cache starts tuned, stale records are discarded and
// re-tuned, stored plan JSON is used for clones (with the fallback to build), write failures are
// reported once and are not fatal.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "cache/cache_test_support.h"
#include "convplan/plan_cache.h"
#include "convplan/reference.h"
#include "convplan/tuning_db.h"
#include "support/scripted_backend.h"

namespace convplan::testing {
namespace {

// A database file of its own in the temp folder, removed (with its WAL files) at the end.
class TempDbPath {
 public:
  // A private folder of its own: the database refuses a folder others may write, such as /tmp.
  TempDbPath() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "convplan_cache_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) folder_ = pattern;
    path_ = folder_ + "/" + std::to_string(counter_++) + ".db";
  }
  ~TempDbPath() {
    std::error_code ec;
    if (!folder_.empty()) std::filesystem::remove_all(folder_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string folder_;
  static inline int counter_ = 0;
  std::string path_;
};

std::shared_ptr<TuningDatabase> open_db(const std::string& path) {
  StatusOr<std::unique_ptr<TuningDatabase>> db = TuningDatabase::open(path);
  EXPECT_TRUE(db.ok()) << db.status().to_string();
  return db.ok() ? std::shared_ptr<TuningDatabase>(std::move(db).value()) : nullptr;
}

// A record for `problem` on the scripted default device under the default policy.
TuningRecord stored_record(const ConvProblem& problem, int64_t engine_id, std::string plan_json) {
  TuningRecord r;
  r.device_model = ScriptedBackend::default_device(0).model_key();
  r.problem = problem.to_string();
  r.policy = TunePolicy{}.key();
  r.convplan_version = convplan_version();
  r.config.engine_id = engine_id;
  r.time_ms = 0.5;
  r.plan_json = std::move(plan_json);
  r.tuned_at_unix = 1700000000;
  return r;
}

TEST(PlanCacheDatabase, SecondCacheOverTheSameFileStartsTuned) {
  TempDbPath file;
  const std::vector<ConvProblem> problems = small_problems(6);
  {
    auto backend = std::make_shared<ScriptedBackend>(basic_engines());
    std::unique_ptr<PlanCache> cache = make_cache(backend, 10000, open_db(file.path()));
    for (const ConvProblem& p : problems) ASSERT_TRUE(cache->acquire(scripted_handle(1), p).ok());
    EXPECT_EQ(cache->stats().tunes, problems.size());
    EXPECT_EQ(cache->stats().db_hits, 0u);
  }
  // Another "process": a new backend, database connection and cache.
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::shared_ptr<TuningDatabase> db = open_db(file.path());
  ASSERT_NE(db, nullptr);
  for (const ConvProblem& p : problems) {
    StatusOr<TuningRecord> r = db->find(scripted_key(p));
    ASSERT_TRUE(r.ok()) << "stored under the cache's key: " << r.status().to_string();
  }
  std::unique_ptr<PlanCache> cache = make_cache(backend, 10000, db);
  for (const ConvProblem& p : problems) {
    ProblemBuffers buffers(p, 3);
    Status s = cache->execute(scripted_handle(1), p, buffers.pointers());
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_LE(buffers.output_error(), relative_error_tolerance(p, 0));
  }
  AcquireOutcome outcome = AcquireOutcome::kTuned;
  ASSERT_TRUE(cache->acquire(scripted_handle(1), problems[0], &outcome).ok());
  EXPECT_EQ(outcome, AcquireOutcome::kHit);
  {
    // A third cache's first call finds the record in the database.
    std::unique_ptr<PlanCache> third =
        make_cache(std::make_shared<ScriptedBackend>(basic_engines()), 10000, db);
    outcome = AcquireOutcome::kTuned;
    ASSERT_TRUE(third->acquire(scripted_handle(1), problems[0], &outcome).ok());
    EXPECT_EQ(outcome, AcquireOutcome::kDatabaseHit);
  }
  // A second handle clones from the record now in memory, without asking the database again.
  for (const ConvProblem& p : problems) ASSERT_TRUE(cache->acquire(scripted_handle(2), p).ok());
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.tunes, 0u);
  EXPECT_EQ(s.db_hits, problems.size());
  EXPECT_EQ(s.clones, 2 * problems.size());
  EXPECT_EQ(backend->heuristic_queries.load(), 0);
  EXPECT_EQ(backend->timings.load(), 0);
}

TEST(PlanCacheDatabase, StoredRecordThatNoLongerBuildsIsDiscardedAndRetuned) {
  std::shared_ptr<TuningDatabase> db = open_db(":memory:");
  ASSERT_NE(db, nullptr);
  const ConvProblem p = small_problem(2);
  ASSERT_TRUE(db->put(stored_record(p, /*engine_id=*/42, "")).ok());  // no such engine now
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend, 10000, db);
  StatusOr<PlanRef> ref = cache->acquire(scripted_handle(1), p);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  EXPECT_NE(ref->plan().config().engine_id, 42);
  EXPECT_EQ(cache->stats().tunes, 1u);
  EXPECT_EQ(cache->stats().db_hits, 0u);
  StatusOr<TuningRecord> now = db->find(scripted_key(p));
  ASSERT_TRUE(now.ok()) << now.status().to_string();
  EXPECT_EQ(now->config, ref->plan().config()) << "the new record replaced the stale one";
}

std::vector<ScriptedEngine> with_runtime_compiled_engine() {
  std::vector<ScriptedEngine> engines = basic_engines();
  ScriptedEngine rtc;
  rtc.id = 3;
  rtc.notes = kNoteRuntimeCompilation;
  rtc.in_heuristics = false;
  engines.push_back(rtc);
  return engines;
}

TEST(PlanCacheDatabase, StoredPlanJsonIsUsedToClone) {
  std::shared_ptr<TuningDatabase> db = open_db(":memory:");
  ASSERT_NE(db, nullptr);
  const ConvProblem p = small_problem(0);
  ASSERT_TRUE(db->put(stored_record(p, 3, "scripted:eng3")).ok());
  auto backend = std::make_shared<ScriptedBackend>(with_runtime_compiled_engine());
  std::unique_ptr<PlanCache> cache = make_cache(backend, 10000, db);
  for (int h = 1; h <= 3; ++h) {
    ProblemBuffers buffers(p, 3);
    Status s = cache->execute(scripted_handle(h), p, buffers.pointers());
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_LE(buffers.output_error(), relative_error_tolerance(p, 0));
  }
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.db_hits, 1u);
  EXPECT_EQ(s.tunes, 0u);
  EXPECT_EQ(s.clones, 3u);
  EXPECT_EQ(s.json_clones, 3u);
  EXPECT_EQ(backend->json_builds.load(), 3);
  EXPECT_EQ(backend->builds.load(), 0);
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
}

TEST(PlanCacheDatabase, CloneFallsBackToBuildWhenThePlanJsonFails) {
  std::shared_ptr<TuningDatabase> db = open_db(":memory:");
  ASSERT_NE(db, nullptr);
  const ConvProblem p = small_problem(1);
  ASSERT_TRUE(db->put(stored_record(p, 3, "{\"from\": \"another cuDNN\"}")).ok());
  auto backend = std::make_shared<ScriptedBackend>(with_runtime_compiled_engine());
  std::unique_ptr<PlanCache> cache = make_cache(backend, 10000, db);
  for (int h = 1; h <= 2; ++h) {
    StatusOr<PlanRef> ref = cache->acquire(scripted_handle(h), p);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    EXPECT_EQ(ref->plan().config().engine_id, 3);
    EXPECT_EQ(ref->plan().handle(), scripted_handle(h));
  }
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.db_hits, 1u);
  EXPECT_EQ(s.clones, 2u);
  EXPECT_EQ(s.json_clones, 0u);
  EXPECT_EQ(backend->json_builds.load(), 0);
  EXPECT_EQ(backend->builds.load(), 2);
}

// A database whose writes fail (a read-only file, a full disk).
class UnwritableDatabase final : public TuningDatabase {
 public:
  const DbOpenReport& report() const override { return report_; }
  StatusOr<TuningRecord> find(const std::string& key) override {
    ++finds;
    return not_found("no record under " + key);
  }
  Status put(const TuningRecord&) override {
    ++puts;
    return {StatusCode::kIoError, "attempt to write a readonly database"};
  }
  Status erase(const std::string&) override { return ok_status(); }
  StatusOr<std::vector<TuningRecord>> list(int64_t*) override {
    return std::vector<TuningRecord>{};
  }
  StatusOr<DbVerifyReport> verify() override { return DbVerifyReport{}; }
  StatusOr<int64_t> prune(const PruneFilter&) override { return int64_t{0}; }
  StatusOr<std::string> export_json() override { return std::string("{}"); }
  StatusOr<int64_t> import_json(std::string_view, bool) override { return int64_t{0}; }
  int64_t skipped_records() const override { return 0; }

  std::atomic<int> finds{0};
  std::atomic<int> puts{0};

 private:
  DbOpenReport report_;
};

TEST(PlanCacheDatabase, WriteFailureIsReportedOnceAndIsNotFatal) {
  auto db = std::make_shared<UnwritableDatabase>();
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend, 10000, db);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    StatusOr<PlanRef> ref = cache->acquire(scripted_handle(1), small_problem(i));
    EXPECT_TRUE(ref.ok()) << ref.status().to_string();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(db->finds.load(), 3);
  EXPECT_EQ(db->puts.load(), 3);
  EXPECT_EQ(cache->stats().tunes, 3u);
  const size_t first = err.find("readonly");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("readonly", first + 1), std::string::npos)
      << "reported more than once: " << err;
}

}  // namespace
}  // namespace convplan::testing
