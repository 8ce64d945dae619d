// PlanCache under many threads (also run under ThreadSanitizer): single-flight tuning, clones per
// handle, hits and other keys never blocked by a tune, eviction and forgetting under load.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "cache/cache_test_support.h"
#include "convplan/plan_cache.h"
#include "convplan/reference.h"
#include "support/scripted_backend.h"

namespace convplan::testing {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Executes through the cache on fresh data; returns false (with a failure recorded) when the
// call fails or the result is off the reference.
bool execute_and_check(PlanCache& cache, int handle, const ConvProblem& p, uint32_t seed) {
  ProblemBuffers buffers(p, seed);
  Status s = cache.execute(scripted_handle(handle), p, buffers.pointers());
  if (!s.ok()) {
    ADD_FAILURE() << "handle " << handle << " " << p.to_string() << ": " << s.to_string();
    return false;
  }
  const double error = buffers.output_error();
  if (!(error <= relative_error_tolerance(p, 0))) {
    ADD_FAILURE() << "handle " << handle << " " << p.to_string() << ": relative error " << error;
    return false;
  }
  return true;
}

// T threads over H handles and K problems in random order: thread t first works on handle t,
// then (after all are done) on handle t+1, so every handle passes between threads, one at a time.
TEST(PlanCacheConcurrency, EachKeyIsTunedOnceAndClonedOncePerOtherHandle) {
  constexpr int kThreads = 8, kHandles = 8, kProblems = 20;
  const std::vector<ConvProblem> problems = small_problems(kProblems);
  ASSERT_EQ(problems.size(), static_cast<size_t>(kProblems));
  int64_t queries_per_tune = 0;
  for (const ConvProblem& p : problems) {
    const int64_t q = heuristic_queries_per_tune(basic_engines(), p);
    if (queries_per_tune == 0) queries_per_tune = q;
    ASSERT_EQ(q, queries_per_tune) << "the test assumes one count for all problems";
  }

  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  backend->set_build_delay_us(200);  // widen the windows where threads meet
  backend->set_heuristics_delay_us(300);
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  std::barrier sync(kThreads);
  std::atomic<int> correct{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      std::vector<int> order(kProblems);
      for (int i = 0; i < kProblems; ++i) order[i] = i;
      sync.arrive_and_wait();
      for (int phase = 0; phase < 2; ++phase) {
        const int handle = (t + phase) % kHandles;
        std::shuffle(order.begin(), order.end(), rng);
        for (int i : order) {
          if (execute_and_check(*cache, handle, problems[i], static_cast<uint32_t>(t * 100 + i))) {
            ++correct;
          }
        }
        sync.arrive_and_wait();  // the handle is passed on only when its thread is done with it
      }
    });
  }
  for (std::thread& th : threads) th.join();

  const CacheStats s = cache->stats();
  EXPECT_EQ(correct.load(), 2 * kThreads * kProblems);
  EXPECT_EQ(s.tunes, static_cast<uint64_t>(kProblems)) << s.to_string();
  EXPECT_EQ(backend->heuristic_queries.load(), kProblems * queries_per_tune);
  EXPECT_EQ(s.clones, static_cast<uint64_t>(kProblems * (kHandles - 1))) << s.to_string();
  EXPECT_EQ(s.misses, static_cast<uint64_t>(kProblems * kHandles));
  EXPECT_EQ(s.hits, static_cast<uint64_t>(kProblems * kHandles));
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.plans, static_cast<size_t>(kProblems * kHandles));
  EXPECT_EQ(s.records, static_cast<size_t>(kProblems));
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
  EXPECT_EQ(backend->concurrent_handle_uses.load(), 0);
}

TEST(PlanCacheConcurrency, ThreadsWaitingForASlowTuneDoNotTuneAgain) {
  constexpr int kThreads = 8;
  const ConvProblem p = small_problem(4);
  const int64_t queries_per_tune = heuristic_queries_per_tune(basic_engines(), p);
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  backend->set_heuristics_delay_us(50000);
  backend->set_build_delay_us(20000);
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      StatusOr<PlanRef> ref = cache->acquire(scripted_handle(t), p);
      if (ref.ok() && ref->plan().handle() == scripted_handle(t)) ++ok;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(ok.load(), kThreads);
  EXPECT_EQ(cache->stats().tunes, 1u);
  EXPECT_EQ(cache->stats().clones, static_cast<uint64_t>(kThreads - 1));
  EXPECT_EQ(backend->heuristic_queries.load(), queries_per_tune);
}

