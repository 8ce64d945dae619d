// The tuner on real cuDNN, for a few ResNet-50 layers (bf16 channels-last with n=8, and fp32
// channels-first): the limited-mode winner is right (checked again here, independently of the
// tuner, against the float64 reference); a wrong result injected into the would-be winner's
// output is rejected and another engine chosen; disabling the winner gives the next best; and
// exhaustive search does not choose anything slower than the heuristic's first choice beyond
// noise; and (LimitedVsExhaustive, issue 21) limited mode chooses within 3% of exhaustive. Figures
// belong in the benchmarks: the timing assertions are deliberately loose.
//
// Runtime-compiled engines are left out (allow_runtime_compilation = false) to keep each tune
// to seconds; cudnn_engines_test covers them. Every test skips, naming the reason, without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "convplan/reference.h"
#include "convplan/tuner.h"
#include "support/gpu.h"
#include "support/problems.h"

namespace convplan {
namespace {

struct Layer {
  std::string label;
  ConvProblem problem;
};

// A ResNet-50 layer: square input of hw, "same" padding for the filter.
ConvProblem resnet_conv(Direction dir, int64_t c, int64_t k, int64_t hw, int64_t filter,
                        int64_t stride, DataType type, Layout layout, int64_t n) {
  return testing::conv2d(dir, n, c, k, 1, hw, filter, stride, filter / 2, type, layout);
}

std::vector<Layer> layers() {
  using D = Direction;
  const DataType bf16 = DataType::kBFloat16, f32 = DataType::kFloat;
  const Layout nhwc = Layout::kChannelsLast, nchw = Layout::kChannelsFirst;
  return {
      {"conv2_3x3_bf16_nhwc", resnet_conv(D::kForward, 64, 64, 56, 3, 1, bf16, nhwc, 8)},
      {"conv2_1x1_expand_bf16_nhwc", resnet_conv(D::kForward, 64, 256, 56, 1, 1, bf16, nhwc, 8)},
      {"conv3_3x3_s2_bf16_nhwc", resnet_conv(D::kForward, 128, 128, 56, 3, 2, bf16, nhwc, 8)},
      {"conv2_3x3_bf16_nhwc_bwd_data",
       resnet_conv(D::kBackwardData, 64, 64, 56, 3, 1, bf16, nhwc, 8)},
      {"conv2_3x3_bf16_nhwc_bwd_filter",
       resnet_conv(D::kBackwardFilter, 64, 64, 56, 3, 1, bf16, nhwc, 8)},
      {"conv4_3x3_f32_nchw", resnet_conv(D::kForward, 256, 256, 14, 3, 1, f32, nchw, 8)},
  };
}

class TunerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CONVPLAN_REQUIRE_GPU();
    auto ctx = CudnnContext::create(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_.emplace(std::move(ctx).value());
    backend_ = make_cudnn_backend();
    policy_.mode = TuneMode::kLimited;
    policy_.allow_runtime_compilation = false;
  }

  StatusOr<TuningRecord> tune(const ConvProblem& p, const TunePolicy& policy,
                              TunerOptions options = {}) {
    Tuner tuner(backend_, std::move(options));
    return tuner.tune(ctx_->handle(), p, policy);
  }

  static const CandidateResult* find(const TuningRecord& r, const EngineConfig& config) {
    for (const CandidateResult& c : r.candidates) {
      if (c.config == config) return &c;
    }
    return nullptr;
  }

