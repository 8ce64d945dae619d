// Background tuning (TuneMode::kBackground, issue 21) on the scripted backend: the first call of
// a key gets the heuristic's first validated candidate at once, the key is tuned on the cache's
// own thread and handle, and each handle then moves to the tuned plan on its own next call. Also
// run under ThreadSanitizer (scripts/sanitize runs every cache test).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/cache_test_support.h"
#include "convplan/plan_cache.h"
#include "convplan/reference.h"
#include "convplan/tuning_db.h"
#include "support/scripted_backend.h"

namespace convplan::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Holds every timed run (the background tune's, not the provisional one's: heuristic mode times
// nothing) until released, so that a test sees the provisional phase for certain.
class Gate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// basic_engines: the heuristics list 0 first (3 ms), the fastest is 1 (1 ms).
std::vector<ScriptedEngine> gated_engines(std::shared_ptr<Gate> gate) {
  std::vector<ScriptedEngine> e = basic_engines();
  for (ScriptedEngine& s : e) {
    s.time_for = [gate, t = s.time_ms](const EngineConfig&) {
      if (gate) gate->wait();
      return t;
    };
  }
  return e;
}

TunePolicy background_policy() {
  TunePolicy p;
  p.mode = TuneMode::kBackground;
  return p;
}

std::unique_ptr<PlanCache> background_cache(std::shared_ptr<ScriptedBackend> backend,
                                            std::shared_ptr<TuningDatabase> db = nullptr) {
  PlanCacheOptions options;
  options.backend = std::move(backend);
  options.policy = background_policy();
  options.capacity = 10000;
  options.database = std::move(db);
  auto cache = PlanCache::create(std::move(options));
  EXPECT_TRUE(cache.ok()) << cache.status().to_string();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

bool wait_for(const std::function<bool()>& condition, double seconds = 20) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

int64_t engine_of(PlanCache& cache, int handle, const ConvProblem& p) {
  auto ref = cache.acquire(scripted_handle(handle), p);
  EXPECT_TRUE(ref.ok()) << ref.status().to_string();
  return ref.ok() ? ref->plan().config().engine_id : -1;
}

TEST(PlanCacheBackground, ProvisionalPlanAtOnceThenTheTunedPlanPerHandle) {
  auto gate = std::make_shared<Gate>();
  auto backend = std::make_shared<ScriptedBackend>(gated_engines(gate));
  auto db_or = TuningDatabase::open(":memory:");
  ASSERT_TRUE(db_or.ok());
  std::shared_ptr<TuningDatabase> db = std::move(db_or).value();
  auto cache = background_cache(backend, db);
  ASSERT_TRUE(cache);
  struct OpenAtExit {  // destroyed before the cache: a failed assertion cannot leave it waiting
    std::shared_ptr<Gate> gate;
    ~OpenAtExit() { gate->open(); }
  } open_at_exit{gate};
  const ConvProblem p = small_problem(0);

  // Provisional: the heuristic's first candidate, validated, on every handle while tuning runs.
  auto held = cache->acquire(scripted_handle(0), p);
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  EXPECT_EQ(held->plan().config().engine_id, 0);
  EXPECT_EQ(engine_of(*cache, 1, p), 0);
  EXPECT_EQ(engine_of(*cache, 1, p), 0);
  CacheStats s = cache->stats();
  EXPECT_EQ(s.provisional_calls, 3u);
  EXPECT_EQ(s.background_tunes, 0u);
  // The background tune reaches its first timed run and is held there.
  EXPECT_TRUE(wait_for([&] { return backend->timings.load() == 1; }));
  auto record = cache->find_record(scripted_handle(0), p, background_policy());
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->config.engine_id, 0);
  EXPECT_EQ(db->find(record->key()).status().code(), StatusCode::kNotFound);  // never stored

  gate->open();
  ASSERT_TRUE(wait_for([&] { return cache->stats().background_tunes == 1; }));
  // Each handle moves to the tuned plan on its own next call; a new handle clones it directly.
  EXPECT_EQ(engine_of(*cache, 1, p), 1) << cache->stats().to_string();
  EXPECT_EQ(engine_of(*cache, 2, p), 1);
  // Handle 0's provisional plan is still pinned by `held`: it stays valid and runs correctly
  // while the handle's next call gets the tuned plan.
  EXPECT_EQ(engine_of(*cache, 0, p), 1);
  ProblemBuffers buffers(p, 5);
  ASSERT_TRUE(held->plan().execute(scripted_handle(0), buffers.pointers(), nullptr).ok());
  EXPECT_LE(buffers.output_error(), relative_error_tolerance(p, 0));
  held = PlanRef();

  s = cache->stats();
  EXPECT_EQ(s.provisional_calls, 3u);  // nothing since the tune finished
  EXPECT_EQ(s.failures, 0u);
  // The database keeps the tuned record, under limited mode's key (shared with limited callers).
  TunePolicy limited;
  limited.mode = TuneMode::kLimited;
  const std::string key = scripted_key(p, limited);
  EXPECT_EQ(key, scripted_key(p, background_policy()));
  auto stored = db->find(key);
  ASSERT_TRUE(stored.ok()) << stored.status().to_string();
  EXPECT_EQ(stored->config.engine_id, 1);
  EXPECT_EQ(cache->find_record(scripted_handle(0), p, background_policy())->config.engine_id, 1);
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
  EXPECT_EQ(backend->created_handles.load(), 1);  // the worker's own handle
}

TEST(PlanCacheBackground, AStoredRecordIsServedAtOnceWithoutAProvisionalPhase) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  auto db = std::shared_ptr<TuningDatabase>(TuningDatabase::open(":memory:").value().release());
  {
    auto first = background_cache(backend, db);
    ASSERT_TRUE(first);
    engine_of(*first, 0, small_problem(1));
    ASSERT_TRUE(wait_for([&] { return first->stats().background_tunes == 1; }));
  }
  auto second = background_cache(backend, db);
  ASSERT_TRUE(second);
  EXPECT_EQ(engine_of(*second, 0, small_problem(1)), 1);
  EXPECT_EQ(second->stats().provisional_calls, 0u);
  EXPECT_EQ(second->stats().db_hits, 1u);
}

