// PlanCache on real cuDNN: eight threads, each with its own stream and handle, over twenty small
// problems of mixed kinds in random interleaving (each key tuned once, cloned for every other
// handle, every result checked against the float64 reference); PlanCache::execute hits inside
// CUDA stream capture, replayed from the graph; MobileNetV2 prepared on four threads with the
// kernel cache; and the destruction orders (cache before or after the handles, a PlanRef outliving
// its cache, a cache still full at process exit). Every test skips, naming the reason, where there
// is no GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "convplan/plan_cache.h"
#include "convplan/reference.h"
#include "support/gpu.h"
#include "support/problems.h"

namespace convplan {
namespace {

// Destroyed by the C++ runtime at exit with plans and an arena still cached. It is constructed
// before main, before CUDA is initialized, so its destructor runs after everything registered
// later, which may include the CUDA runtime's own teardown. A crash there fails this binary. Its
// handle is leaked on purpose, as frameworks leak theirs, so that only the cache is tested.
std::unique_ptr<PlanCache> g_cache_at_exit;

using testing::conv2d;

// Twenty small problems: the three directions, both layouts, fp32 and fp16, groups, stride,
// padding, dilation, a 3-d one and a beta != 0 one.
std::vector<ConvProblem> gpu_problems() {
  using D = Direction;
  using T = DataType;
  const Layout nchw = Layout::kChannelsFirst, nhwc = Layout::kChannelsLast;
  std::vector<ConvProblem> v = {
      conv2d(D::kForward, 2, 16, 32, 1, 14, 3, 1, 1, T::kFloat, nchw),
      conv2d(D::kForward, 2, 32, 32, 1, 14, 1, 1, 0, T::kFloat, nhwc),
      conv2d(D::kForward, 1, 16, 16, 2, 12, 3, 2, 1, T::kFloat, nchw),
      conv2d(D::kForward, 2, 16, 32, 1, 14, 3, 1, 1, T::kHalf, nhwc),
      conv2d(D::kForward, 4, 32, 16, 1, 8, 5, 1, 2, T::kHalf, nhwc),
      conv2d(D::kForward, 1, 32, 32, 32, 10, 3, 1, 1, T::kFloat, nchw),  // depthwise
      conv2d(D::kBackwardData, 2, 16, 32, 1, 14, 3, 1, 1, T::kFloat, nchw),
      conv2d(D::kBackwardData, 2, 32, 16, 1, 12, 1, 1, 0, T::kFloat, nhwc),
      conv2d(D::kBackwardData, 1, 16, 16, 1, 12, 3, 2, 1, T::kFloat, nchw),
      conv2d(D::kBackwardData, 2, 16, 32, 1, 14, 3, 1, 1, T::kHalf, nhwc),
      conv2d(D::kBackwardData, 1, 16, 32, 2, 10, 3, 1, 1, T::kHalf, nhwc),
      conv2d(D::kBackwardFilter, 2, 16, 32, 1, 14, 3, 1, 1, T::kFloat, nchw),
      conv2d(D::kBackwardFilter, 2, 32, 16, 1, 12, 1, 1, 0, T::kFloat, nhwc),
      conv2d(D::kBackwardFilter, 1, 16, 16, 1, 12, 3, 2, 1, T::kFloat, nchw),
      conv2d(D::kBackwardFilter, 2, 16, 32, 1, 14, 3, 1, 1, T::kHalf, nhwc),
      conv2d(D::kBackwardFilter, 1, 32, 32, 2, 10, 3, 1, 1, T::kHalf, nhwc),
  };
  ConvProblem dilated = conv2d(D::kForward, 1, 16, 16, 1, 16, 3, 1, 2, T::kFloat, nchw);
  dilated.dilation = {2, 2, 1};
  v.push_back(dilated);
  ConvProblem scaled = conv2d(D::kForward, 2, 16, 16, 1, 10, 3, 1, 1, T::kFloat, nchw);
  scaled.alpha = 0.5;
  scaled.beta = 0.75;
  v.push_back(scaled);
  ConvProblem volume = conv2d(D::kForward, 1, 8, 16, 1, 6, 3, 1, 1, T::kFloat, nchw);
  volume.spatial_dims = 3;
  volume.input = {6, 6, 6};
  volume.filter = {3, 3, 3};
  volume.pad_before = {1, 1, 1};
  volume.pad_after = {1, 1, 1};
  v.push_back(volume);
  v.push_back(conv2d(D::kBackwardData, 2, 8, 8, 1, 9, 3, 1, 0, T::kFloat, nchw));
  return v;
}

TunePolicy test_policy() { return TunePolicy{}; }  // the defaults, not the environment's

std::unique_ptr<PlanCache> make_cache(std::shared_ptr<Backend> backend, size_t capacity = 10000) {
  PlanCacheOptions options;
  options.backend = std::move(backend);
  options.capacity = capacity;
  options.policy = test_policy();
  StatusOr<std::unique_ptr<PlanCache>> cache = PlanCache::create(std::move(options));
  EXPECT_TRUE(cache.ok()) << cache.status().to_string();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

std::optional<CudnnContext> make_context() {
  StatusOr<CudnnContext> ctx = CudnnContext::create(0);
  if (!ctx.ok()) {
    ADD_FAILURE() << "CudnnContext::create: " << ctx.status().to_string();
    return std::nullopt;
  }
  return std::move(ctx).value();
}

#define ASSIGN_CONTEXT_OR_FAIL(name)                        \
  std::optional<CudnnContext> name##_made = make_context(); \
  ASSERT_TRUE(name##_made.has_value());                     \
  CudnnContext& name = *name##_made

// One problem's three tensors on the device, with the host data they were made from: inputs
// random, the output poisoned (NaN) or, with beta != 0, random too (it is read).
class DeviceProblem {
 public:
  DeviceProblem(Backend& backend, cudnnHandle_t handle, const ConvProblem& p, uint32_t seed)
      : backend_(backend), handle_(handle), problem_(p) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    const TensorShape shapes[3] = {p.x_shape(), p.w_shape(), p.y_shape()};
    for (int t = 0; t < 3; ++t) {
      std::vector<double>& v = values_[t];
      v.resize(static_cast<size_t>(shapes[t].span_elements()));
      for (double& e : v) e = dist(rng);
      const size_t bytes = v.size() * static_cast<size_t>(size_of(p.data_type));
      StatusOr<DeviceBuffer> buffer = DeviceBuffer::allocate(cuda_allocator(), bytes);
      if (!buffer.ok()) {
        ADD_FAILURE() << buffer.status().to_string();
        return;
      }
      device_[t] = std::move(buffer).value();
    }
    upload();
  }

  TensorPointers pointers() const { return {device_[0].get(), device_[1].get(), device_[2].get()}; }

  // Writes the inputs again and poisons (or, with beta, restores) the output.
  void upload() {
    const int out = output_index();
    for (int t = 0; t < 3; ++t) {
      if (device_[t].get() == nullptr) return;
      if (t == out && problem_.beta == 0.0) {
        EXPECT_TRUE(backend_.fill(handle_, device_[t].get(), 0xff, device_[t].size()).ok());
        continue;
      }
      std::vector<unsigned char> host(device_[t].size());
      to_data_type(problem_.data_type, values_[t].data(), host.data(),
                   static_cast<int64_t>(values_[t].size()));
      EXPECT_TRUE(
          backend_.copy_to_device(handle_, device_[t].get(), host.data(), host.size()).ok());
    }
  }

  // The output's relative error against the reference. REQUIRES: the work on the handle's stream
  // is complete (copy_to_host runs on that stream and waits for it).
  double output_error() const {
    const int out = output_index();
    if (device_[out].get() == nullptr) return 1e30;
    std::vector<unsigned char> host(device_[out].size());
    Status s = backend_.copy_to_host(handle_, host.data(), device_[out].get(), host.size());
    if (!s.ok()) {
      ADD_FAILURE() << s.to_string();
      return 1e30;
    }
    std::vector<double> got(values_[out].size());
    from_data_type(problem_.data_type, host.data(), got.data(), static_cast<int64_t>(got.size()));
    // Inputs as the device saw them: rounded to the data type.
    std::vector<double> t[3];
    for (int i = 0; i < 3; ++i) {
      std::vector<unsigned char> bytes(values_[i].size() *
                                       static_cast<size_t>(size_of(problem_.data_type)));
      to_data_type(problem_.data_type, values_[i].data(), bytes.data(),
                   static_cast<int64_t>(values_[i].size()));
      t[i].resize(values_[i].size());
      from_data_type(problem_.data_type, bytes.data(), t[i].data(),
                     static_cast<int64_t>(t[i].size()));
    }
    if (problem_.beta == 0.0) std::fill(t[out].begin(), t[out].end(), 0.0);
    Status r = reference_convolution(problem_, t[0], t[1], t[2]);
    if (!r.ok()) {
      ADD_FAILURE() << r.to_string();
      return 1e30;
    }
    return relative_l2_error(got, t[out]);
  }

  bool output_still_poisoned() const {
    const int out = output_index();
    std::vector<unsigned char> host(device_[out].size());
    if (!backend_.copy_to_host(handle_, host.data(), device_[out].get(), host.size()).ok())
      return false;
    return std::all_of(host.begin(), host.end(), [](unsigned char b) { return b == 0xff; });
  }

  const ConvProblem& problem() const { return problem_; }

 private:
  int output_index() const {
    const TensorRole o = problem_.output_tensor();
    return static_cast<int>(o);
  }
  Backend& backend_;
  cudnnHandle_t handle_;
  ConvProblem problem_;
  std::vector<double> values_[3];
  DeviceBuffer device_[3];
};

double tolerance_for(PlanCache& cache, cudnnHandle_t handle, const ConvProblem& p) {
  std::optional<TuningRecord> record = cache.find_record(handle, p, cache.default_policy());
  return relative_error_tolerance(p, record.has_value() ? record->notes : 0);
}

// Executes through the cache on fresh data, waits, checks against the reference.
::testing::AssertionResult execute_and_check(PlanCache& cache, Backend& backend,
                                             const CudnnContext& ctx, const ConvProblem& p,
                                             uint32_t seed) {
  DeviceProblem data(backend, ctx.handle(), p, seed);
  Status s = cache.execute(ctx.handle(), p, data.pointers());
  if (!s.ok()) return ::testing::AssertionFailure() << p.to_string() << ": " << s.to_string();
  Status sync = ctx.synchronize();
  if (!sync.ok()) return ::testing::AssertionFailure() << sync.to_string();
  const double error = data.output_error();
  const double tolerance = tolerance_for(cache, ctx.handle(), p);
  if (!(error <= tolerance)) {
    return ::testing::AssertionFailure()
           << p.to_string() << ": relative error " << error << " > " << tolerance;
  }
  return ::testing::AssertionSuccess();
}

TEST(PlanCacheGpu, EightThreadsEachTuneEveryKeyOnceAndCloneForEachOtherHandle) {
  CONVPLAN_REQUIRE_GPU();
  constexpr int kThreads = 8;
  const std::vector<ConvProblem> problems = gpu_problems();
  ASSERT_EQ(problems.size(), 20u);
  for (const ConvProblem& p : problems) ASSERT_TRUE(p.validate().ok()) << p.to_string();
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  ASSERT_NE(cache, nullptr);

  std::barrier start(kThreads);
  std::atomic<int> correct{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::optional<CudnnContext> made = make_context();
      if (!made.has_value()) {
        start.arrive_and_drop();
        return;
      }
      CudnnContext& ctx = *made;
      std::vector<int> order(problems.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      std::mt19937 rng(static_cast<uint32_t>(t + 1));
      std::shuffle(order.begin(), order.end(), rng);
      start.arrive_and_wait();
      for (int round = 0; round < 2; ++round) {  // the second round: hits
        for (int i : order) {
          ::testing::AssertionResult r = execute_and_check(*cache, *backend, ctx, problems[i],
                                                           static_cast<uint32_t>(t * 1000 + i));
          if (r) {
            ++correct;
          } else {
            ADD_FAILURE() << "thread " << t << ": " << r.message();
          }
        }
      }
      cache->forget_handle(ctx.handle());  // before the handle goes
    });
  }
  for (std::thread& th : threads) th.join();

  const CacheStats s = cache->stats();
  std::printf("stats: %s\n", s.to_string().c_str());
  RecordProperty("stats", s.to_string());
  EXPECT_EQ(correct.load(), 2 * kThreads * static_cast<int>(problems.size()));
  EXPECT_EQ(s.tunes, problems.size());
  EXPECT_EQ(s.clones, problems.size() * (kThreads - 1));
  EXPECT_EQ(s.misses, problems.size() * kThreads);
  EXPECT_EQ(s.hits, problems.size() * kThreads);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.records, problems.size());
  EXPECT_EQ(s.plans, 0u) << "every handle was forgotten";
}

// MobileNetV2's 30 distinct forward convolutions (suites/mobilenet_v2.txt), bf16 NHWC, batch 32.
std::vector<ConvProblem> mobilenet_v2_forward_b32() {
  static constexpr const char* kShapes[] = {"ic3ih224iw224oc32oh112ow112kh3kw3sh2sw2ph1pw1",
                                            "g32ic32ih112iw112oc32oh112ow112kh3kw3ph1pw1",
                                            "ic32ih112iw112oc16oh112ow112kh1kw1",
                                            "ic16ih112iw112oc96oh112ow112kh1kw1",
                                            "g96ic96ih112iw112oc96oh56ow56kh3kw3sh2sw2ph1pw1",
                                            "ic96ih56iw56oc24oh56ow56kh1kw1",
                                            "ic24ih56iw56oc144oh56ow56kh1kw1",
                                            "g144ic144ih56iw56oc144oh56ow56kh3kw3ph1pw1",
                                            "ic144ih56iw56oc24oh56ow56kh1kw1",
                                            "g144ic144ih56iw56oc144oh28ow28kh3kw3sh2sw2ph1pw1",
                                            "ic144ih28iw28oc32oh28ow28kh1kw1",
                                            "ic32ih28iw28oc192oh28ow28kh1kw1",
                                            "g192ic192ih28iw28oc192oh28ow28kh3kw3ph1pw1",
                                            "ic192ih28iw28oc32oh28ow28kh1kw1",
                                            "g192ic192ih28iw28oc192oh14ow14kh3kw3sh2sw2ph1pw1",
                                            "ic192ih14iw14oc64oh14ow14kh1kw1",
                                            "ic64ih14iw14oc384oh14ow14kh1kw1",
                                            "g384ic384ih14iw14oc384oh14ow14kh3kw3ph1pw1",
                                            "ic384ih14iw14oc64oh14ow14kh1kw1",
                                            "ic384ih14iw14oc96oh14ow14kh1kw1",
                                            "ic96ih14iw14oc576oh14ow14kh1kw1",
                                            "g576ic576ih14iw14oc576oh14ow14kh3kw3ph1pw1",
                                            "ic576ih14iw14oc96oh14ow14kh1kw1",
                                            "g576ic576ih14iw14oc576oh7ow7kh3kw3sh2sw2ph1pw1",
                                            "ic576ih7iw7oc160oh7ow7kh1kw1",
                                            "ic160ih7iw7oc960oh7ow7kh1kw1",
                                            "g960ic960ih7iw7oc960oh7ow7kh3kw3ph1pw1",
                                            "ic960ih7iw7oc160oh7ow7kh1kw1",
                                            "ic960ih7iw7oc320oh7ow7kh1kw1",
                                            "ic320ih7iw7oc1280oh7ow7kh1kw1"};
  std::vector<ConvProblem> v;
  for (const char* shape : kShapes) {
    StatusOr<ConvProblem> p = parse_problem(std::string("dt:bf16,layout:nhwc/mb32") + shape);
    EXPECT_TRUE(p.ok()) << shape << ": " << p.status().to_string();
    if (p.ok()) v.push_back(*p);
  }
  return v;
}

// Regression (2026-12-06): `convplan --db off bench --suite mobilenet_v2 --batch 32
// --prepare-threads 4` aborted in free() under cuDNN's finalization of runtime-compiled plans with
// a kernel cache, in 3 of 3 runs on an H200 and 3 of 3 on an H100, until those finalizations were
// made one at a time (kernel_cache_finalize_mutex). The same convolutions, prepared on four threads
// with the kernel cache on, must all get a plan, and a few then run right from the cache.
TEST(PlanCacheGpu, PrepareOnFourThreadsWithTheKernelCacheTunesMobileNetV2) {
  CONVPLAN_REQUIRE_GPU();
  CudnnBackendOptions options;
  options.kernel_cache = true;
  std::shared_ptr<Backend> backend = make_cudnn_backend(options);
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  ASSERT_NE(cache, nullptr);
  const std::vector<ConvProblem> problems = mobilenet_v2_forward_b32();
  ASSERT_EQ(problems.size(), 30u);
  const Status s = cache->prepare(0, problems, 4);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(cache->stats().tunes, problems.size());
  ASSIGN_CONTEXT_OR_FAIL(ctx);
  for (size_t i : {size_t{1}, size_t{21}, size_t{25}}) {  // depthwise, depthwise, pointwise
    EXPECT_TRUE(execute_and_check(*cache, *backend, ctx, problems[i], static_cast<uint32_t>(i)));
  }
  cache->forget_handle(ctx.handle());
}

TEST(PlanCacheGpu, HitsCapturedInACudaGraphReplayWithReferenceResults) {
  CONVPLAN_REQUIRE_GPU();
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  ASSERT_NE(cache, nullptr);
  ASSIGN_CONTEXT_OR_FAIL(ctx);
  const std::vector<ConvProblem> all = gpu_problems();
  // One of each direction, with different workspace needs.
  const std::vector<ConvProblem> problems = {all[0], all[6], all[11], all[3]};
  std::vector<std::unique_ptr<DeviceProblem>> data;
  for (size_t i = 0; i < problems.size(); ++i) {
    data.push_back(std::make_unique<DeviceProblem>(*backend, ctx.handle(), problems[i],
                                                   static_cast<uint32_t>(50 + i)));
  }
  // Warm-up, twice: tunes, grows the arena to the largest workspace, and lets each plan meet the
  // pointers it will be captured with.
  for (int round = 0; round < 2; ++round) {
    for (auto& d : data) {
      Status s = cache->execute(ctx.handle(), d->problem(), d->pointers());
      ASSERT_TRUE(s.ok()) << s.to_string();
    }
  }
  ASSERT_TRUE(ctx.synchronize().ok());
  for (auto& d : data) d->upload();  // poison the outputs again
  const CacheStats before = cache->stats();

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeGlobal), cudaSuccess);
  Status captured;
  for (int repeat = 0; repeat < 2 && captured.ok(); ++repeat) {
    for (auto& d : data) {
      captured = cache->execute(ctx.handle(), d->problem(), d->pointers());
      if (!captured.ok()) break;
    }
  }
  const cudaError_t end = cudaStreamEndCapture(ctx.stream(), &graph);
  ASSERT_TRUE(captured.ok()) << "execute during capture: " << captured.to_string();
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  ASSERT_NE(graph, nullptr);
  const CacheStats during = cache->stats();
  EXPECT_EQ(during.hits, before.hits + 2 * data.size());
  EXPECT_EQ(during.misses, before.misses) << "capture met no miss";
  for (auto& d : data) EXPECT_TRUE(d->output_still_poisoned()) << "capture ran nothing";

  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    for (auto& d : data) d->upload();
    ASSERT_EQ(cudaGraphLaunch(exec, ctx.stream()), cudaSuccess);
    ASSERT_TRUE(ctx.synchronize().ok());
    for (auto& d : data) {
      const double error = d->output_error();
      EXPECT_LE(error, tolerance_for(*cache, ctx.handle(), d->problem()))
          << "replay " << replay << ": " << d->problem().to_string();
    }
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST(PlanCacheGpu, CacheDestroyedBeforeItsHandles) {
  CONVPLAN_REQUIRE_GPU();
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  ASSIGN_CONTEXT_OR_FAIL(ctx);
  const std::vector<ConvProblem> problems = gpu_problems();
  {
    std::unique_ptr<PlanCache> cache = make_cache(backend);
    for (int i : {0, 6, 11}) EXPECT_TRUE(execute_and_check(*cache, *backend, ctx, problems[i], 1));
  }  // plans and arena released while the handle lives
  // The handle is as good as before.
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  EXPECT_TRUE(execute_and_check(*cache, *backend, ctx, problems[0], 2));
}

