// Post-op chains on the GPU: every chain x data type x layout on a few small problems, with the
// backend's fused and unfused candidates both checked against the float64 reference; the epilogue
// kernel against its host twin (vector path, tail, unaligned pointers); CUDA-graph capture of a
// fused and an unfused plan; and a tune that times and validates both kinds. Every test skips,
// naming the reason, without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "convplan/cudnn_backend.h"
#include "convplan/reference.h"
#include "convplan/tuner.h"
#include "epilogues/epilogue.h"
#include "support/gpu.h"

namespace convplan {
namespace {

// Host and device copies of every tensor a chained problem reads or writes.
struct Tensors {
  std::vector<double> x, w, y, bias, residual;
  DeviceBuffer dx, dw, dy, dbias, dresidual, workspace;
  TensorPointers pointers() const {
    return {dx.get(), dw.get(), dy.get(), dbias.get(), dresidual.get()};
  }
};

class FusedGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CONVPLAN_REQUIRE_GPU();
    auto ctx = CudnnContext::create(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::make_unique<CudnnContext>(std::move(ctx).value());
    backend_ = make_cudnn_backend();
  }

  DeviceAllocator& allocator() { return backend_->default_allocator(ctx_->handle()); }

  // Uploads `values` (rounded to t) into a new buffer.
  StatusOr<DeviceBuffer> upload(DataType t, const std::vector<double>& values) {
    std::vector<uint8_t> bytes(values.size() * static_cast<size_t>(size_of(t)));
    to_data_type(t, values.data(), bytes.data(), static_cast<int64_t>(values.size()));
    CONVPLAN_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(allocator(), bytes.size()));
    CONVPLAN_RETURN_IF_ERROR(
        backend_->copy_to_device(ctx_->handle(), b.get(), bytes.data(), bytes.size()));
    return b;
  }

  StatusOr<std::vector<double>> download(DataType t, const DeviceBuffer& b, size_t count) {
    std::vector<uint8_t> bytes(count * static_cast<size_t>(size_of(t)));
    CONVPLAN_RETURN_IF_ERROR(
        backend_->copy_to_host(ctx_->handle(), bytes.data(), b.get(), bytes.size()));
    std::vector<double> v(count);
    from_data_type(t, bytes.data(), v.data(), static_cast<int64_t>(count));
    return v;
  }

  // Random inputs, exact in the data type (multiples of 1/64 in [-1, 1]); y poisoned.
  StatusOr<Tensors> make_tensors(const ConvProblem& p, uint64_t seed) {
    Tensors t;
    std::mt19937_64 gen(seed);
    auto fill = [&](std::vector<double>& v, int64_t n) {
      v.resize(static_cast<size_t>(n));
      for (double& d : v) d = static_cast<double>(static_cast<int>(gen() % 129) - 64) / 64.0;
    };
    fill(t.x, p.x_shape().span_elements());
    fill(t.w, p.w_shape().span_elements());
    fill(t.bias, p.bias_shape().span_elements());
    fill(t.residual, p.residual_shape().span_elements());
    t.y.assign(static_cast<size_t>(p.y_shape().span_elements()), 0.0);
    const DataType d = p.data_type;
    CONVPLAN_ASSIGN_OR_RETURN(t.dx, upload(d, t.x));
    CONVPLAN_ASSIGN_OR_RETURN(t.dw, upload(d, t.w));
    CONVPLAN_ASSIGN_OR_RETURN(t.dy, upload(d, t.y));
    CONVPLAN_RETURN_IF_ERROR(backend_->fill(ctx_->handle(), t.dy.get(), 0xFF, t.dy.size()));
    CONVPLAN_ASSIGN_OR_RETURN(t.dbias, upload(d, t.bias));
    CONVPLAN_ASSIGN_OR_RETURN(t.dresidual, upload(d, t.residual));
    return t;
  }

