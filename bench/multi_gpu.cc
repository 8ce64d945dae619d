// Multi-GPU tuning (issue 8): one PlanCache shared by every GPU of the process. Tuning records
// are keyed by the device model, so G identical GPUs should tune each problem once in all and
// clone the plan for every other handle. One worker thread per GPU, each with two contexts (two
// streams and cuDNN handles on its device), runs every problem of a suite once in its own random
// order, alternating its contexts, on buffers of its own GPU; each result is checked against the
// float64 reference at sampled output elements.
//   Phase A: all G GPUs at once on one cold cache: the tuning wall time with G GPUs.
//   Phase B: a fresh cache, GPU 0's worker alone: the tuning wall time with one GPU.
// The wall time runs from the start until every worker is done, per-problem checks included
// (a stream synchronize, a copy back and the sampled reference; small next to a tune).
//
//   multi_gpu [--gpus G] [--batch B] [--dtype T] [--layout L] [--suite-file PATH] [--json PATH]
//
// G: the CUDA devices to use (default all); B: the batch (default 32); T, L: the data type and
// layout (default bf16, nhwc). These win over what a descriptor says. PATH: a suite file
// (suites/README.md; default the built-in resnet50 suite) and the JSON written (default
// bench/results/multi_gpu.json). Prints a table and whether tunes == the
// number of distinct problems in each phase. Exits 1 on any error or mismatch; where there is
// no GPU it says so and exits 0 without writing anything.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_cache.h"
#include "convplan/cudnn_backend.h"
#include "convplan/plan_cache.h"
#include "convplan/problem.h"
#include "convplan/reference.h"
#include "suite.h"