TEST(PlanCacheGpu, HandlesDestroyedBeforeTheCache) {
  CONVPLAN_REQUIRE_GPU();
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  const std::vector<ConvProblem> problems = gpu_problems();
  {
    ASSIGN_CONTEXT_OR_FAIL(first);
    ASSIGN_CONTEXT_OR_FAIL(second);
    for (int i : {1, 7, 12}) {
      EXPECT_TRUE(execute_and_check(*cache, *backend, first, problems[i], 3));
      EXPECT_TRUE(execute_and_check(*cache, *backend, second, problems[i], 4));
    }
    cache->forget_handle(first.handle());  // one forgotten properly, one not
  }  // both handles and streams destroyed; the second's plans and arena are still cached
  EXPECT_EQ(cache->stats().plans, 3u);
  cache.reset();  // must not touch the dead handle
}

TEST(PlanCacheGpu, ForgottenHandleAndANewOneAtItsAddressGetAFreshPlan) {
  CONVPLAN_REQUIRE_GPU();
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  const ConvProblem p = gpu_problems()[2];
  {
    ASSIGN_CONTEXT_OR_FAIL(ctx);
    EXPECT_TRUE(execute_and_check(*cache, *backend, ctx, p, 5));
    cache->forget_handle(ctx.handle());
  }
  for (int i = 0; i < 3; ++i) {  // cuDNN may or may not reuse the address
    ASSIGN_CONTEXT_OR_FAIL(ctx);
    EXPECT_TRUE(execute_and_check(*cache, *backend, ctx, p, static_cast<uint32_t>(6 + i)));
    cache->forget_handle(ctx.handle());
  }
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.tunes, 1u);
  EXPECT_EQ(s.clones, 3u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.plans, 0u);
}