TEST(PlanCacheConcurrency, HitsAndOtherKeysProceedWhileOneKeyTunes) {
  const ConvProblem hot = small_problem(0), known = small_problem(1), slow = small_problem(2),
                    other = small_problem(3);
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  ASSERT_TRUE(execute_and_check(*cache, 2, hot, 1));    // a plan on handle 2
  ASSERT_TRUE(execute_and_check(*cache, 2, known, 2));  // a record to clone on handle 3

  constexpr int kDelayUs = 600000;
  backend->set_heuristics_delay_us(kDelayUs);  // every tune from now on sits in its heuristics
  const int64_t queries = backend->heuristic_queries.load();
  std::atomic<bool> slow_done{false};
  const Clock::time_point slow_start = Clock::now();
  std::thread tuning([&] {
    EXPECT_TRUE(execute_and_check(*cache, 1, slow, 3));
    slow_done = true;
  });
  while (backend->heuristic_queries.load() == queries) std::this_thread::yield();  // tuning now

  // A hit on another key, on another handle: not held up by the tune.
  Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(execute_and_check(*cache, 2, hot, 4));
  const double hit_ms = ms_since(t0);
  EXPECT_FALSE(slow_done.load());
  EXPECT_LT(hit_ms, kDelayUs / 1000.0 / 3) << "the hit waited for the tune";

  // A clone of another key's record on a third handle: not held up either.
  t0 = Clock::now();
  EXPECT_TRUE(execute_and_check(*cache, 3, known, 5));
  const double clone_ms = ms_since(t0);
  EXPECT_FALSE(slow_done.load());
  EXPECT_LT(clone_ms, kDelayUs / 1000.0 / 3) << "the clone waited for the tune";

  // Another key's tune runs at the same time, not after.
  t0 = Clock::now();
  EXPECT_TRUE(execute_and_check(*cache, 4, other, 6));
  const double other_ms = ms_since(t0);
  tuning.join();
  const double slow_ms = ms_since(slow_start);
  // Serialized, the second tune would end no sooner than the first's end plus its own time.
  EXPECT_LT(other_ms, slow_ms + kDelayUs / 1000.0 / 2)
      << "other tune " << other_ms << " ms, slow tune " << slow_ms << " ms";
  EXPECT_EQ(cache->stats().tunes, 4u);
  EXPECT_EQ(backend->concurrent_handle_uses.load(), 0);
}

TEST(PlanCacheConcurrency, FailedTuneGivesWaitersItsErrorCachesNothingAndIsRetriedLater) {
  constexpr int kThreads = 4;
  const ConvProblem p = small_problem(5);
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  backend->fail_next_builds(1 << 20);
  backend->set_heuristics_delay_us(100000);
  std::barrier start(kThreads);
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      if (!cache->acquire(scripted_handle(t), p).ok()) ++failed;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failed.load(), kThreads);
  EXPECT_EQ(cache->stats().tunes, 1u) << "the waiters shared the leader's failure";
  EXPECT_EQ(cache->stats().records, 0u);
  EXPECT_EQ(cache->stats().plans, 0u);
  backend->fail_next_builds(0);
  backend->set_heuristics_delay_us(0);
  ASSERT_TRUE(cache->acquire(scripted_handle(0), p).ok());
  EXPECT_EQ(cache->stats().tunes, 2u);
}

// Hits, misses and evictions on every thread at once, with a capacity far below the working set.
TEST(PlanCacheConcurrency, EvictionUnderLoadKeepsResultsCorrect) {
  constexpr int kThreads = 8, kProblems = 12, kRounds = 4;
  const std::vector<ConvProblem> problems = small_problems(kProblems);
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend, /*capacity=*/5);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t + 17));
      for (int r = 0; r < kRounds * kProblems; ++r) {
        const int i = static_cast<int>(rng() % kProblems);
        execute_and_check(*cache, t, problems[i], static_cast<uint32_t>(r));
        // Pinned plans survive the evictions of other threads.
        StatusOr<PlanRef> ref = cache->acquire(scripted_handle(t), problems[(i + 1) % kProblems]);
        ASSERT_TRUE(ref.ok()) << ref.status().to_string();
        ProblemBuffers buffers(problems[(i + 1) % kProblems], 1);
        std::vector<unsigned char> ws(static_cast<size_t>(ref->plan().workspace_bytes()));
        Status s = ref->plan().execute(scripted_handle(t), buffers.pointers(),
                                       ws.empty() ? nullptr : ws.data());
        ASSERT_TRUE(s.ok()) << s.to_string();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.tunes, static_cast<uint64_t>(kProblems));
  EXPECT_GT(s.evictions, 0u);
  // Plans pinned while another thread evicted were skipped: at most one per thread over.
  EXPECT_LE(s.plans, 5u + kThreads);
  EXPECT_EQ(static_cast<size_t>(backend->live_plans.load()), s.plans);
  cache->set_capacity(5);
  EXPECT_LE(cache->stats().plans, 5u);
  EXPECT_EQ(static_cast<size_t>(backend->live_plans.load()), cache->stats().plans);
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
  EXPECT_EQ(backend->concurrent_handle_uses.load(), 0);
}