  // Builds and runs `config` once; its relative L2 error against the full float64 reference.
  StatusOr<double> error_of(const ConvProblem& p, const EngineConfig& config) {
    CONVPLAN_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                              backend_->build(ctx_->handle(), p, config));
    CONVPLAN_ASSIGN_OR_RETURN(Tensors t, make_tensors(p, 7));
    CONVPLAN_ASSIGN_OR_RETURN(
        t.workspace,
        DeviceBuffer::allocate(allocator(), static_cast<size_t>(plan->workspace_bytes())));
    CONVPLAN_RETURN_IF_ERROR(plan->execute(ctx_->handle(), t.pointers(), t.workspace.get()));
    CONVPLAN_ASSIGN_OR_RETURN(std::vector<double> got, download(p.data_type, t.dy, t.y.size()));
    std::vector<double> y = t.y;
    CONVPLAN_RETURN_IF_ERROR(reference_convolution(p, t.x, t.w, y, t.bias, t.residual));
    return relative_l2_error(got, y);
  }

  std::unique_ptr<CudnnContext> ctx_;
  std::shared_ptr<Backend> backend_;
};

std::string chain_problem(const char* dt, const char* layout, const std::string& chain,
                          const char* conv) {
  return std::string("dt:") + dt + ",layout:" + layout + ",post:" + chain + "/" + conv;
}

constexpr const char* kConvs[] = {
    "g1mb2ic16ih10iw10oc32oh10ow10kh3kw3ph1pw1",    // 3x3 same
    "g1mb3ic32ih7iw7oc64oh7ow7kh1kw1",              // 1x1, odd spatial size
    "g1mb2ic16ih9iw9oc24oh5ow5kh3kw3sh2sw2ph1pw1",  // strided
};

// The chains: each activation after bias and a scaled residual, and bias alone.
std::vector<std::string> chains() {
  std::vector<std::string> out{"bias", "add*0.5+relu"};
  for (int k = static_cast<int>(PostOpKind::kRelu); k < kPostOpKinds; ++k) {
    out.push_back(std::string("bias+add+") + to_string(static_cast<PostOpKind>(k)));
  }
  return out;
}

// Every chain x type x layout x problem: the first fused and the first unfused candidate of
// heuristics A that build are run and checked. Unfused candidates must exist for every case;
// fused ones where cuDNN offers them (printed), and for bf16/f16 channels-last bias+add+relu.
TEST_F(FusedGpuTest, EveryChainTypeAndLayoutFusedAndUnfusedMatchTheReference) {
  int fused_checked = 0, unfused_checked = 0, cases = 0;
  for (const char* conv : kConvs)
    for (const std::string& chain : chains())
      for (const char* dt : {"f32", "f16", "bf16"})
        for (const char* layout : {"nchw", "nhwc"}) {
          const std::string text = chain_problem(dt, layout, chain, conv);
          StatusOr<ConvProblem> p = parse_problem(text);
          ASSERT_TRUE(p.ok()) << p.status().to_string();
          ++cases;
          StatusOr<std::vector<Candidate>> list =
              backend_->candidates(ctx_->handle(), *p, CandidateSource::kHeuristicA);
          ASSERT_TRUE(list.ok()) << text << ": " << list.status().to_string();
          bool fused_done = false, unfused_done = false;
          for (const Candidate& c : *list) {
            if ((c.config.unfused ? unfused_done : fused_done)) continue;
            StatusOr<double> err = error_of(*p, c.config);
            if (!err.ok()) continue;  // an engine that does not build: the next one
            EXPECT_LT(*err, relative_error_tolerance(*p, c.notes))
                << text << " " << c.config.to_string();
            (c.config.unfused ? unfused_done : fused_done) = true;
            ++(c.config.unfused ? unfused_checked : fused_checked);
          }
          EXPECT_TRUE(unfused_done) << text << ": no unfused candidate ran";
          const bool must_fuse =
              std::string(layout) == "nhwc" && std::string(dt) != "f32" && chain == "bias+add+relu";
          if (must_fuse) {
            EXPECT_TRUE(fused_done) << text << ": no fused candidate ran";
          }
        }
  std::printf("chains: %d cases, %d fused and %d unfused candidates checked\n", cases,
              fused_checked, unfused_checked);
}