  // Device buffers of a problem with fresh random inputs (the output poisoned), made here and
  // not by the tuner, so that a check through them is independent of it.
  struct Buffers {
    DeviceBuffer x, w, y, workspace;
    std::vector<uint8_t> host[3];
  };
  StatusOr<Buffers> make_buffers(const ConvProblem& p, int64_t workspace_bytes) {
    Buffers b;
    DeviceAllocator& a = backend_->default_allocator(ctx_->handle());
    const TensorShape shapes[3] = {p.x_shape(), p.w_shape(), p.y_shape()};
    DeviceBuffer* dev[3] = {&b.x, &b.w, &b.y};
    std::mt19937_64 gen(std::random_device{}());
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    const TensorRole names[3] = {TensorRole::kX, TensorRole::kW, TensorRole::kY};
    for (int t = 0; t < 3; ++t) {
      const int64_t span = shapes[t].span_elements();
      const size_t bytes = static_cast<size_t>(span * size_of(p.data_type));
      CONVPLAN_ASSIGN_OR_RETURN(*dev[t], DeviceBuffer::allocate(a, bytes));
      b.host[t].resize(bytes);
      if (names[t] == p.output_tensor()) {
        std::fill(b.host[t].begin(), b.host[t].end(), uint8_t{0xFF});
      } else {
        std::vector<double> v(static_cast<size_t>(span));
        for (double& d : v) d = uniform(gen);
        to_data_type(p.data_type, v.data(), b.host[t].data(), span);
      }
      CONVPLAN_RETURN_IF_ERROR(
          backend_->copy_to_device(ctx_->handle(), dev[t]->get(), b.host[t].data(), bytes));
    }
    CONVPLAN_ASSIGN_OR_RETURN(b.workspace,
                              DeviceBuffer::allocate(a, static_cast<size_t>(workspace_bytes)));
    return b;
  }

  // Builds `config`, runs it once on fresh data and returns its relative L2 error against the
  // float64 reference on 1024 random output elements (infinity when one of them is NaN).
  StatusOr<double> independent_error(const ConvProblem& p, const EngineConfig& config) {
    CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                              backend_->build(ctx_->handle(), p, config));
    CONVPLAN_ASSIGN_OR_RETURN(Buffers b, make_buffers(p, plan->workspace_bytes()));
    CONVPLAN_RETURN_IF_ERROR(
        plan->execute(ctx_->handle(), {b.x.get(), b.w.get(), b.y.get()}, b.workspace.get()));
    const int out = static_cast<int>(p.output_tensor());
    DeviceBuffer* dev[3] = {&b.x, &b.w, &b.y};
    std::vector<uint8_t> result(b.host[out].size());
    CONVPLAN_RETURN_IF_ERROR(
        backend_->copy_to_host(ctx_->handle(), result.data(), dev[out]->get(), result.size()));
    const TensorShape shape = out == 0 ? p.x_shape() : out == 1 ? p.w_shape() : p.y_shape();
    std::mt19937_64 gen(std::random_device{}());
    std::uniform_int_distribution<int64_t> pick(0, shape.elements() - 1);  // packed layouts
    std::vector<int64_t> offsets(1024);
    for (int64_t& o : offsets) o = pick(gen);
    std::vector<double> expected;
    CONVPLAN_RETURN_IF_ERROR(reference_convolution_at(p, b.host[0].data(), b.host[1].data(),
                                                      b.host[2].data(), offsets, expected));
    std::vector<double> got(offsets.size());
    const int64_t elem = size_of(p.data_type);
    for (size_t i = 0; i < offsets.size(); ++i) {
      from_data_type(p.data_type, result.data() + offsets[i] * elem, &got[i], 1);
    }
    return relative_l2_error(got, expected);
  }

  // The median of `runs` timed runs of `config` on buffers of its own.
  StatusOr<double> median_ms(const ConvProblem& p, const EngineConfig& config, int runs) {
    CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                              backend_->build(ctx_->handle(), p, config));
    CONVPLAN_ASSIGN_OR_RETURN(Buffers b, make_buffers(p, plan->workspace_bytes()));
    CONVPLAN_ASSIGN_OR_RETURN(std::vector<float> t,
                              backend_->time(*plan, {b.x.get(), b.w.get(), b.y.get()},
                                             b.workspace.get(), 3, runs, true, 0));
    if (t.empty()) return internal_error("no timed runs");
    std::sort(t.begin(), t.end());
    return static_cast<double>(t[t.size() / 2]);
  }

  std::optional<CudnnContext> ctx_;
  std::shared_ptr<Backend> backend_;
  TunePolicy policy_;
};

