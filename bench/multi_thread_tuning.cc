// Multi-thread tuning: one PlanCache shared by every thread (convplan's design: each key tuned
// once, then cloned for the other handles) against one PlanCache per thread (PyTorch's
// thread-local cuDNN caches: each thread tunes every key itself). T threads, each with its own
// stream and cuDNN handle, run K problems once in random order; the wall time from the start
// until every thread is done is the tuning time, since every call is a miss.
//
//   multi_thread_tuning [--threads T] [--problems K] [--json PATH]
//
// Prints a table; writes JSON to PATH (default bench/results/multi_thread_tuning.json). Where
// there is no GPU it says so and exits 0 without writing anything.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_cache.h"
#include "convplan/cudnn_backend.h"
#include "convplan/plan_cache.h"

namespace convplan {
namespace {

// K small problems of mixed kinds: the three directions, both layouts, fp32 and fp16.
std::vector<ConvProblem> bench_problems(int count) {
  std::vector<ConvProblem> out;
  const Direction directions[] = {Direction::kForward, Direction::kBackwardData,
                                  Direction::kBackwardFilter};
  for (int i = 0; static_cast<int>(out.size()) < count; ++i) {
    ConvProblem p;
    p.direction = directions[i % 3];
    p.n = 2 + i % 3;
    p.c = 16 << (i % 2);
    p.k = 16 << ((i / 2) % 2);
    const int64_t size = 8 + 2 * (i % 5);
    const int64_t filter = i % 4 == 3 ? 1 : 3;
    p.input = {size, size, 1};
    p.filter = {filter, filter, 1};
    p.pad_before = {filter / 2, filter / 2, 0};
    p.pad_after = p.pad_before;
    p.stride = {1 + (i / 6) % 2, 1 + (i / 6) % 2, 1};
    p = ConvProblem::with_data_type(p, i % 3 == 1 ? DataType::kHalf : DataType::kFloat);
    p.layout = p.data_type == DataType::kHalf || i % 5 == 2 ? Layout::kChannelsLast
                                                            : Layout::kChannelsFirst;
    if (p.validate().ok()) out.push_back(p);
  }
  return out;
}

struct Tensors {
  DeviceBuffer x, w, y;
  TensorPointers pointers() const { return {x.get(), w.get(), y.get()}; }
};

StatusOr<Tensors> allocate_tensors(Backend& backend, cudnnHandle_t handle, const ConvProblem& p) {
  Tensors t;
  const int64_t elem = size_of(p.data_type);
  CONVPLAN_ASSIGN_OR_RETURN(
      t.x, DeviceBuffer::allocate(cuda_allocator(),
                                  static_cast<size_t>(p.x_shape().span_elements() * elem)));
  CONVPLAN_ASSIGN_OR_RETURN(
      t.w, DeviceBuffer::allocate(cuda_allocator(),
                                  static_cast<size_t>(p.w_shape().span_elements() * elem)));
  CONVPLAN_ASSIGN_OR_RETURN(
      t.y, DeviceBuffer::allocate(cuda_allocator(),
                                  static_cast<size_t>(p.y_shape().span_elements() * elem)));
  // Finite values (0x3c bytes: ~1.06 in fp16, ~0.0115 in fp32): no NaN, no denormal.
  for (DeviceBuffer* b : {&t.x, &t.w, &t.y}) {
    CONVPLAN_RETURN_IF_ERROR(backend.fill(handle, b->get(), 0x3c, b->size()));
  }
  return t;
}

struct RunResult {
  double wall_ms = 0;
  CacheStats stats;  // summed over the caches
  int errors = 0;
  std::string first_error;
};

void add(CacheStats& sum, const CacheStats& s) {
  sum.hits += s.hits;
  sum.misses += s.misses;
  sum.tunes += s.tunes;
  sum.clones += s.clones;
  sum.json_clones += s.json_clones;
  sum.db_hits += s.db_hits;
  sum.evictions += s.evictions;
  sum.failures += s.failures;
  sum.tune_ms += s.tune_ms;
  sum.clone_ms += s.clone_ms;
  sum.plans += s.plans;
  sum.records += s.records;
  sum.plan_host_bytes += s.plan_host_bytes;
}

// shared: one cache for all threads; else one per thread.
RunResult run(bool shared, int threads, const std::vector<ConvProblem>& problems) {
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  std::vector<std::unique_ptr<PlanCache>> caches(shared ? 1 : static_cast<size_t>(threads));
  for (auto& c : caches) c = make_bench_cache(backend);
  RunResult result;
  if (std::any_of(caches.begin(), caches.end(), [](const auto& c) { return c == nullptr; })) {
    result.errors = 1;
    result.first_error = "PlanCache::create failed";
    return result;
  }

  std::barrier sync(threads + 1);
  std::atomic<int> errors{0};
  std::string first_error;
  std::atomic<bool> error_taken{false};
  auto fail = [&](const std::string& what) {
    ++errors;
    if (!error_taken.exchange(true)) first_error = what;
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      PlanCache& cache = *caches[shared ? 0 : static_cast<size_t>(t)];
      StatusOr<CudnnContext> ctx = CudnnContext::create(0);
      std::vector<Tensors> tensors;
      if (ctx.ok()) {
        for (const ConvProblem& p : problems) {
          StatusOr<Tensors> made = allocate_tensors(*backend, ctx->handle(), p);
          if (!made.ok()) {
            fail(made.status().to_string());
            break;
          }
          tensors.push_back(std::move(made).value());
        }
      } else {
        fail("CudnnContext::create: " + ctx.status().to_string());
      }
      std::vector<size_t> order(problems.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::mt19937 rng(static_cast<uint32_t>(t + 1));
      std::shuffle(order.begin(), order.end(), rng);
      sync.arrive_and_wait();  // set up; the clock starts
      if (ctx.ok() && tensors.size() == problems.size()) {
        for (size_t i : order) {
          Status s = cache.execute(ctx->handle(), problems[i], tensors[i].pointers());
          if (!s.ok()) fail(problems[i].to_string() + ": " + s.to_string());
        }
        Status s = ctx->synchronize();
        if (!s.ok()) fail(s.to_string());
        cache.forget_handle(ctx->handle());
      }
      sync.arrive_and_wait();  // the clock stops when the last thread is done
    });
  }
  sync.arrive_and_wait();
  const auto start = std::chrono::steady_clock::now();
  sync.arrive_and_wait();
  result.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (std::thread& th : pool) th.join();
  for (const auto& c : caches) add(result.stats, c->stats());
  result.errors = errors.load();
  result.first_error = first_error;
  return result;
}

std::string json_stats(const CacheStats& s) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer,
                "{\"misses\": %llu, \"tunes\": %llu, \"clones\": %llu, \"json_clones\": %llu, "
                "\"failures\": %llu, \"tune_ms\": %.3f, \"clone_ms\": %.3f}",
                static_cast<unsigned long long>(s.misses), static_cast<unsigned long long>(s.tunes),
                static_cast<unsigned long long>(s.clones),
                static_cast<unsigned long long>(s.json_clones),
                static_cast<unsigned long long>(s.failures), s.tune_ms, s.clone_ms);
  return buffer;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

