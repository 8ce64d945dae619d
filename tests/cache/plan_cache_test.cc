// PlanCache on the scripted backend, one thread at a time: hits, clones, eviction, capacity,
// failures, forgotten handles, workspace, policies, destruction.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cache/cache_test_support.h"
#include "convplan/plan_cache.h"
#include "convplan/reference.h"
#include "support/scripted_backend.h"

namespace convplan::testing {
namespace {

// Runs a pinned plan directly, with a workspace of its size.
Status run_plan(Plan& plan, int handle, ProblemBuffers& buffers) {
  std::vector<unsigned char> workspace(static_cast<size_t>(plan.workspace_bytes()));
  return plan.execute(scripted_handle(handle), buffers.pointers(),
                      workspace.empty() ? nullptr : workspace.data());
}

class PlanCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { use_engines(basic_engines()); }

  void use_engines(std::vector<ScriptedEngine> engines, size_t capacity = 10000) {
    cache_.reset();
    backend_ = std::make_shared<ScriptedBackend>(std::move(engines));
    cache_ = make_cache(backend_, capacity);
    ASSERT_NE(cache_, nullptr);
  }

  PlanRef acquire(int handle, const ConvProblem& p) {
    StatusOr<PlanRef> ref = cache_->acquire(scripted_handle(handle), p);
    EXPECT_TRUE(ref.ok()) << ref.status().to_string();
    return ref.ok() ? std::move(ref).value() : PlanRef();
  }

  // Executes through the cache on fresh data and checks the result against the reference.
  void execute_and_check(int handle, const ConvProblem& p, DeviceAllocator* allocator = nullptr) {
    ProblemBuffers buffers(p, static_cast<uint32_t>(1000 + handle));
    Status s = cache_->execute(scripted_handle(handle), p, buffers.pointers(), allocator);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_LE(buffers.output_error(), relative_error_tolerance(p, 0)) << p.to_string();
  }

  std::shared_ptr<ScriptedBackend> backend_;
  std::unique_ptr<PlanCache> cache_;
  const ConvProblem a_ = small_problem(0);
  const ConvProblem b_ = small_problem(1);
  const ConvProblem c_ = small_problem(2);
};

TEST_F(PlanCacheTest, HitReturnsPlanBuiltForSameHandle) {
  Plan* first;
  {
    PlanRef ref = acquire(1, a_);
    ASSERT_TRUE(ref);
    EXPECT_EQ(ref->handle(), scripted_handle(1));
    first = &ref.plan();
  }
  PlanRef again = acquire(1, a_);
  EXPECT_EQ(&again.plan(), first);
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.tunes, 1u);
  EXPECT_EQ(s.clones, 0u);
  EXPECT_EQ(s.plans, 1u);
  EXPECT_EQ(s.records, 1u);
}

// Regression (found on the H200 through the Python package): the hit path's key ignored the
// post-op chain, so the plain conv's plan was served for the same conv with "bias+relu".
TEST_F(PlanCacheTest, TheSameConvWithAnotherChainIsAnotherPlan) {
  ConvProblem chained = a_;
  chained.post_ops.push(PostOpKind::kBias);
  chained.post_ops.push(PostOpKind::kRelu);
  ConvProblem biased = a_;
  biased.post_ops.push(PostOpKind::kBias);
  PlanRef plain = acquire(1, a_);
  PlanRef with_relu = acquire(1, chained);
  PlanRef with_bias = acquire(1, biased);
  ASSERT_TRUE(plain && with_relu && with_bias);
  EXPECT_NE(&plain.plan(), &with_relu.plan());
  EXPECT_NE(&with_relu.plan(), &with_bias.plan());
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.plans, 3u);
}