// The kernel against its host twin: odd sizes (tails), many channels, and a y that is not
// 16-byte aligned (the element-wise path).
TEST_F(FusedGpuTest, EpilogueKernelMatchesItsHostTwin) {
  for (const char* text :
       {"dt:bf16,layout:nhwc,post:bias+add*0.5+gelu/g1mb3ic4ih5iw7oc37oh5ow7kh1kw1",
        "dt:f16,post:bias+silu+add/g1mb3ic4ih5iw7oc37oh5ow7kh1kw1",
        "dt:f32,layout:nhwc,post:bias+relu6/g1mb2ic2ih9iw9oc13kh1kw1",
        "dt:f64,post:bias+add+elu+tanh/g1mb2ic2ih9iw9oc13kh1kw1"}) {
    StatusOr<ConvProblem> p = parse_problem(text);
    ASSERT_TRUE(p.ok());
    for (size_t shift : {size_t{0}, static_cast<size_t>(size_of(p->data_type))}) {
      StatusOr<Tensors> t = make_tensors(*p, 11);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      const size_t n = t->y.size();
      std::vector<double> y(n);
      for (size_t i = 0; i < n; ++i) y[i] = t->x[i % t->x.size()] * 3;
      // A buffer one element larger, y placed `shift` bytes in: unaligned when shift > 0.
      std::vector<double> padded(n + 1, 0.0);
      std::copy(y.begin(), y.end(), padded.begin() + (shift ? 1 : 0));
      StatusOr<DeviceBuffer> dev = upload(p->data_type, padded);
      ASSERT_TRUE(dev.ok());
      void* dy = static_cast<char*>(dev->get()) + shift;
      ASSERT_TRUE(epilogue_detail::enqueue_epilogue(ctx_->stream(), *p, dy, t->dbias.get(),
                                                    t->dresidual.get())
                      .ok());
      StatusOr<std::vector<double>> got = download(p->data_type, *dev, n + 1);
      ASSERT_TRUE(got.ok());
      std::vector<double> device(got->begin() + (shift ? 1 : 0),
                                 got->begin() + (shift ? 1 : 0) + static_cast<std::ptrdiff_t>(n));
      // The host twin on the same stored values.
      std::vector<uint8_t> hy(n * static_cast<size_t>(size_of(p->data_type)));
      std::vector<uint8_t> hb(t->bias.size() * static_cast<size_t>(size_of(p->data_type)));
      std::vector<uint8_t> hr(t->residual.size() * static_cast<size_t>(size_of(p->data_type)));
      to_data_type(p->data_type, y.data(), hy.data(), static_cast<int64_t>(n));
      to_data_type(p->data_type, t->bias.data(), hb.data(), static_cast<int64_t>(t->bias.size()));
      to_data_type(p->data_type, t->residual.data(), hr.data(),
                   static_cast<int64_t>(t->residual.size()));
      ASSERT_TRUE(epilogue_detail::run_epilogue_on_host(*p, hy.data(), hb.data(), hr.data()).ok());
      std::vector<double> host(n);
      from_data_type(p->data_type, hy.data(), host.data(), static_cast<int64_t>(n));
      // Device and host math libraries may differ by an ulp before rounding to the type.
      EXPECT_LT(relative_l2_error(device, host), p->data_type == DataType::kDouble ? 1e-13 : 5e-3)
          << text << " shift " << shift;
    }
  }
}