int main_impl(int argc, char** argv) {
  int threads = 8;
  int count = 20;
  std::string json_path = "bench/results/multi_thread_tuning.json";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 < argc && flag == "--threads") {
      threads = std::atoi(argv[++i]);
    } else if (i + 1 < argc && flag == "--problems") {
      count = std::atoi(argv[++i]);
    } else if (i + 1 < argc && flag == "--json") {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--threads T] [--problems K] [--json PATH]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || count < 1) {
    std::fprintf(stderr, "--threads and --problems must be >= 1\n");
    return 2;
  }
  Status gpu = gpu_available();
  if (!gpu.ok()) {
    std::printf("multi_thread_tuning: skipped, no GPU here: %s\n", gpu.message().c_str());
    return 0;
  }
  const std::vector<ConvProblem> problems = bench_problems(count);

  // Shared first, then per-thread; each starts from empty caches (no database).
  const RunResult shared = run(true, threads, problems);
  const RunResult per_thread = run(false, threads, problems);
  const double ratio = shared.wall_ms > 0 ? per_thread.wall_ms / shared.wall_ms : 0;

  std::printf(
      "multi-thread tuning: %d threads (one stream + handle each), %d problems, "
      "cuDNN %lld\n",
      threads, count, static_cast<long long>(cudnn_runtime_version()));
  std::printf("%-26s %12s %7s %7s %12s %12s %7s\n", "design", "wall ms", "tunes", "clones",
              "tune ms (sum)", "clone ms (sum)", "errors");
  for (const auto& [name, r] :
       {std::pair<const char*, const RunResult&>{"shared PlanCache", shared},
        {"PlanCache per thread", per_thread}}) {
    std::printf("%-26s %12.1f %7llu %7llu %12.1f %12.1f %7d\n", name, r.wall_ms,
                static_cast<unsigned long long>(r.stats.tunes),
                static_cast<unsigned long long>(r.stats.clones), r.stats.tune_ms, r.stats.clone_ms,
                r.errors);
  }
  std::printf("per-thread / shared wall time: %.2fx\n", ratio);
  for (const RunResult* r : {&shared, &per_thread}) {
    if (r->errors > 0) std::printf("first error: %s\n", r->first_error.c_str());
  }

  std::error_code ec;
  const std::filesystem::path path(json_path);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(json_path);
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
    return 1;
  }
  out << "{\"benchmark\": \"multi_thread_tuning\", \"threads\": " << threads
      << ", \"problems\": " << count << ", \"cudnn_version\": " << cudnn_runtime_version()
      << ",\n \"shared\": {\"wall_ms\": " << shared.wall_ms << ", \"errors\": " << shared.errors
      << ", \"stats\": " << json_stats(shared.stats) << ", \"first_error\": \""
      << json_escape(shared.first_error)
      << "\"},\n \"per_thread\": {\"wall_ms\": " << per_thread.wall_ms
      << ", \"errors\": " << per_thread.errors << ", \"stats\": " << json_stats(per_thread.stats)
      << ", \"first_error\": \"" << json_escape(per_thread.first_error)
      << "\"},\n \"per_thread_over_shared\": " << ratio << "}\n";
  std::printf("wrote %s\n", json_path.c_str());
  return shared.errors + per_thread.errors > 0 ? 1 : 0;
}

}  // namespace
}  // namespace convplan

int main(int argc, char** argv) { return convplan::main_impl(argc, argv); }