TEST_F(PlanCacheTest, SecondHandleGetsACloneNotATune) {
  PlanRef on_first = acquire(1, a_);
  const int64_t queries = backend_->heuristic_queries.load();
  const int64_t timings = backend_->timings.load();
  PlanRef on_second = acquire(2, a_);
  ASSERT_TRUE(on_first && on_second);
  EXPECT_NE(&on_first.plan(), &on_second.plan());
  EXPECT_EQ(on_second->handle(), scripted_handle(2));
  EXPECT_EQ(on_second->config(), on_first->config());
  EXPECT_EQ(backend_->heuristic_queries.load(), queries) << "a clone asks no heuristics";
  EXPECT_EQ(backend_->timings.load(), timings) << "a clone times nothing";
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.tunes, 1u);
  EXPECT_EQ(s.clones, 1u);
  EXPECT_EQ(s.plans, 2u);
  EXPECT_EQ(s.records, 1u);
}

TEST_F(PlanCacheTest, AcquireReportsHowThisCallGotItsPlan) {
  auto outcome_of = [&](int handle, const ConvProblem& p) {
    AcquireOutcome outcome = AcquireOutcome::kWaited;
    StatusOr<PlanRef> ref = cache_->acquire(scripted_handle(handle), p, &outcome);
    EXPECT_TRUE(ref.ok()) << ref.status().to_string();
    return outcome;
  };
  EXPECT_EQ(outcome_of(1, a_), AcquireOutcome::kTuned);
  EXPECT_EQ(outcome_of(1, a_), AcquireOutcome::kHit);
  EXPECT_EQ(outcome_of(2, a_), AcquireOutcome::kClone);
  EXPECT_EQ(outcome_of(2, a_), AcquireOutcome::kHit);
  TunePolicy other = cache_->default_policy();
  other.deterministic = true;
  AcquireOutcome outcome = AcquireOutcome::kHit;
  ASSERT_TRUE(cache_->acquire(scripted_handle(1), a_, other, &outcome).ok());
  EXPECT_EQ(outcome, AcquireOutcome::kTuned) << "another policy is another key";
  EXPECT_STREQ(to_string(AcquireOutcome::kDatabaseHit), "database");

  std::vector<ScriptedEngine> engines(1);
  engines[0].id = 3;
  engines[0].notes = kNoteRuntimeCompilation;  // kept as plan JSON, cloned from it
  use_engines(engines);
  EXPECT_EQ(outcome_of(1, a_), AcquireOutcome::kTuned);
  EXPECT_EQ(outcome_of(2, a_), AcquireOutcome::kJsonClone);
}

// A call that misses a key another call is tuning waits for it and says so. Which of two calls
// gets there first is up to the scheduler, so each try uses a new problem until one waited.
TEST_F(PlanCacheTest, AcquireThatWaitsForAnotherCallsTuneSaysWaited) {
  backend_->set_build_delay_us(100000);  // a tune takes several 100 ms builds
  bool waited = false;
  for (int attempt = 0; attempt < 5 && !waited; ++attempt) {
    const ConvProblem p = small_problem(10 + attempt);
    const int64_t queries = backend_->heuristic_queries.load();
    AcquireOutcome first = AcquireOutcome::kHit;
    std::thread tuner([&] { EXPECT_TRUE(cache_->acquire(scripted_handle(1), p, &first).ok()); });
    while (backend_->heuristic_queries.load() == queries) std::this_thread::yield();  // tuning
    AcquireOutcome second = AcquireOutcome::kHit;
    EXPECT_TRUE(cache_->acquire(scripted_handle(2), p, &second).ok());
    tuner.join();
    EXPECT_EQ(first, AcquireOutcome::kTuned);
    EXPECT_TRUE(second == AcquireOutcome::kWaited || second == AcquireOutcome::kClone)
        << to_string(second);
    waited = second == AcquireOutcome::kWaited;
  }
  EXPECT_TRUE(waited);
}

TEST_F(PlanCacheTest, ExecuteWritesTheReferenceResultOnEveryHandle) {
  for (int h = 1; h <= 3; ++h) {
    for (int i = 0; i < 6; ++i) execute_and_check(h, small_problem(i));
  }
  EXPECT_EQ(cache_->stats().tunes, 6u);
  EXPECT_EQ(cache_->stats().clones, 12u);
  EXPECT_EQ(backend_->foreign_handle_executions.load(), 0);
}