namespace convplan {
namespace {

constexpr int kSamples = 256;  // output elements checked per problem and worker

using cli::SuiteProblem;

// The suite's distinct problems in the given type, layout and batch (equal lines merge, their
// counts add): the suite file at `path`, or the built-in ResNet-50 suite when it is empty.
StatusOr<std::vector<SuiteProblem>> load_suite(const std::string& path, DataType type,
                                               Layout layout, int64_t batch) {
  CONVPLAN_ASSIGN_OR_RETURN(
      cli::Suite suite, path.empty() ? cli::builtin_suite("resnet50") : cli::load_suite_file(path));
  cli::ProblemOverrides flags;
  flags.data_type = type;
  flags.layout = layout;
  flags.batch = batch;
  CONVPLAN_ASSIGN_OR_RETURN(std::vector<SuiteProblem> out,
                            cli::suite_problems(suite, flags, cli::bench_defaults()));
  for (const SuiteProblem& sp : out) {
    if (sp.problem.beta != 0.0) return invalid_argument(sp.name + ": beta must be 0 here");
  }
  return out;
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Host copies, in the problem's type and layout, of the two tensors the direction reads: the
// same deterministic values (multiples of 1/8 in [-1, 1], exact in every type) for every worker.
struct HostTensors {
  std::vector<unsigned char> x, w, y;  // the output tensor's stays empty
};

std::vector<unsigned char> host_values(DataType t, int64_t elements, uint64_t seed) {
  const int64_t elem = size_of(t);
  std::vector<unsigned char> bytes(static_cast<size_t>(elements * elem));
  std::vector<double> chunk;
  constexpr int64_t kChunk = 1 << 20;
  for (int64_t first = 0; first < elements; first += kChunk) {
    const int64_t n = std::min(kChunk, elements - first);
    chunk.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t r = splitmix64(seed ^ static_cast<uint64_t>(first + i) * 0x100000001b3ULL);
      chunk[static_cast<size_t>(i)] = (static_cast<double>(r % 17) - 8.0) / 8.0;
    }
    to_data_type(t, chunk.data(), bytes.data() + first * elem, n);
  }
  return bytes;
}

HostTensors make_host_tensors(const ConvProblem& p, uint64_t index) {
  HostTensors h;
  const TensorRole out = p.output_tensor();
  if (out != TensorRole::kX)
    h.x = host_values(p.data_type, p.x_shape().span_elements(), 3 * index + 1);
  if (out != TensorRole::kW)
    h.w = host_values(p.data_type, p.w_shape().span_elements(), 3 * index + 2);
  if (out != TensorRole::kY)
    h.y = host_values(p.data_type, p.y_shape().span_elements(), 3 * index + 3);
  return h;
}

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

struct Tensors {
  DeviceBuffer x, w, y;
  TensorPointers pointers() const { return {x.get(), w.get(), y.get()}; }
  const DeviceBuffer& output(TensorRole which) const { return by_role(which, x, w, y); }
};

// Device buffers on the allocator's GPU: the inputs uploaded, the output zeroed.
StatusOr<Tensors> upload(DeviceAllocator& allocator, const ConvProblem& p, const HostTensors& h) {
  Tensors t;
  const int64_t elem = size_of(p.data_type);
  const int64_t spans[] = {p.x_shape().span_elements(), p.w_shape().span_elements(),
                           p.y_shape().span_elements()};
  DeviceBuffer* buffers[] = {&t.x, &t.w, &t.y};
  const std::vector<unsigned char>* host[] = {&h.x, &h.w, &h.y};
  for (int i = 0; i < 3; ++i) {
    CONVPLAN_ASSIGN_OR_RETURN(
        *buffers[i], DeviceBuffer::allocate(allocator, static_cast<size_t>(spans[i] * elem)));
    if (host[i]->empty()) {
      CONVPLAN_RETURN_IF_ERROR(
          cuda_status(cudaMemset(buffers[i]->get(), 0, buffers[i]->size()), "cudaMemset"));
    } else {
      CONVPLAN_RETURN_IF_ERROR(cuda_status(
          cudaMemcpy(buffers[i]->get(), host[i]->data(), host[i]->size(), cudaMemcpyHostToDevice),
          "cudaMemcpy to device"));
    }
  }
  return t;
}

// The output against the float64 reference at kSamples elements; true when within tolerance.
StatusOr<bool> check(const ConvProblem& p, const HostTensors& h, const Tensors& t, NoteSet notes,
                     std::mt19937_64& rng, std::vector<unsigned char>& readback) {
  const TensorRole which = p.output_tensor();
  const DeviceBuffer& out = t.output(which);
  readback.resize(out.size());
  CONVPLAN_RETURN_IF_ERROR(
      cuda_status(cudaMemcpy(readback.data(), out.get(), out.size(), cudaMemcpyDeviceToHost),
                  "cudaMemcpy to host"));
  const int64_t elem = size_of(p.data_type);
  const int64_t span = static_cast<int64_t>(out.size()) / elem;
  std::uniform_int_distribution<int64_t> pick(0, span - 1);
  std::vector<int64_t> offsets(kSamples);
  for (int64_t& o : offsets) o = pick(rng);
  std::vector<double> expected;
  CONVPLAN_RETURN_IF_ERROR(reference_convolution_at(
      p, which == TensorRole::kX ? readback.data() : h.x.data(),
      which == TensorRole::kW ? readback.data() : h.w.data(),
      which == TensorRole::kY ? readback.data() : h.y.data(), offsets, expected));
  std::vector<double> got(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    from_data_type(p.data_type, readback.data() + offsets[i] * elem, &got[i], 1);
  }
  return relative_l2_error(got, expected) <= relative_error_tolerance(p, notes);
}

struct PhaseResult {
  std::string phase;
  int gpus = 0;
  double wall_ms = 0;
  CacheStats stats;
  int mismatches = 0;
  int errors = 0;
  std::vector<std::string> device_models;  // per GPU, DeviceInfo::model_key()
};

// One worker per GPU 0..gpus-1, all on one fresh cache.
PhaseResult run(const char* phase, int gpus, const std::vector<SuiteProblem>& problems,
                const std::vector<HostTensors>& host) {
  PhaseResult result;
  result.phase = phase;
  result.gpus = gpus;
  result.device_models.resize(static_cast<size_t>(gpus));
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  std::unique_ptr<PlanCache> cache = make_bench_cache(backend);
  if (cache == nullptr) {
    result.errors = 1;
    return result;
  }

  std::barrier sync(gpus + 1);
  std::atomic<int> errors{0};
  std::atomic<int> mismatches{0};
  auto fail = [&](int gpu, const std::string& what) {
    ++errors;
    std::fprintf(stderr, "multi_gpu: %s: GPU %d: %s\n", phase, gpu, what.c_str());
  };
  std::vector<std::thread> pool;
  for (int g = 0; g < gpus; ++g) {
    pool.emplace_back([&, g] {
      std::vector<CudnnContext> contexts;
      std::vector<Tensors> tensors;
      bool ready = true;
      // Nothing may throw past a barrier (the others would wait for ever): std::bad_alloc and
      // the like count as errors.
      auto guarded = [&](auto&& step) {
        try {
          step();
        } catch (const std::exception& e) {
          fail(g, std::string("exception: ") + e.what());
          ready = false;
        }
      };
      guarded([&] {
        if (Status s = cuda_status(cudaSetDevice(g), "cudaSetDevice"); !s.ok()) {
          fail(g, s.to_string());
          ready = false;
        }
        for (int c = 0; ready && c < 2; ++c) {
          StatusOr<CudnnContext> ctx = CudnnContext::create(g);
          if (!ctx.ok()) {
            fail(g, "CudnnContext::create: " + ctx.status().to_string());
            ready = false;
          } else {
            contexts.push_back(std::move(ctx).value());
          }
        }
        if (ready) {
          StatusOr<DeviceInfo> info = backend->device_of(contexts[0].handle());
          if (info.ok()) result.device_models[static_cast<size_t>(g)] = info->model_key();
          DeviceAllocator& allocator = backend->default_allocator(contexts[0].handle());
          for (size_t i = 0; ready && i < problems.size(); ++i) {
            StatusOr<Tensors> made = upload(allocator, problems[i].problem, host[i]);
            if (!made.ok()) {
              fail(g, problems[i].name + ": " + made.status().to_string());
              ready = false;
            } else {
              tensors.push_back(std::move(made).value());
            }
          }
        }
      });
      std::vector<size_t> order(problems.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::mt19937 rng(static_cast<uint32_t>(g + 1));  // per GPU: phase B repeats GPU 0's order
      std::shuffle(order.begin(), order.end(), rng);
      std::mt19937_64 sample_rng(static_cast<uint64_t>(g + 101));
      std::vector<unsigned char> readback;
      sync.arrive_and_wait();  // set up; the clock starts
      guarded([&] {
        for (size_t j = 0; ready && j < order.size(); ++j) {
          const SuiteProblem& sp = problems[order[j]];
          const CudnnContext& ctx = contexts[j % 2];
          Status s = cache->execute(ctx.handle(), sp.problem, tensors[order[j]].pointers());
          if (s.ok()) s = ctx.synchronize();
          if (!s.ok()) {
            fail(g, sp.name + ": " + s.to_string());
            continue;
          }
          const std::optional<TuningRecord> record =
              cache->find_record(ctx.handle(), sp.problem, cache->default_policy());
          StatusOr<bool> good = check(sp.problem, host[order[j]], tensors[order[j]],
                                      record ? record->notes : NoteSet{0}, sample_rng, readback);
          if (!good.ok()) {
            fail(g, sp.name + ": check: " + good.status().to_string());
          } else if (!*good) {
            ++mismatches;
            std::fprintf(stderr, "multi_gpu: %s: GPU %d: %s: mismatch against the reference\n",
                         phase, g, sp.name.c_str());
          }
        }
      });
      sync.arrive_and_wait();  // the clock stops when the last worker is done
      for (const CudnnContext& ctx : contexts) cache->forget_handle(ctx.handle());
      tensors.clear();  // before the contexts go
    });
  }
  sync.arrive_and_wait();
  const auto start = std::chrono::steady_clock::now();
  sync.arrive_and_wait();
  result.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (std::thread& th : pool) th.join();
  result.stats = cache->stats();
  result.errors = errors.load();
  result.mismatches = mismatches.load();
  return result;
}

int main_impl(int argc, char** argv) {
  int gpus = -1;
  int64_t batch = 32;
  std::string dtype = "bf16";
  std::string layout = "nhwc";
  std::string suite_file;  // empty: the built-in resnet50 suite
  std::string json_path = "bench/results/multi_gpu.json";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 < argc && flag == "--gpus") {
      gpus = std::atoi(argv[++i]);
    } else if (i + 1 < argc && flag == "--batch") {
      batch = std::atoll(argv[++i]);
    } else if (i + 1 < argc && flag == "--dtype") {
      dtype = argv[++i];
    } else if (i + 1 < argc && flag == "--layout") {
      layout = argv[++i];
    } else if (i + 1 < argc && flag == "--suite-file") {
      suite_file = argv[++i];
    } else if (i + 1 < argc && flag == "--json") {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--gpus G] [--batch B] [--dtype T] [--layout L] "
                   "[--suite-file PATH] [--json PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  if (batch < 1 || (gpus != -1 && gpus < 1)) {
    std::fprintf(stderr, "--gpus and --batch must be >= 1\n");
    return 2;
  }
  const StatusOr<DataType> data_type = parse_data_type(dtype);
  const StatusOr<Layout> parsed_layout = parse_layout(layout);
  for (const Status* s : {&data_type.status(), &parsed_layout.status()}) {
    if (!s->ok()) {
      std::fprintf(stderr, "multi_gpu: %s\n", s->to_string().c_str());
      return 2;
    }
  }
  Status gpu = gpu_available();
  if (!gpu.ok()) {
    std::printf("multi_gpu: skipped: no usable GPU: %s\n", gpu.message().c_str());
    return 0;
  }
  const int visible = cuda_device_count();
  if (gpus == -1) gpus = visible;
  if (gpus > visible) {
    std::fprintf(stderr, "multi_gpu: --gpus %d but only %d CUDA devices\n", gpus, visible);
    return 2;
  }

