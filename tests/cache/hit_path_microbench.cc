// The host cost that a PlanCache hit adds to a plan's execute, measured on a backend whose plans
// do nothing: PlanCache::execute (and acquire + execute) against a bare Plan::execute, on one
// thread and on several threads each with its own handle. Not a test: it prints a table. Times
// are per-thread CPU time.
//
//   cache_hit_microbench [--iterations N] [--threads T]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "cache/null_backend.h"
#include "convplan/plan_cache.h"

// Every heap allocation of this program, counted per thread: the hit path must make none.
namespace {
thread_local long long t_allocations = 0;
}  // namespace

void* operator new(size_t bytes) {
  ++t_allocations;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace convplan {
namespace {

ConvProblem bench_problem(int i) {
  ConvProblem p;
  p.n = 32;
  p.c = 64;
  p.k = 64 + i;
  p.input = {56, 56, 1};
  p.filter = {3, 3, 1};
  p.pad_before = {1, 1, 0};
  p.pad_after = {1, 1, 0};
  return p;
}

// The calling thread's CPU time, so that a machine busy with other work (or fewer cores than
// threads) does not inflate the figures the way wall time would.
double thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

template <typename F>
double ns_per_call(int iterations, F&& f) {
  for (int i = 0; i < iterations / 10; ++i) f();  // warm-up
  const double start = thread_cpu_ns();
  for (int i = 0; i < iterations; ++i) f();
  return (thread_cpu_ns() - start) / iterations;
}

int run(int iterations, int threads) {
  auto backend = std::make_shared<NullBackend>();
  PlanCacheOptions options;
  options.backend = backend;
  options.capacity = 10000;
  TunePolicy policy;
  policy.mode = TuneMode::kHeuristic;
  policy.validate = false;
  options.policy = policy;
  StatusOr<std::unique_ptr<PlanCache>> made = PlanCache::create(std::move(options));
  if (!made.ok()) {
    std::fprintf(stderr, "create: %s\n", made.status().to_string().c_str());
    return 1;
  }
  PlanCache& cache = **made;
  std::vector<char> x(64), w(64), y(64);
  const TensorPointers tensors{x.data(), w.data(), y.data()};
  constexpr int kProblems = 20;

  // Warm every handle with every problem.
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < kProblems; ++i) {
      Status s = cache.execute(fake_handle(t), bench_problem(i), tensors);
      if (!s.ok()) {
        std::fprintf(stderr, "warm-up: %s\n", s.to_string().c_str());
        return 1;
      }
    }
  }

  const ConvProblem problem = bench_problem(7);
  StatusOr<PlanRef> pinned = cache.acquire(fake_handle(0), problem);
  if (!pinned.ok()) return 1;
  Plan& plan = pinned->plan();
  std::vector<char> workspace(4096);
  const double bare = ns_per_call(
      iterations, [&] { (void)plan.execute(fake_handle(0), tensors, workspace.data()); });
  const double via_execute =
      ns_per_call(iterations, [&] { (void)cache.execute(fake_handle(0), problem, tensors); });
  const double via_acquire = ns_per_call(iterations, [&] {
    StatusOr<PlanRef> ref = cache.acquire(fake_handle(0), problem);
    (void)ref->plan().execute(fake_handle(0), tensors, workspace.data());
  });
  const double via_policy = ns_per_call(iterations, [&] {
    (void)cache.execute(fake_handle(0), problem, tensors, cache.default_policy());
  });
  TunePolicy explicit_policy = cache.default_policy();
  explicit_policy.deterministic = true;  // another key: a policy met on this handle before
  (void)cache.execute(fake_handle(0), problem, tensors, explicit_policy);
  const long long allocations_before = t_allocations;
  for (int i = 0; i < 1000; ++i) {
    (void)cache.execute(fake_handle(0), problem, tensors);
    (void)cache.execute(fake_handle(0), problem, tensors, explicit_policy);
    StatusOr<PlanRef> ref = cache.acquire(fake_handle(0), problem);
  }
  const long long hit_allocations = t_allocations - allocations_before;

  // Every thread on its own handle, cycling over the problems.
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> per_thread(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<ConvProblem> problems;
      for (int i = 0; i < kProblems; ++i) problems.push_back(bench_problem(i));
      ++ready;
      while (!go.load()) std::this_thread::yield();
      int i = 0;
      per_thread[static_cast<size_t>(t)] = ns_per_call(iterations, [&] {
        (void)cache.execute(fake_handle(t), problems[static_cast<size_t>(i)], tensors);
        i = i + 1 == kProblems ? 0 : i + 1;
      });
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  go = true;
  for (std::thread& th : pool) th.join();
  double mt = 0;
  for (double v : per_thread) mt += v;
  mt /= threads;

  std::printf("PlanCache hit path on a null backend (%d iterations, %u hardware threads)\n",
              iterations, std::thread::hardware_concurrency());
  std::printf("%-44s %10s %12s\n", "call", "ns/call", "added ns");
  std::printf("%-44s %10.1f %12s\n", "Plan::execute (bare)", bare, "-");
  std::printf("%-44s %10.1f %12.1f\n", "PlanCache::execute (hit)", via_execute, via_execute - bare);
  std::printf("%-44s %10.1f %12.1f\n", "PlanCache::execute (hit, explicit policy)", via_policy,
              via_policy - bare);
  std::printf("%-44s %10.1f %12.1f\n", "PlanCache::acquire + Plan::execute", via_acquire,
              via_acquire - bare);
  char label[64];
  std::snprintf(label, sizeof label, "PlanCache::execute (hit), %d threads", threads);
  std::printf("%-44s %10.1f %12.1f\n", label, mt, mt - bare);
  std::printf("added to a 5 us cudnnBackendExecute: %.3fx (1 thread), %.3fx (%d threads)\n",
              (5000 + via_execute - bare) / 5000, (5000 + mt - bare) / 5000, threads);
  std::printf("heap allocations in 3000 hits (execute, execute with a policy, acquire): %lld\n",
              hit_allocations);
  std::printf("%s\n", cache.stats().to_string().c_str());
  return 0;
}

}  // namespace
}  // namespace convplan

int main(int argc, char** argv) {
  int iterations = 2000000;
  int threads = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--iterations") {
      iterations = std::atoi(argv[i + 1]);
    } else if (flag == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N] [--threads T]\n", argv[0]);
      return 2;
    }
  }
  if (iterations <= 0 || threads <= 0) return 2;
  return convplan::run(iterations, threads);
}
