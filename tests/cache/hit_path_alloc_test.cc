// The hit path allocates nothing: every operator new of this test program is counted (per
// thread), and hits of execute, execute with an explicit policy and acquire must add none. Its
// own executable, since it replaces the global operator new.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "cache/null_backend.h"
#include "convplan/plan_cache.h"

// Under a sanitizer the sanitizer's own operator new must stay (it checks new/delete pairs), so
// nothing is counted and the tests say so.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CONVPLAN_COUNT_NEW 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CONVPLAN_COUNT_NEW 0
#endif
#endif
#ifndef CONVPLAN_COUNT_NEW
#define CONVPLAN_COUNT_NEW 1
#endif

namespace {
thread_local long long t_allocations = 0;
}  // namespace

#if CONVPLAN_COUNT_NEW
void* operator new(size_t bytes) {
  ++t_allocations;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#define SKIP_WITHOUT_COUNTING() (void)0
#else
#define SKIP_WITHOUT_COUNTING() \
  GTEST_SKIP() << "built with a sanitizer, whose operator new is kept: allocations not counted"
#endif

namespace convplan {
namespace {

ConvProblem problem(int k) {
  ConvProblem p;
  p.n = 2;
  p.c = 8;
  p.k = k;
  p.input = {8, 8, 1};
  p.filter = {3, 3, 1};
  return p;
}

std::unique_ptr<PlanCache> null_cache() {
  PlanCacheOptions options;
  options.backend = std::make_shared<NullBackend>();
  options.capacity = 100;
  TunePolicy policy;
  policy.mode = TuneMode::kHeuristic;
  policy.validate = false;
  options.policy = policy;
  StatusOr<std::unique_ptr<PlanCache>> made = PlanCache::create(std::move(options));
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  return made.ok() ? std::move(made).value() : nullptr;
}

TEST(HitPathAllocations, AHitAllocatesNothing) {
  SKIP_WITHOUT_COUNTING();
  std::unique_ptr<PlanCache> cache = null_cache();
  ASSERT_NE(cache, nullptr);
  std::vector<char> x(64), w(64), y(64);
  const TensorPointers tensors{x.data(), w.data(), y.data()};
  TunePolicy explicit_policy = cache->default_policy();
  explicit_policy.deterministic = true;  // another key, met on this handle before
  for (int k = 8; k < 12; ++k) {         // the misses: they allocate, and fill the arena
    ASSERT_TRUE(cache->execute(fake_handle(0), problem(k), tensors).ok());
    ASSERT_TRUE(cache->execute(fake_handle(0), problem(k), tensors, explicit_policy).ok());
  }
  const long long before = t_allocations;
  for (int i = 0; i < 100; ++i) {
    const ConvProblem& p = problem(8 + i % 4);
    ASSERT_TRUE(cache->execute(fake_handle(0), p, tensors).ok());
    ASSERT_TRUE(cache->execute(fake_handle(0), p, tensors, explicit_policy).ok());
    AcquireOutcome outcome = AcquireOutcome::kTuned;
    StatusOr<PlanRef> ref = cache->acquire(fake_handle(0), p, &outcome);
    ASSERT_TRUE(ref.ok());
    ASSERT_EQ(outcome, AcquireOutcome::kHit);
  }
  EXPECT_EQ(t_allocations - before, 0) << "heap allocations in 300 hits";
}

TEST(HitPathAllocations, TheCounterSeesAMiss) {
  SKIP_WITHOUT_COUNTING();
  // The counter works: a miss (a tune, a plan) allocates.
  std::unique_ptr<PlanCache> cache = null_cache();
  ASSERT_NE(cache, nullptr);
  std::vector<char> x(64), w(64), y(64);
  const long long before = t_allocations;
  ASSERT_TRUE(cache->execute(fake_handle(1), problem(9), {x.data(), w.data(), y.data()}).ok());
  EXPECT_GT(t_allocations - before, 0);
}

}  // namespace
}  // namespace convplan