// The fixed kernels against the generic one, byte for byte: every fixed chain x fp32/fp16/bf16 x
// NHWC/NCHW, on shapes that take each bias mode (K a multiple of the vector or not, planes that
// split into vectors or not) with odd element counts (a partial last vector), the add's scale
// other than 1, and the fallback where y is not 16-byte aligned.
TEST_F(FusedGpuTest, FixedEpilogueKernelsMatchTheGenericKernelByteForByte) {
  namespace ed = epilogue_detail;
  const char* convs[] = {
      "g1mb3ic4ih5iw7oc37oh5ow7kh1kw1",     // K odd, planes of 35: the stepping modes, a tail
      "g1mb2ic4ih8iw8oc64oh8ow8kh1kw1",     // K and planes multiples of 8: vector and plane
      "g1mb1ic4ih3iw3oc24oh3ow3kh1kw1",     // K % 8 == 0 with 9-element planes
      "g1mb5ic4ih11iw13oc16oh11ow13kh1kw1"  // many vectors per thread's chunk, odd planes
  };
  const char* chains[] = {"bias",          "bias+relu", "bias+add*0.5", "bias+add+relu",
                          "add*-1.5+relu", "relu",      "bias+gelu",    "bias+silu"};
  int compared = 0;
  for (const char* dt : {"f32", "f16", "bf16"}) {
    for (const char* layout : {"nhwc", "nchw"}) {
      for (const char* chain : chains) {
        for (const char* conv : convs) {
          const std::string text = chain_problem(dt, layout, chain, conv);
          StatusOr<ConvProblem> p = parse_problem(text);
          ASSERT_TRUE(p.ok()) << text;
          StatusOr<Tensors> t = make_tensors(*p, 23);
          ASSERT_TRUE(t.ok()) << t.status().to_string();
          const size_t n = t->y.size(), bytes = n * static_cast<size_t>(size_of(p->data_type));
          for (size_t shift : {size_t{0}, static_cast<size_t>(size_of(p->data_type))}) {
            // y: values beyond ReLU's cut and the activations' knees, one element of slack.
            std::vector<double> y(n + 1);
            for (size_t i = 0; i < y.size(); ++i) y[i] = t->x[i % t->x.size()] * 5 - 0.3;
            StatusOr<DeviceBuffer> a = upload(p->data_type, y), b = upload(p->data_type, y);
            ASSERT_TRUE(a.ok() && b.ok());
            void* ya = static_cast<char*>(a->get()) + shift;
            void* yb = static_cast<char*>(b->get()) + shift;
            EXPECT_EQ(
                ed::epilogue_kernel_for(*p, ed::EpilogueKernel::kFixed, ya, t->dresidual.get()),
                shift == 0 ? ed::EpilogueKernel::kFixed : ed::EpilogueKernel::kGeneric)
                << text;
            ASSERT_TRUE(ed::enqueue_epilogue(ctx_->stream(), *p, ya, t->dbias.get(),
                                             t->dresidual.get(), ed::EpilogueKernel::kFixed)
                            .ok());
            ASSERT_TRUE(ed::enqueue_epilogue(ctx_->stream(), *p, yb, t->dbias.get(),
                                             t->dresidual.get(), ed::EpilogueKernel::kGeneric)
                            .ok());
            std::vector<uint8_t> fixed(bytes), generic(bytes);
            ASSERT_TRUE(backend_->copy_to_host(ctx_->handle(), fixed.data(), ya, bytes).ok());
            ASSERT_TRUE(backend_->copy_to_host(ctx_->handle(), generic.data(), yb, bytes).ok());
            size_t first = 0;
            while (first < bytes && fixed[first] == generic[first]) ++first;
            EXPECT_EQ(first, bytes) << text << " shift " << shift << ": first differing byte";
            ++compared;
          }
        }
      }
    }
  }
  std::printf("fixed vs generic epilogue: %d cases compared byte for byte\n", compared);
}

// A fused and an unfused plan captured into a CUDA graph give the output of a plain execute.
TEST_F(FusedGpuTest, FusedAndUnfusedPlansRunInsideCudaGraphCapture) {
  StatusOr<ConvProblem> p =
      parse_problem(chain_problem("bf16", "nhwc", "bias+add+relu", kConvs[0]));
  ASSERT_TRUE(p.ok());
  StatusOr<std::vector<Candidate>> list =
      backend_->candidates(ctx_->handle(), *p, CandidateSource::kHeuristicA);
  ASSERT_TRUE(list.ok());
  int captured[2] = {0, 0};
  for (const Candidate& c : *list) {
    if (captured[c.config.unfused ? 1 : 0] > 0) continue;
    StatusOr<std::unique_ptr<Plan>> plan = backend_->build(ctx_->handle(), *p, c.config);
    if (!plan.ok()) continue;
    StatusOr<Tensors> t = make_tensors(*p, 3);
    ASSERT_TRUE(t.ok());
    StatusOr<DeviceBuffer> ws =
        DeviceBuffer::allocate(allocator(), static_cast<size_t>((*plan)->workspace_bytes()));
    ASSERT_TRUE(ws.ok());
    ASSERT_TRUE((*plan)->execute(ctx_->handle(), t->pointers(), ws->get()).ok());
    StatusOr<std::vector<double>> direct = download(p->data_type, t->dy, t->y.size());
    ASSERT_TRUE(backend_->fill(ctx_->handle(), t->dy.get(), 0xFF, t->dy.size()).ok());
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(ctx_->stream(), cudaStreamCaptureModeThreadLocal),
              cudaSuccess);
    const Status s = (*plan)->execute(ctx_->handle(), t->pointers(), ws->get());
    ASSERT_EQ(cudaStreamEndCapture(ctx_->stream(), &graph), cudaSuccess);
    ASSERT_TRUE(s.ok()) << c.config.to_string() << ": " << s.to_string();
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, ctx_->stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(ctx_->stream()), cudaSuccess);
    StatusOr<std::vector<double>> replayed = download(p->data_type, t->dy, t->y.size());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    ASSERT_TRUE(direct.ok() && replayed.ok());
    EXPECT_EQ(*direct, *replayed) << c.config.to_string();
    ++captured[c.config.unfused ? 1 : 0];
  }
  EXPECT_EQ(captured[0], 1) << "no fused plan was captured";
  EXPECT_EQ(captured[1], 1) << "no unfused plan was captured";
}