TEST_F(PlanCacheTest, IdenticalDevicesShareRecordsAndOtherModelsDoNot) {
  backend_->set_device(scripted_handle(2), ScriptedBackend::default_device(1));  // same model
  DeviceInfo other = ScriptedBackend::default_device(2);
  other.cc_minor = 9;  // another model
  backend_->set_device(scripted_handle(3), other);
  PlanRef r1 = acquire(1, a_);
  PlanRef r2 = acquire(2, a_);
  EXPECT_EQ(cache_->stats().tunes, 1u);
  EXPECT_EQ(cache_->stats().clones, 1u);
  PlanRef r3 = acquire(3, a_);
  EXPECT_EQ(cache_->stats().tunes, 2u);
  EXPECT_EQ(cache_->stats().records, 2u);
}

TEST_F(PlanCacheTest, RuntimeCompiledEngineIsClonedFromThePlanJson) {
  std::vector<ScriptedEngine> engines(1);
  engines[0].id = 3;
  engines[0].notes = kNoteRuntimeCompilation;
  use_engines(engines);
  PlanRef first = acquire(1, a_);
  const std::optional<TuningRecord> record =
      cache_->find_record(scripted_handle(1), a_, cache_->default_policy());
  ASSERT_TRUE(record.has_value());
  ASSERT_FALSE(record->plan_json.empty())
      << "the tuner keeps no plan JSON for a runtime-compiled engine";
  const int64_t builds = backend_->builds.load();
  PlanRef second = acquire(2, a_);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->handle(), scripted_handle(2));
  EXPECT_EQ(backend_->json_builds.load(), 1);
  EXPECT_EQ(backend_->builds.load(), builds) << "cloned from JSON, not built";
  EXPECT_EQ(cache_->stats().json_clones, 1u);
  EXPECT_EQ(cache_->stats().clones, 1u);
}

TEST_F(PlanCacheTest, EvictionNeverFreesAPinnedPlan) {
  use_engines(basic_engines(), /*capacity=*/1);
  PlanRef pinned = acquire(1, a_);
  {
    PlanRef other = acquire(1, b_);  // over capacity, but both are pinned
    EXPECT_EQ(cache_->stats().plans, 2u);
    EXPECT_EQ(cache_->stats().evictions, 0u);
  }
  PlanRef third = acquire(1, c_);  // b is unpinned now: it goes; a stays
  EXPECT_EQ(cache_->stats().evictions, 1u);
  EXPECT_EQ(cache_->stats().plans, 2u);
  ProblemBuffers buffers(a_, 7);
  Status s = run_plan(pinned.plan(), 1, buffers);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_LE(buffers.output_error(), relative_error_tolerance(a_, 0));
  pinned = PlanRef();
  third = PlanRef();
  cache_->set_capacity(1);  // evicts down to one unpinned plan
  EXPECT_EQ(cache_->stats().plans, 1u);
  EXPECT_EQ(backend_->live_plans.load(), 1);
}

TEST_F(PlanCacheTest, EvictsTheLeastRecentlyUsedPlanFirst) {
  use_engines(basic_engines(), /*capacity=*/2);
  acquire(1, a_);
  acquire(1, b_);
  acquire(1, a_);  // a is now more recent than b
  acquire(1, c_);  // evicts b
  EXPECT_EQ(cache_->stats().evictions, 1u);
  const uint64_t hits = cache_->stats().hits;
  acquire(1, a_);
  EXPECT_EQ(cache_->stats().hits, hits + 1) << "a was kept";
  acquire(1, c_);
  EXPECT_EQ(cache_->stats().hits, hits + 2) << "c was kept";
  const uint64_t misses = cache_->stats().misses;
  acquire(1, b_);
  EXPECT_EQ(cache_->stats().misses, misses + 1) << "b was evicted";
}