TEST(PlanCacheGpu, PinnedPlanOutlivesItsCache) {
  CONVPLAN_REQUIRE_GPU();
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  ASSIGN_CONTEXT_OR_FAIL(ctx);
  const ConvProblem p = gpu_problems()[0];
  std::unique_ptr<PlanCache> cache = make_cache(backend);
  StatusOr<PlanRef> ref = cache->acquire(ctx.handle(), p);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  const double tolerance = tolerance_for(*cache, ctx.handle(), p);
  cache.reset();
  backend.reset();                                        // the plan keeps the backend alive
  std::shared_ptr<Backend> other = make_cudnn_backend();  // for the copies only
  DeviceProblem data(*other, ctx.handle(), p, 11);
  StatusOr<DeviceBuffer> workspace = DeviceBuffer::allocate(
      cuda_allocator(), static_cast<size_t>(std::max<int64_t>(ref->plan().workspace_bytes(), 0)));
  ASSERT_TRUE(workspace.ok());
  Status s = ref->plan().execute(ctx.handle(), data.pointers(), workspace->get());
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(ctx.synchronize().ok());
  EXPECT_LE(data.output_error(), tolerance);
  *ref = PlanRef();
}

TEST(PlanCacheGpu, CacheStillHoldingPlansAtProcessExit) {
  CONVPLAN_REQUIRE_GPU();
  std::shared_ptr<Backend> backend = make_cudnn_backend();
  std::optional<CudnnContext> made = make_context();
  ASSERT_TRUE(made.has_value());
  CudnnContext* leaked = new CudnnContext(std::move(*made));  // never destroyed, see above
  g_cache_at_exit = make_cache(backend);
  ASSERT_NE(g_cache_at_exit, nullptr);
  const std::vector<ConvProblem> problems = gpu_problems();
  for (int i : {0, 6, 11}) {
    EXPECT_TRUE(execute_and_check(*g_cache_at_exit, *backend, *leaked, problems[i], 12));
  }
  EXPECT_EQ(g_cache_at_exit->stats().plans, 3u);
  // Left for the runtime to destroy at exit.
}

}  // namespace
}  // namespace convplan