  StatusOr<std::vector<SuiteProblem>> loaded =
      load_suite(suite_file, *data_type, *parsed_layout, batch);
  if (!loaded.ok()) {
    std::fprintf(stderr, "multi_gpu: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  const std::vector<SuiteProblem>& problems = *loaded;
  std::vector<HostTensors> host;
  for (size_t i = 0; i < problems.size(); ++i) {
    host.push_back(make_host_tensors(problems[i].problem, i));
  }

  const PhaseResult a = run("A", gpus, problems, host);
  const PhaseResult b = run("B", 1, problems, host);
  const double ratio = a.wall_ms > 0 ? b.wall_ms / a.wall_ms : 0;
  const uint64_t distinct = problems.size();

  std::printf(
      "multi-GPU tuning: %s, batch %lld, %s %s, %llu distinct "
      "problems; %d of %d GPUs, "
      "2 contexts each; cuDNN %lld\n",
      suite_file.empty() ? "resnet50" : suite_file.c_str(), static_cast<long long>(batch),
      dtype.c_str(), layout.c_str(), static_cast<unsigned long long>(distinct), gpus, visible,
      static_cast<long long>(cudnn_runtime_version()));
  for (size_t g = 0; g < a.device_models.size(); ++g) {
    std::printf("  GPU %zu: %s\n", g, a.device_models[g].c_str());
  }
  if (gpus == 1) std::printf("note: only 1 GPU used, so phase A is 1 GPU too\n");
  std::printf("%-6s %5s %10s %6s %7s %11s %10s %10s %10s %7s\n", "phase", "GPUs", "wall ms",
              "tunes", "clones", "json_clones", "tune_ms", "clone_ms", "mismatches", "errors");
  for (const PhaseResult* r : {&a, &b}) {
    std::printf("%-6s %5d %10.1f %6llu %7llu %11llu %10.1f %10.1f %10d %7d\n", r->phase.c_str(),
                r->gpus, r->wall_ms, static_cast<unsigned long long>(r->stats.tunes),
                static_cast<unsigned long long>(r->stats.clones),
                static_cast<unsigned long long>(r->stats.json_clones), r->stats.tune_ms,
                r->stats.clone_ms, r->mismatches, r->errors);
  }
  std::printf("B / A wall time (1 GPU over %d): %.2fx\n", gpus, ratio);
  for (const PhaseResult* r : {&a, &b}) {
    std::printf("phase %s: tunes %llu %s %llu distinct problems: %s\n", r->phase.c_str(),
                static_cast<unsigned long long>(r->stats.tunes),
                r->stats.tunes == distinct ? "==" : "!=", static_cast<unsigned long long>(distinct),
                r->stats.tunes == distinct ? "each problem tuned once in all" : "NOT tuned once");
  }

  nlohmann::json out;
  out["benchmark"] = "multi_gpu";
  out["suite_file"] = suite_file.empty() ? "resnet50 (built in)" : suite_file;
  out["batch"] = batch;
  out["dtype"] = dtype;
  out["layout"] = layout;
  out["distinct_problems"] = distinct;
  out["gpus_visible"] = visible;
  out["gpus"] = gpus;
  out["contexts_per_gpu"] = 2;
  out["cudnn_version"] = cudnn_runtime_version();
  out["cuda_runtime_version"] = cuda_runtime_version();
  out["device_models"] = a.device_models;
  out["phases"] = nlohmann::json::array();
  for (const PhaseResult* r : {&a, &b}) {
    out["phases"].push_back({{"phase", r->phase},
                             {"gpus", r->gpus},
                             {"wall_ms", r->wall_ms},
                             {"tunes", r->stats.tunes},
                             {"clones", r->stats.clones},
                             {"json_clones", r->stats.json_clones},
                             {"failures", r->stats.failures},
                             {"tune_ms", r->stats.tune_ms},
                             {"clone_ms", r->stats.clone_ms},
                             {"mismatches", r->mismatches},
                             {"errors", r->errors},
                             {"tuned_once", r->stats.tunes == distinct}});
  }
  out["b_over_a"] = ratio;
  std::error_code ec;
  const std::filesystem::path path(json_path);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream file(json_path);
  if (!file || !(file << out.dump(2) << "\n")) {
    std::fprintf(stderr, "multi_gpu: cannot write %s\n", json_path.c_str());
    return 1;
  }
  std::printf("wrote %s\n", json_path.c_str());
  return a.errors + b.errors + a.mismatches + b.mismatches > 0 ? 1 : 0;
}

}  // namespace
}  // namespace convplan

int main(int argc, char** argv) {
  try {
    return convplan::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multi_gpu: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "multi_gpu: unknown exception\n");
    return 1;
  }
}