TEST_F(PlanCacheTest, EvictionChoosesAcrossHandles) {
  use_engines(basic_engines(), /*capacity=*/2);
  acquire(2, a_);  // the oldest
  acquire(1, a_);
  acquire(1, b_);  // evicts handle 2's plan, not handle 1's
  EXPECT_EQ(cache_->stats().evictions, 1u);
  const uint64_t hits = cache_->stats().hits;
  acquire(1, a_);
  acquire(1, b_);
  EXPECT_EQ(cache_->stats().hits, hits + 2);
}

TEST_F(PlanCacheTest, RecordsAreKeptAfterEvictionSoReacquiringClones) {
  use_engines(basic_engines(), /*capacity=*/1);
  acquire(1, a_);
  acquire(1, b_);  // evicts a's plan, keeps its record
  EXPECT_EQ(cache_->stats().evictions, 1u);
  EXPECT_EQ(cache_->stats().records, 2u);
  const int64_t queries = backend_->heuristic_queries.load();
  acquire(1, a_);
  EXPECT_EQ(cache_->stats().tunes, 2u);
  EXPECT_EQ(cache_->stats().clones, 1u);
  EXPECT_EQ(backend_->heuristic_queries.load(), queries);
}

TEST_F(PlanCacheTest, CapacityZeroBuildsAPlanPerCallAndKeepsRecords) {
  use_engines(basic_engines(), /*capacity=*/0);
  {
    PlanRef first = acquire(1, a_);
    ASSERT_TRUE(first);
    EXPECT_EQ(first->handle(), scripted_handle(1));
    EXPECT_EQ(backend_->live_plans.load(), 1) << "owned by the PlanRef";
    PlanRef second = acquire(1, a_);
    ASSERT_TRUE(second);
    EXPECT_NE(&first.plan(), &second.plan());
  }
  EXPECT_EQ(backend_->live_plans.load(), 0);
  execute_and_check(1, a_);
  EXPECT_EQ(backend_->live_plans.load(), 0);
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.plans, 0u);
  EXPECT_EQ(s.records, 1u);
  EXPECT_EQ(s.tunes, 1u);
  EXPECT_EQ(s.clones, 2u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 3u);
}

TEST_F(PlanCacheTest, SetCapacityEvictsDownToTheNewCapacity) {
  for (int i = 0; i < 5; ++i) acquire(1, small_problem(i));
  EXPECT_EQ(cache_->stats().plans, 5u);
  cache_->set_capacity(2);
  EXPECT_EQ(cache_->capacity(), 2u);
  EXPECT_EQ(cache_->stats().plans, 2u);
  EXPECT_EQ(cache_->stats().evictions, 3u);
  EXPECT_EQ(backend_->live_plans.load(), 2);
}

// Sets an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

StatusOr<std::unique_ptr<PlanCache>> cache_with_capacity(std::optional<size_t> capacity) {
  PlanCacheOptions options;
  options.backend = std::make_shared<ScriptedBackend>(basic_engines());
  options.capacity = capacity;
  options.policy = TunePolicy{};
  return PlanCache::create(std::move(options));
}

TEST(PlanCacheCapacity, ComesFromTheEnvironmentElseDefaultsTo10000) {
  {
    ScopedEnv env("CONVPLAN_CACHE_CAPACITY", nullptr);
    auto cache = cache_with_capacity(std::nullopt);
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    EXPECT_EQ((*cache)->capacity(), 10000u);
  }
  {
    ScopedEnv env("CONVPLAN_CACHE_CAPACITY", "37");
    auto cache = cache_with_capacity(std::nullopt);
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    EXPECT_EQ((*cache)->capacity(), 37u);
  }
  {
    ScopedEnv env("CONVPLAN_CACHE_CAPACITY", "0");
    auto cache = cache_with_capacity(std::nullopt);
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    EXPECT_EQ((*cache)->capacity(), 0u);
  }
}