TEST(PlanCacheBackground, DestroyingTheCacheDuringABackgroundTuneIsPromptAndLeaksNothing) {
  std::vector<ScriptedEngine> engines = basic_engines();
  for (ScriptedEngine& s : engines) {  // a slow tune: 20 ms per timed run
    s.time_for = [t = s.time_ms](const EngineConfig&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return t;
    };
  }
  auto backend = std::make_shared<ScriptedBackend>(engines);
  auto db = std::shared_ptr<TuningDatabase>(TuningDatabase::open(":memory:").value().release());
  auto cache = background_cache(backend, db);
  ASSERT_TRUE(cache);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(engine_of(*cache, 0, small_problem(i)), 0);
  // A tune is under way (in its timed runs), three more wait in the queue.
  ASSERT_TRUE(wait_for([&] { return backend->timings.load() >= 1; }));
  const auto start = Clock::now();
  cache.reset();  // four tunes of about 0.3 s each were queued or running
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.0);
  EXPECT_EQ(backend->live_plans.load(), 0);
  EXPECT_EQ(backend->live_allocations.load(), 0);
  EXPECT_EQ(backend->live_handles.load(), 0);
  // Whatever reached the database is a tuned record, never a provisional one.
  auto all = db->list();
  ASSERT_TRUE(all.ok());
  for (const TuningRecord& r : *all) EXPECT_EQ(r.config.engine_id, 1) << r.problem;
}

// A process that exits while a background tune runs (the cache a static, destroyed at exit)
// exits cleanly with its own status.
TEST(PlanCacheBackgroundDeathTest, ProcessExitDuringBackgroundTuningIsClean) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::vector<ScriptedEngine> engines = basic_engines();
        for (ScriptedEngine& s : engines) {
          s.time_for = [t = s.time_ms](const EngineConfig&) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            return t;
          };
        }
        static std::unique_ptr<PlanCache> cache =
            background_cache(std::make_shared<ScriptedBackend>(engines));
        if (engine_of(*cache, 0, small_problem(2)) != 0) std::exit(3);
        std::exit(7);
      },
      ::testing::ExitedWithCode(7), "");
}

// 8 threads x 4 handles each over 6 keys: every call's result matches the reference, no plan
// runs on a foreign handle or on two threads at once, each key is tuned once in the background,
// and once the tunes are done every handle serves the tuned plan.
TEST(PlanCacheBackground, EightThreadsTimesFourHandlesServeCorrectResultsThroughTheSwitch) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  backend->set_build_delay_us(200);
  auto db = std::shared_ptr<TuningDatabase>(TuningDatabase::open(":memory:").value().release());
  auto cache = background_cache(backend, db);
  ASSERT_TRUE(cache);
  const std::vector<ConvProblem> problems = small_problems(6);
  constexpr int kThreads = 8, kHandlesEach = 4, kRounds = 6;
  auto work = [&](int t, int rounds) {
    for (int r = 0; r < rounds; ++r) {
      for (int h = 0; h < kHandlesEach; ++h) {
        const int handle = t * kHandlesEach + h;
        for (size_t i = 0; i < problems.size(); ++i) {
          const ConvProblem& p = problems[(i + static_cast<size_t>(t + r)) % problems.size()];
          ProblemBuffers buffers(p, static_cast<uint32_t>(t * 1000 + r * 10 + h));
          Status s = cache->execute(scripted_handle(handle), p, buffers.pointers());
          if (!s.ok()) {
            ADD_FAILURE() << "handle " << handle << ": " << s.to_string();
            return;
          }
          if (!(buffers.output_error() <= relative_error_tolerance(p, 0))) {
            ADD_FAILURE() << "handle " << handle << " " << p.to_string() << ": wrong result";
            return;
          }
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t, kRounds);
  for (std::thread& th : threads) th.join();
  ASSERT_TRUE(wait_for([&] { return cache->stats().background_tunes == problems.size(); }));
  threads.clear();
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t, 1);  // the switch, under load
  for (std::thread& th : threads) th.join();
  for (int handle = 0; handle < kThreads * kHandlesEach; ++handle) {
    for (const ConvProblem& p : problems) EXPECT_EQ(engine_of(*cache, handle, p), 1) << handle;
  }
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.tunes, problems.size());  // each key tuned once, in the background
  EXPECT_GT(s.provisional_calls, 0u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
  EXPECT_EQ(backend->concurrent_handle_uses.load(), 0);
  auto all = db->list();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), problems.size());
  for (const TuningRecord& r : *all) EXPECT_EQ(r.config.engine_id, 1) << r.problem;
}

}  // namespace
}  // namespace convplan::testing