// Threads that forget their handle and come back at the same address, while others evict.
TEST(PlanCacheConcurrency, ForgettingHandlesUnderLoadNeverServesAStalePlan) {
  constexpr int kThreads = 6, kProblems = 6, kRounds = 5;
  const std::vector<ConvProblem> problems = small_problems(kProblems);
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend, /*capacity=*/20);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        for (int i = 0; i < kProblems; ++i) {
          execute_and_check(*cache, t, problems[(i + t) % kProblems], static_cast<uint32_t>(i));
        }
        cache->forget_handle(scripted_handle(t));
        // The application destroys the handle and gets a new one at the same address: a plan of
        // the old one served now would execute on a destroyed handle (counted as stale).
        backend->recreate_handle(scripted_handle(t));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const CacheStats s = cache->stats();
  EXPECT_EQ(backend->stale_handle_executions.load(), 0) << "a forgotten handle's plan was served";
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
  EXPECT_EQ(s.tunes, static_cast<uint64_t>(kProblems));
  EXPECT_EQ(s.plans, 0u);
  EXPECT_EQ(backend->live_plans.load(), 0);
  EXPECT_EQ(backend->live_allocations.load(), 0);
  // Each round starts on a fresh handle: its first call of each problem misses.
  EXPECT_EQ(s.misses, static_cast<uint64_t>(kThreads * kRounds * kProblems));
  EXPECT_EQ(s.hits, 0u);
}

// The check above can fail: a handle recreated without forget_handle gets its old plans served,
// and the scripted backend reports each as stale.
TEST(PlanCacheConcurrency, AHandleRecreatedWithoutForgettingIsServedStalePlans) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend, /*capacity=*/20);
  const ConvProblem p = small_problem(0);
  ProblemBuffers buffers(p, 1);
  ASSERT_TRUE(cache->execute(scripted_handle(0), p, buffers.pointers()).ok());
  backend->recreate_handle(scripted_handle(0));
  Status s;
  EXPECT_NONFATAL_FAILURE(s = cache->execute(scripted_handle(0), p, buffers.pointers()),
                          "executed after the handle was recreated");
  EXPECT_EQ(s.code(), StatusCode::kWrongHandle);
  EXPECT_EQ(backend->stale_handle_executions.load(), 1);
}

// With completions that lag, results are right only through the handle's stream: the cache
// and the tuner order their reads after the work, and a read that skips the stream sees the old
// output (the check that the lag is real).
TEST(PlanCacheConcurrency, LaggingCompletionsAreOrderedByTheHandlesStream) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  backend->set_completion_lag(true);
  std::unique_ptr<PlanCache> cache = make_cache(backend, /*capacity=*/20);
  constexpr int kThreads = 4;
  const std::vector<ConvProblem> problems = small_problems(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < problems.size(); ++i) {
        ProblemBuffers buffers(problems[i], static_cast<uint32_t>(i));
        Status s = cache->execute(scripted_handle(t), problems[i], buffers.pointers());
        ASSERT_TRUE(s.ok()) << s.to_string();
        EXPECT_FALSE(buffers.output_error() <= relative_error_tolerance(problems[i], 0))
            << "read before the stream was synchronized: the output must still be old";
        backend->synchronize(scripted_handle(t));
        EXPECT_LE(buffers.output_error(), relative_error_tolerance(problems[i], 0));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_GT(backend->lagged_runs.load(), 0);
  EXPECT_EQ(cache->stats().tunes, problems.size());
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);
}

}  // namespace
}  // namespace convplan::testing