TEST(PlanCacheCapacity, MalformedEnvironmentValueIsAnErrorNamingVariableAndValue) {
  for (const char* bad : {"12abc", "-3", "lots", " 5", "99999999999999999999999"}) {
    ScopedEnv env("CONVPLAN_CACHE_CAPACITY", bad);
    auto cache = cache_with_capacity(std::nullopt);
    ASSERT_FALSE(cache.ok()) << bad;
    EXPECT_EQ(cache.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(cache.status().message().find("CONVPLAN_CACHE_CAPACITY"), std::string::npos);
    EXPECT_NE(cache.status().message().find(bad), std::string::npos) << cache.status().message();
  }
}

TEST(PlanCacheCapacity, ApiWinsOverTheEnvironment) {
  ScopedEnv env("CONVPLAN_CACHE_CAPACITY", "not a number");
  auto cache = cache_with_capacity(5);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  EXPECT_EQ((*cache)->capacity(), 5u);
}

TEST(PlanCacheCreate, NullBackendIsAnError) {
  PlanCacheOptions options;
  options.policy = TunePolicy{};  // (also keeps GCC's -Wmaybe-uninitialized quiet under ASan)
  auto cache = PlanCache::create(std::move(options));
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("backend"), std::string::npos);
}

TEST_F(PlanCacheTest, FailingTuneIsNotCachedAndIsRetriedByTheNextCaller) {
  backend_->fail_next_builds(1000);
  StatusOr<PlanRef> failed = cache_->acquire(scripted_handle(1), a_);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(cache_->stats().records, 0u);
  EXPECT_EQ(cache_->stats().plans, 0u);
  EXPECT_GE(cache_->stats().failures, 1u);
  EXPECT_FALSE(cache_->find_record(scripted_handle(1), a_, cache_->default_policy()).has_value());
  backend_->fail_next_builds(0);
  PlanRef ok = acquire(1, a_);
  EXPECT_TRUE(ok);
  EXPECT_EQ(cache_->stats().tunes, 2u);
  EXPECT_EQ(cache_->stats().records, 1u);
}

TEST_F(PlanCacheTest, FailedCloneIsNotCachedAndIsRetried) {
  acquire(1, a_);
  backend_->fail_next_builds(1);
  StatusOr<PlanRef> failed = cache_->acquire(scripted_handle(2), a_);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("injected"), std::string::npos)
      << failed.status().message();
  EXPECT_EQ(cache_->stats().plans, 1u);
  PlanRef ok = acquire(2, a_);
  ASSERT_TRUE(ok);
  EXPECT_EQ(cache_->stats().tunes, 1u) << "the record stayed";
  EXPECT_EQ(cache_->stats().clones, 1u);
}

TEST_F(PlanCacheTest, PlanThatFailsToExecuteIsDroppedAndRebuiltNextTime) {
  std::vector<ScriptedEngine> engines(1);
  engines[0].id = 4;
  engines[0].behavior = EngineBehavior::kFailsToExecute;
  use_engines(engines);
  // Heuristic mode without validation: the tuner never runs the engine, so only the cache meets
  // the failure.
  TunePolicy policy;
  policy.mode = TuneMode::kHeuristic;
  policy.validate = false;
  ProblemBuffers buffers(a_, 3);
  Status first = cache_->execute(scripted_handle(1), a_, buffers.pointers(), policy);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.code(), StatusCode::kCudnnError);
  EXPECT_NE(first.message().find("fails to execute"), std::string::npos) << first.message();
  EXPECT_EQ(cache_->stats().plans, 0u) << "dropped";
  EXPECT_EQ(backend_->live_plans.load(), 0);
  EXPECT_GE(cache_->stats().failures, 1u);
  const int64_t builds = backend_->builds.load();
  Status second = cache_->execute(scripted_handle(1), a_, buffers.pointers(), policy);
  EXPECT_FALSE(second.ok());
  EXPECT_EQ(cache_->stats().misses, 2u) << "the failed plan was not met again";
  EXPECT_EQ(cache_->stats().hits, 0u);
  EXPECT_EQ(backend_->builds.load(), builds + 1) << "re-built from the record";
  EXPECT_EQ(cache_->stats().tunes, 1u);
}