TEST_F(TunerGpuTest, LimitedModeWinnerIsValidatedOnResNetLayers) {
  for (const Layer& layer : layers()) {
    SCOPED_TRACE(layer.label + " " + layer.problem.to_string());
    auto r = tune(layer.problem, policy_);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const CandidateResult* chosen = find(*r, r->config);
    ASSERT_NE(chosen, nullptr);
    EXPECT_EQ(chosen->outcome, "ok");
    EXPECT_GT(r->time_ms, 0);
    EXPECT_EQ(r->time_ms, chosen->median_ms);
    EXPECT_GE(chosen->relative_error, 0);
    EXPECT_LE(chosen->relative_error, relative_error_tolerance(layer.problem, chosen->notes));
    int timed = 0;
    for (const CandidateResult& c : r->candidates) {
      // Finalists validated in order of speed: the ones left unchecked lost on time.
      if (c.outcome.rfind("not validated", 0) != 0 && c.outcome != "ok") continue;
      ++timed;
      EXPECT_EQ(c.relative_error >= 0, c.outcome == "ok") << c.config.to_string();
      // The choice: nothing that could have been served is more than 2% faster.
      EXPECT_GE(c.median_ms, r->time_ms / 1.02 - 1e-9) << c.config.to_string();
    }
    EXPECT_GE(timed, 1);
    auto err = independent_error(layer.problem, r->config);
    ASSERT_TRUE(err.ok()) << err.status().to_string();
    EXPECT_LE(*err, relative_error_tolerance(layer.problem, r->notes)) << r->config.to_string();
    std::printf("%-34s %-24s %8.4f ms  error %.2e  (%zu candidates, %.0f ms to tune)\n",
                layer.label.c_str(), r->config.to_string().c_str(), r->time_ms, *err,
                r->candidates.size(), r->tuning_ms);
  }
}

