// PlanCache::prepare (issue 21) on the scripted backend: a suite's problems tuned several at once
// on worker handles of the cache's own, each distinct problem once, one candidate timed at a time
// on the device; later calls on any handle clone the tuned plans. Also run under ThreadSanitizer
// (scripts/sanitize runs every cache test).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cache/cache_test_support.h"
#include "convplan/plan_cache.h"
#include "support/scripted_backend.h"

namespace convplan::testing {
namespace {

TEST(PlanCachePrepare, TunesEachDistinctProblemOnceThenEveryHandleClones) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  backend->set_time_delay_us(200);  // a timing long enough that overlapping ones would be seen
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  std::vector<ConvProblem> problems = small_problems(12);
  problems.push_back(problems[0]);  // repeats are tuned once
  problems.push_back(problems[5]);
  ASSERT_TRUE(cache->prepare(0, problems, 4).ok());
  CacheStats s = cache->stats();
  EXPECT_EQ(s.tunes, 12u);
  EXPECT_EQ(s.records, 12u);
  EXPECT_EQ(s.plans, 0u) << "the worker handles' plans are dropped with them";
  EXPECT_EQ(backend->live_handles.load(), 0);
  EXPECT_EQ(backend->max_concurrent_timings.load(), 1) << "two tunes timed at once on one device";
  EXPECT_EQ(backend->foreign_handle_executions.load(), 0);

  for (int h = 1; h <= 2; ++h) {
    for (size_t i = 0; i < 12; ++i) {
      SCOPED_TRACE(problems[i].to_string());
      AcquireOutcome outcome = AcquireOutcome::kTuned;
      StatusOr<PlanRef> plan = cache->acquire(scripted_handle(h), problems[i], &outcome);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      EXPECT_TRUE(outcome == AcquireOutcome::kClone || outcome == AcquireOutcome::kJsonClone)
          << to_string(outcome);
      EXPECT_EQ((*plan)->config().engine_id, 1) << "the fastest engine";
      ProblemBuffers buffers(problems[i], static_cast<uint32_t>(i));
      const Status run = cache->execute(scripted_handle(h), problems[i], buffers.pointers());
      ASSERT_TRUE(run.ok()) << run.to_string();
      backend->synchronize(scripted_handle(h));
      EXPECT_LT(buffers.output_error(), 1e-6);
    }
  }
  EXPECT_EQ(cache->stats().tunes, 12u);
}

TEST(PlanCachePrepare, ProblemsAlreadyTunedAreNotTunedAgain) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  const std::vector<ConvProblem> problems = small_problems(6);
  ASSERT_TRUE(cache->acquire(scripted_handle(1), problems[2]).ok());
  ASSERT_TRUE(cache->prepare(0, problems, 2).ok());
  EXPECT_EQ(cache->stats().tunes, 6u);
  ASSERT_TRUE(cache->prepare(0, problems, 2).ok());
  EXPECT_EQ(cache->stats().tunes, 6u);
  // The caller's handle keeps its own plan.
  AcquireOutcome outcome = AcquireOutcome::kTuned;
  ASSERT_TRUE(cache->acquire(scripted_handle(1), problems[2], &outcome).ok());
  EXPECT_EQ(outcome, AcquireOutcome::kHit);
}

TEST(PlanCachePrepare, FailuresAreCountedAfterTheOthersWereTuned) {
  std::vector<ScriptedEngine> engines = basic_engines();
  for (ScriptedEngine& e : engines) {
    e.supports = [](const ConvProblem& p) { return p.n != 7; };
  }
  auto backend = std::make_shared<ScriptedBackend>(engines);
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  std::vector<ConvProblem> problems = small_problems(6);
  problems[1].n = 7;
  problems[4].n = 7;
  const Status s = cache->prepare(0, problems, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("prepare: 2 of 6 problems failed; the first: "), std::string::npos)
      << s.to_string();
  EXPECT_EQ(cache->stats().records, 4u);
  EXPECT_EQ(backend->live_handles.load(), 0);
}

// A run that never finished (kDeadlineExceeded) leaves the device running it: preparing stops
// taking problems, says so first, and keeps its worker handles, whose destruction would wait for
// the device.
TEST(PlanCachePrepare, ARunPastItsDeadlineStopsPreparingAndKeepsTheHandles) {
  std::vector<ScriptedEngine> engines = basic_engines();
  for (ScriptedEngine& e : engines) e.behavior = EngineBehavior::kNeverFinishes;
  auto backend = std::make_shared<ScriptedBackend>(engines);
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  const Status s = cache->prepare(0, small_problems(6), 1);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
  EXPECT_NE(s.message().find("prepare: 1 of 6 problems failed; the first: "), std::string::npos)
      << s.to_string();
  EXPECT_EQ(backend->timings.load(), 1) << "no tune after the one that did not finish";
  EXPECT_EQ(backend->live_handles.load(), 1);
}

TEST(PlanCachePrepare, BadArgumentsNameTheirValueAndTuneNothing) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  std::vector<ConvProblem> problems = small_problems(3);
  Status s = cache->prepare(0, problems, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("threads=0"), std::string::npos) << s.to_string();
  problems[1].groups = 3;
  problems[1].c = 4;
  s = cache->prepare(0, problems, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("problem 1"), std::string::npos) << s.to_string();
  EXPECT_EQ(cache->stats().tunes, 0u);
  EXPECT_TRUE(cache->prepare(0, std::vector<ConvProblem>{}, 4).ok());
}

TEST(PlanCachePrepare, BackgroundModeTunesInLimitedModeBeforeReturning) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  TunePolicy background;
  background.mode = TuneMode::kBackground;
  const std::vector<ConvProblem> problems = small_problems(4);
  ASSERT_TRUE(cache->prepare(0, problems, background, 2).ok());
  EXPECT_EQ(cache->stats().background_tunes, 0u);
  for (const ConvProblem& p : problems) {
    std::optional<TuningRecord> r = cache->find_record(scripted_handle(1), p, background);
    ASSERT_TRUE(r.has_value()) << p.to_string();
    EXPECT_EQ(r->config.engine_id, 1);
    AcquireOutcome outcome = AcquireOutcome::kTuned;
    ASSERT_TRUE(cache->acquire(scripted_handle(1), p, background, &outcome).ok());
    EXPECT_NE(outcome, AcquireOutcome::kProvisional);
  }
}

}  // namespace
}  // namespace convplan::testing