TEST_F(PlanCacheTest, ForgottenHandleAddressGetsAFreshPlan) {
  execute_and_check(1, b_);  // engine choice may need a workspace: the arena grows
  acquire(2, b_);
  EXPECT_EQ(backend_->live_plans.load(), 2);
  cache_->forget_handle(scripted_handle(1));
  EXPECT_EQ(backend_->live_plans.load(), 1) << "handle 1's plan was released";
  EXPECT_EQ(backend_->live_allocations.load(), 0) << "and its arena";
  EXPECT_EQ(cache_->stats().plans, 1u);
  // A new handle at the same address: never the old plan; the record is still good.
  PlanRef fresh = acquire(1, b_);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->handle(), scripted_handle(1));
  EXPECT_EQ(cache_->stats().misses, 3u);
  EXPECT_EQ(cache_->stats().clones, 2u);
  EXPECT_EQ(cache_->stats().tunes, 1u);
  EXPECT_EQ(backend_->live_plans.load(), 2);
  cache_->forget_handle(scripted_handle(5));  // unknown: nothing happens
}

TEST_F(PlanCacheTest, NewHandleAtAForgottenAddressIsAskedItsDeviceAgain) {
  acquire(1, a_);
  DeviceInfo other = ScriptedBackend::default_device(0);
  other.name = "Another Scripted GPU";
  backend_->set_device(scripted_handle(1), other);
  acquire(1, a_);  // the same handle: its device is what it was when first seen
  EXPECT_EQ(cache_->stats().tunes, 1u);
  cache_->forget_handle(scripted_handle(1));
  acquire(1, a_);  // a new handle at that address, on another model: tuned for it
  EXPECT_EQ(cache_->stats().tunes, 2u);
}

TEST_F(PlanCacheTest, WorkspaceArenaGrowsOnDemandAndIsReused) {
  std::vector<ScriptedEngine> engines(2);
  engines[0].id = 0;
  engines[0].workspace_bytes = 4096;
  engines[0].supports = [](const ConvProblem& p) { return p.direction == Direction::kForward; };
  engines[1].id = 1;
  engines[1].workspace_bytes = 1 << 20;
  engines[1].supports = [](const ConvProblem& p) { return p.direction != Direction::kForward; };
  use_engines(engines);
  const ConvProblem small_ws = small_problem(0), large_ws = small_problem(1);
  ASSERT_EQ(small_ws.direction, Direction::kForward);
  ASSERT_NE(large_ws.direction, Direction::kForward);
  execute_and_check(1, small_ws);
  EXPECT_EQ(backend_->live_allocations.load(), 1) << "the arena";
  execute_and_check(1, large_ws);
  EXPECT_EQ(backend_->live_allocations.load(), 1) << "grown: the old buffer was released";
  // Grown: no more allocations on hits. Any allocation would fail now.
  backend_->set_allocation_limit(0);
  execute_and_check(1, small_ws);
  execute_and_check(1, large_ws);
  // The caller's allocator, when given, serves every call (and gets it all back).
  CountingAllocator mine;
  execute_and_check(1, small_ws, &mine);
  execute_and_check(1, large_ws, &mine);
  EXPECT_EQ(mine.allocations.load(), 2);
  EXPECT_EQ(mine.live.load(), 0);
  cache_->forget_handle(scripted_handle(1));
  EXPECT_EQ(backend_->live_allocations.load(), 0);
}