TEST_F(TunerGpuTest, InjectedWrongResultOfTheWouldBeWinnerIsRejected) {
  // The would-be winner is the first candidate validated (finalists are checked fastest first).
  // It is taken from this run, not from an earlier tune: two tunes of a small layer can order
  // candidates within 3% of each other differently (regression: conv4_3x3_f32_nchw on the H200).
  for (const Layer& layer : {layers()[0], layers()[5]}) {
    SCOPED_TRACE(layer.label);
    TunerOptions options;
    std::optional<EngineConfig> victim;
    cudaStream_t stream = ctx_->stream();
    options.after_candidate_run = [&](const EngineConfig& c, void* out, size_t bytes) {
      if (victim.has_value() && *victim != c) return;
      ASSERT_FALSE(victim.has_value()) << "the corrupted candidate was validated twice";
      victim = c;
      // Zeros where the result should be: relative error 1. On the handle's stream, after the
      // candidate's kernels and before the tuner reads the output back.
      ASSERT_EQ(cudaMemsetAsync(out, 0, bytes, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    };
    auto r = tune(layer.problem, policy_, options);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(victim.has_value());
    EXPECT_NE(r->config, *victim);
    const CandidateResult* rejected = find(*r, *victim);
    ASSERT_NE(rejected, nullptr);
    EXPECT_EQ(rejected->outcome.rfind("rejected: relative error", 0), 0u) << rejected->outcome;
    ASSERT_FALSE(rejected->times_ms.empty());  // timed first, then checked as the fastest
    const CandidateResult* chosen = find(*r, r->config);
    ASSERT_NE(chosen, nullptr);
    EXPECT_EQ(chosen->outcome, "ok");
  }
}

TEST_F(TunerGpuTest, DisablingTheWinnerChoosesTheNextBest) {
  const ConvProblem p = layers()[0].problem;
  auto first = tune(p, policy_);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const EngineConfig winner = first->config;

  TunePolicy disabled = policy_;
  disabled.disabled_fwd = {EngineRule{winner.engine_id, winner.knobs}};
  auto second = tune(p, disabled);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_NE(second->config, winner);
  EXPECT_FALSE(disabled.disabled_fwd[0].matches(second->config));
  const CandidateResult* filtered = find(*second, winner);
  ASSERT_NE(filtered, nullptr);
  EXPECT_EQ(filtered->outcome.rfind("filtered: engine " + std::to_string(winner.engine_id) +
                                        " disabled by CONVPLAN_DISABLED_FWD_ENGINES",
                                    0),
            0u)
      << filtered->outcome;
  // The next best: it survived the first tune too, and nothing else that survived the second
  // is clearly faster.
  const CandidateResult* before = find(*first, second->config);
  ASSERT_NE(before, nullptr);
  EXPECT_EQ(before->outcome.rfind("not validated: slower than the choice", 0), 0u)
      << before->outcome;
  for (const CandidateResult& c : second->candidates) {
    if (c.outcome == "ok") {
      EXPECT_GE(c.median_ms, second->time_ms / 1.02 - 1e-9) << c.config.to_string();
    }
  }
}

// Tuner::check (what `convplan run --verify` and `bench --verify` use): the tuner's own rules on a
// served plan, sampled on the device for a large layer; an injected wrong output fails it.
TEST_F(TunerGpuTest, CheckOfAServedPlanUsesTheTunersRules) {
  for (const Layer& layer : {layers()[0], layers()[5]}) {
    SCOPED_TRACE(layer.label);
    auto r = tune(layer.problem, policy_);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto plan = backend_->build(ctx_->handle(), layer.problem, r->config);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    Tuner tuner(backend_);
    const auto start = std::chrono::steady_clock::now();
    auto good = tuner.check(ctx_->handle(), layer.problem, **plan);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(good.ok()) << good.status().to_string();
    EXPECT_TRUE(good->passed) << good->failure;
    EXPECT_GT(good->elements_checked, 0);
    EXPECT_LE(good->relative_error, good->tolerance);
    std::printf("%-24s check of %s: error %.2e over %lld elements (%s) in %.3f s\n",
                layer.label.c_str(), r->config.to_string().c_str(), good->relative_error,
                static_cast<long long>(good->elements_checked), good->full ? "all" : "sampled",
                seconds);
    TunerOptions options;
    cudaStream_t stream = ctx_->stream();
    options.after_candidate_run = [&](const EngineConfig&, void* out, size_t bytes) {
      ASSERT_EQ(cudaMemsetAsync(out, 0, bytes, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    };
    Tuner corrupting(backend_, options);
    auto bad = corrupting.check(ctx_->handle(), layer.problem, **plan);
    ASSERT_TRUE(bad.ok()) << bad.status().to_string();
    EXPECT_FALSE(bad->passed);
    EXPECT_EQ(bad->failure.rfind("rejected: relative error", 0), 0u) << bad->failure;
  }
}

TEST_F(TunerGpuTest, ExhaustiveIsNotSlowerThanTheHeuristicChoice) {
  for (const Layer& layer : {layers()[0], layers()[5]}) {
    SCOPED_TRACE(layer.label);
    TunePolicy heuristic = policy_;
    heuristic.mode = TuneMode::kHeuristic;
    auto h = tune(layer.problem, heuristic);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    TunePolicy exhaustive = policy_;
    exhaustive.mode = TuneMode::kExhaustive;
    exhaustive.budget_ms = 8000;
    auto e = tune(layer.problem, exhaustive);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_LT(e->tuning_ms, exhaustive.budget_ms + 5000);  // the budget is honoured, roughly
    // Both choices timed again here, the same way, so the comparison is fair.
    auto th = median_ms(layer.problem, h->config, 21);
    auto te = median_ms(layer.problem, e->config, 21);
    ASSERT_TRUE(th.ok()) << th.status().to_string();
    ASSERT_TRUE(te.ok()) << te.status().to_string();
    std::printf("%-24s heuristic %-22s %8.4f ms; exhaustive %-22s %8.4f ms (%zu tried, %.0f ms)\n",
                layer.label.c_str(), h->config.to_string().c_str(), *th,
                e->config.to_string().c_str(), *te, e->candidates.size(), e->tuning_ms);
    EXPECT_LE(*te, 1.25 * *th + 0.005);
  }
}

// Issue 21: limited mode's choice (runtime compilation in waves, capped, skipped near the roofline
// and under 0.1 ms) is within kLimitedVsExhaustiveTolerance of the exhaustive choice's time on
// ResNet-50 layers (bf16 NHWC), runtime-compiled engines allowed in both modes. Both choices are
// timed again here, interleaved, so drift hits both alike. Batch 256, the issue's: at batch 32
// every layer takes under 0.1 ms, where the cap on tuning (0.2 s) leaves out compilation
// at run time (0.2-1.2 s a plan), and exhaustive mode's runtime-compiled engine 72 was 7-16%
// faster on the 3x3 layers (0.0226 against 0.0251 ms on layer3_3x3, H200): the two demands
// conflict there, and limited mode keeps the cap.
constexpr double kLimitedVsExhaustiveTolerance = 0.03;  // the 3%
constexpr double kTimingNoiseMs = 0.002;                // event timing resolution on short kernels
constexpr double kExhaustiveBudgetMs = 20000;

TEST_F(TunerGpuTest, LimitedVsExhaustive) {
  using D = Direction;
  const DataType bf16 = DataType::kBFloat16;
  const Layout nhwc = Layout::kChannelsLast;
  const std::vector<Layer> resnet = {
      {"layer1_3x3", resnet_conv(D::kForward, 64, 64, 56, 3, 1, bf16, nhwc, 256)},
      {"layer2_1x1_reduce", resnet_conv(D::kForward, 512, 128, 28, 1, 1, bf16, nhwc, 256)},
      {"layer3_3x3", resnet_conv(D::kForward, 256, 256, 14, 3, 1, bf16, nhwc, 256)},
      {"layer4_1x1_expand", resnet_conv(D::kForward, 512, 2048, 7, 1, 1, bf16, nhwc, 256)},
  };
  for (const Layer& layer : resnet) {
    SCOPED_TRACE(layer.label);
    TunePolicy limited = policy_;
    limited.allow_runtime_compilation = true;
    auto l = tune(layer.problem, limited);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    TunePolicy exhaustive = limited;
    exhaustive.mode = TuneMode::kExhaustive;
    exhaustive.budget_ms = kExhaustiveBudgetMs;
    auto e = tune(layer.problem, exhaustive);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    double tl = 1e30, te = 1e30;  // the best of three interleaved medians each
    for (int round = 0; round < 3; ++round) {
      auto a = median_ms(layer.problem, l->config, 21);
      auto b = median_ms(layer.problem, e->config, 21);
      ASSERT_TRUE(a.ok()) << a.status().to_string();
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      tl = std::min(tl, *a);
      te = std::min(te, *b);
    }
    std::printf(
        "%-18s limited %-28s %8.4f ms (%.0f ms tuning); exhaustive %-28s %8.4f ms "
        "(%.0f ms tuning)\n",
        layer.label.c_str(), l->config.to_string().c_str(), tl, l->tuning_ms,
        e->config.to_string().c_str(), te, e->tuning_ms);
    EXPECT_LE(tl, te * (1 + kLimitedVsExhaustiveTolerance) + kTimingNoiseMs);
    EXPECT_LT(e->tuning_ms, kExhaustiveBudgetMs + 15000);  // the budget holds, roughly
  }
}

}  // namespace
}  // namespace convplan