// The tuner times and validates both kinds; the winner is checked again here, and the plan
// JSON of the record (when there is one) rebuilds a plan that gives the same answer.
TEST_F(FusedGpuTest, TunerTimesAndValidatesBothKinds) {
  StatusOr<ConvProblem> p =
      parse_problem("dt:bf16,layout:nhwc,post:bias+add+relu/g1mb8ic64ih28iw28oc256oh28ow28kh1kw1");
  ASSERT_TRUE(p.ok());
  TunePolicy policy;
  policy.mode = TuneMode::kLimited;
  Tuner tuner(backend_);
  StatusOr<TuningRecord> r = tuner.tune(ctx_->handle(), *p, policy);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  int kinds[2] = {0, 0};
  for (const CandidateResult& c : r->candidates) {
    ++kinds[c.config.unfused ? 1 : 0];
    if (c.config == r->config) {
      EXPECT_EQ(c.outcome, "ok");
    }
    std::printf("%-28s %-10s %s\n", c.config.to_string().c_str(),
                c.median_ms >= 0 ? std::to_string(c.median_ms).c_str() : "-", c.outcome.c_str());
  }
  EXPECT_GT(kinds[0], 0) << "no fused candidate offered";
  EXPECT_GT(kinds[1], 0) << "no unfused candidate offered";
  // A tune validates only its finalists (issue 21), and limited mode leaves runtime-compiled
  // (fused) engines out beside a fast precompiled candidate: the tuner's own check (Tuner::check,
  // its rules and tolerance) validates the first plan of each kind that builds.
  for (bool unfused : {false, true}) {
    bool checked = false;
    for (const CandidateResult& c : r->candidates) {
      if (c.config.unfused != unfused) continue;
      StatusOr<std::unique_ptr<Plan>> plan = backend_->build(ctx_->handle(), *p, c.config);
      if (!plan.ok()) continue;
      StatusOr<OutputCheck> check = tuner.check(ctx_->handle(), *p, **plan);
      ASSERT_TRUE(check.ok()) << c.config.to_string() << ": " << check.status().to_string();
      EXPECT_TRUE(check->passed) << c.config.to_string() << ": " << check->failure;
      checked = true;
      break;
    }
    EXPECT_TRUE(checked) << (unfused ? "no unfused" : "no fused") << " plan built";
  }
  StatusOr<double> err = error_of(*p, r->config);
  ASSERT_TRUE(err.ok()) << err.status().to_string();
  EXPECT_LT(*err, relative_error_tolerance(*p, r->notes));
  if (!r->plan_json.empty()) {
    StatusOr<std::unique_ptr<Plan>> clone =
        backend_->build_from_json(ctx_->handle(), *p, r->plan_json);
    ASSERT_TRUE(clone.ok()) << clone.status().to_string();
    EXPECT_EQ((*clone)->config().unfused, r->config.unfused);
  }
}

TEST_F(FusedGpuTest, MissingBiasIsAnErrorNotACrash) {
  StatusOr<ConvProblem> p = parse_problem(chain_problem("f16", "nhwc", "bias+relu", kConvs[1]));
  ASSERT_TRUE(p.ok());
  StatusOr<std::vector<Candidate>> list =
      backend_->candidates(ctx_->handle(), *p, CandidateSource::kHeuristicA);
  ASSERT_TRUE(list.ok());
  for (const Candidate& c : *list) {
    StatusOr<std::unique_ptr<Plan>> plan = backend_->build(ctx_->handle(), *p, c.config);
    if (!plan.ok()) continue;
    StatusOr<Tensors> t = make_tensors(*p, 5);
    ASSERT_TRUE(t.ok());
    TensorPointers ptrs = t->pointers();
    ptrs.bias = nullptr;
    StatusOr<DeviceBuffer> ws =
        DeviceBuffer::allocate(allocator(), static_cast<size_t>((*plan)->workspace_bytes()));
    const Status s = (*plan)->execute(ctx_->handle(), ptrs, ws->get());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.config.to_string();
    EXPECT_NE(s.message().find("tensor bias is null"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace convplan