TEST_F(PlanCacheTest, ArenaThatCannotGrowIsAnOutOfMemoryErrorAndThePlanStays) {
  std::vector<ScriptedEngine> engines(1);
  engines[0].workspace_bytes = 1 << 20;
  use_engines(engines);
  acquire(1, a_);  // tuned while memory was there
  backend_->set_allocation_limit(1024);
  ProblemBuffers buffers(a_, 1);
  Status s = cache_->execute(scripted_handle(1), a_, buffers.pointers());
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_EQ(cache_->stats().plans, 1u);
  backend_->set_allocation_limit(SIZE_MAX);
  execute_and_check(1, a_);
}

TEST_F(PlanCacheTest, PoliciesAreKeyedApartAndEqualKeysShareOne) {
  TunePolicy deterministic;
  deterministic.deterministic = true;
  acquire(1, a_);
  StatusOr<PlanRef> other = cache_->acquire(scripted_handle(1), a_, deterministic);
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  EXPECT_EQ(cache_->stats().tunes, 2u);
  EXPECT_EQ(cache_->stats().records, 2u);
  // The same key (verbosity is not part of it): a hit on both.
  TunePolicy chatty;
  chatty.verbose = 2;
  StatusOr<PlanRef> hit = cache_->acquire(scripted_handle(1), a_, chatty);
  ASSERT_TRUE(hit.ok());
  StatusOr<PlanRef> hit2 = cache_->acquire(scripted_handle(1), a_, deterministic);
  ASSERT_TRUE(hit2.ok());
  EXPECT_EQ(&hit2->plan(), &other->plan());
  EXPECT_EQ(cache_->stats().tunes, 2u);
  EXPECT_EQ(cache_->stats().hits, 2u);
  // The record under the explicit policy is found under its key.
  EXPECT_TRUE(cache_->find_record(scripted_handle(1), a_, deterministic).has_value());
}

TEST_F(PlanCacheTest, FindRecordReturnsTheRecordForTheKeyOnly) {
  EXPECT_FALSE(cache_->find_record(scripted_handle(1), a_, cache_->default_policy()));
  acquire(1, a_);
  std::optional<TuningRecord> r =
      cache_->find_record(scripted_handle(1), a_, cache_->default_policy());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->key(), scripted_key(a_));
  EXPECT_EQ(r->problem, a_.to_string());
  // Another handle on the same model sees the same record, before it ever acquired a plan.
  EXPECT_TRUE(cache_->find_record(scripted_handle(7), a_, cache_->default_policy()));
  EXPECT_FALSE(cache_->find_record(scripted_handle(1), b_, cache_->default_policy()));
}

TEST_F(PlanCacheTest, InvalidProblemIsAnErrorAndNothingIsTuned) {
  ConvProblem bad = a_;
  bad.groups = 3;
  StatusOr<PlanRef> r = cache_->acquire(scripted_handle(1), bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("groups"), std::string::npos) << r.status().message();
  EXPECT_EQ(cache_->stats().tunes, 0u);
  EXPECT_EQ(backend_->heuristic_queries.load(), 0);
}

TEST_F(PlanCacheTest, NullHandleIsAnError) {
  StatusOr<PlanRef> r = cache_->acquire(nullptr, a_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(PlanCacheTest, HandleUsedFromTwoThreadsAtOnceIsAnErrorNamingTheHandle) {
  backend_->set_heuristics_delay_us(400000);  // the first call stays in its tune a while
  std::atomic<bool> first_done{false};
  Status first;
  std::thread t([&] {
    ProblemBuffers buffers(a_, 1);
    first = cache_->execute(scripted_handle(1), a_, buffers.pointers());
    first_done = true;
  });
  while (backend_->heuristic_queries.load() == 0) std::this_thread::yield();
  ProblemBuffers buffers(b_, 2);
  Status second = cache_->execute(scripted_handle(1), b_, buffers.pointers());
  EXPECT_FALSE(first_done.load()) << "the tune ended too early for the test to mean anything";
  t.join();
  EXPECT_TRUE(first.ok()) << first.to_string();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.code(), StatusCode::kInvalidArgument);
  char text[32];
  std::snprintf(text, sizeof text, "%p", static_cast<void*>(scripted_handle(1)));
  EXPECT_NE(second.message().find(text), std::string::npos) << second.message();
  EXPECT_EQ(backend_->concurrent_handle_uses.load(), 0);
  // Once the first call is over, the handle is free again.
  backend_->set_heuristics_delay_us(0);
  execute_and_check(1, b_);
}

TEST_F(PlanCacheTest, StatsToStringNamesEveryCounter) {
  acquire(1, a_);
  acquire(1, a_);
  const std::string text = cache_->stats().to_string();
  for (const char* field :
       {"hits=1", "misses=1", "tunes=1", "clones=0", "json_clones=0", "db_hits=0", "evictions=0",
        "failures=0", "tune_ms=", "clone_ms=", "plans=1", "records=1", "plan_host_bytes=1024"}) {
    EXPECT_NE(text.find(field), std::string::npos) << field << " in " << text;
  }
}

// --- Destruction order ---

TEST(PlanCacheDestruction, PlanRefOutlivesTheCacheAndKeepsTheBackendAlive) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::weak_ptr<ScriptedBackend> watch = backend;
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  const ConvProblem p = small_problem(0);
  StatusOr<PlanRef> ref = cache->acquire(scripted_handle(1), p);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  backend.reset();
  cache.reset();
  ASSERT_FALSE(watch.expired()) << "the pinned plan holds the backend";
  ProblemBuffers buffers(p, 5);
  Status s = run_plan(ref->plan(), 1, buffers);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_LE(buffers.output_error(), relative_error_tolerance(p, 0));
  *ref = PlanRef();
  EXPECT_TRUE(watch.expired()) << "the last plan took the backend with it";
}

TEST(PlanCacheDestruction, CacheDestroyedWithPlansAndArenasReleasesThem) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  {
    std::unique_ptr<PlanCache> cache = make_cache(backend);
    for (int h = 1; h <= 3; ++h) {
      for (int i = 0; i < 4; ++i) {
        const ConvProblem p = small_problem(i);
        ProblemBuffers buffers(p, 9);
        ASSERT_TRUE(cache->execute(scripted_handle(h), p, buffers.pointers()).ok());
      }
    }
    EXPECT_EQ(backend->live_plans.load(), 12);
  }
  EXPECT_EQ(backend->live_plans.load(), 0);
  EXPECT_EQ(backend->live_allocations.load(), 0);
}

TEST(PlanCacheDestruction, CacheOutlivesTheCallersBackendPointer) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  std::weak_ptr<ScriptedBackend> watch = backend;
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  backend.reset();
  const ConvProblem p = small_problem(3);
  ProblemBuffers buffers(p, 9);
  Status s = cache->execute(scripted_handle(1), p, buffers.pointers());
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_LE(buffers.output_error(), relative_error_tolerance(p, 0));
  EXPECT_FALSE(watch.expired());
  cache.reset();
  EXPECT_TRUE(watch.expired());
}

// Left alive on purpose: destroyed by the C++ runtime at exit, plans and arenas still held. A
// crash there fails this test's process.
std::unique_ptr<PlanCache>& cache_left_at_exit() {
  static std::unique_ptr<PlanCache> cache;
  return cache;
}

TEST(PlanCacheDestruction, CacheStillHoldingPlansAtProcessExitIsDestroyedCleanly) {
  auto backend = std::make_shared<ScriptedBackend>(basic_engines());
  cache_left_at_exit() = make_cache(backend);
  for (int i = 0; i < 3; ++i) {
    const ConvProblem p = small_problem(i);
    ProblemBuffers buffers(p, 9);
    ASSERT_TRUE(cache_left_at_exit()->execute(scripted_handle(1), p, buffers.pointers()).ok());
  }
  EXPECT_EQ(cache_left_at_exit()->stats().plans, 3u);
}

}  // namespace
}  // namespace convplan::testing
