// Graphs of problems with post-op chains, without a GPU: conv -> pointwise... finalizes for every
// op, type, layout and rank; the graph holds one pointwise operation per op; the
// descriptors are all released; pointer checks name the chain's tensors; unfused configurations
// are not built as fused plans.
#include <gtest/gtest.h>

#include <string>

#include "convplan/problem.h"
#include "cudnn/descriptor.h"
#include "cudnn/engines.h"
#include "cudnn/graph.h"
#include "cudnn/plan.h"

namespace convplan::cudnn_detail {
namespace {

ConvProblem parse(const std::string& text) {
  StatusOr<ConvProblem> p = parse_problem(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status().to_string();
  return p.ok() ? *p : ConvProblem{};
}

// The graph's pointwise operations (cuDNN 9.19 answers NOT_SUPPORTED to reading
// CUDNN_ATTR_OPERATIONGRAPH_OPS back, so they are counted among the descriptors the graph keeps).
int64_t pointwise_operations(const ConvGraph& g) {
  int64_t count = 0;
  for (const BackendDescriptor& d : g.post) {
    count += d.type() == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ? 1 : 0;
  }
  return count;
}

TEST(FusedGraph, EveryOpTypeLayoutAndRankFinalizesWithoutADevice) {
  const int64_t live_before = live_descriptor_count();
  const char* convs[] = {"g1mb2ic8iw10oc4kw3pw1", "g1mb2ic8ih6iw6oc16kh3kw3ph1pw1",
                         "g1mb2ic4id4ih4iw4oc8kd3kh3kw3pd1ph1pw1"};
  int built = 0;
  for (int k = 0; k < kPostOpKinds; ++k) {
    const std::string op = to_string(static_cast<PostOpKind>(k));
    const std::string chain = op == "bias"  ? "bias+relu"
                              : op == "add" ? "add*0.5"
                                            : "bias+add+" + op;
    for (const char* dt : {"f32", "f16", "bf16", "f64"})
      for (const char* layout : {"nchw", "nhwc"})
        for (const char* conv : convs) {
          const ConvProblem p =
              parse(std::string("dt:") + dt + ",layout:" + layout + ",post:" + chain + "/" + conv);
          SCOPED_TRACE(p.to_string());
          StatusOr<ConvGraph> g = build_conv_graph(nullptr, p);
          ASSERT_TRUE(g.ok()) << g.status().to_string();
          EXPECT_EQ(pointwise_operations(*g), p.post_ops.count);
          StatusOr<int64_t> engines = engine_global_count(g->graph);
          ASSERT_TRUE(engines.ok()) << engines.status().to_string();
          ++built;
        }
  }
  EXPECT_EQ(built, kPostOpKinds * 4 * 2 * 3);
  EXPECT_EQ(live_descriptor_count(), live_before);
}

TEST(FusedGraph, PlainProblemsKeepTheirOneOperation) {
  StatusOr<ConvGraph> g = build_conv_graph(nullptr, parse("g1mb2ic8ih6iw6oc16kh3kw3ph1pw1"));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(pointwise_operations(*g), 0);
  EXPECT_TRUE(g->post.empty());
}

TEST(FusedGraph, PointerChecksNameTheChainsTensors) {
  alignas(64) static char buf[512];
  const TensorPointers t{buf, buf + 64, buf + 128, nullptr, nullptr};
  PostOps chain = *PostOps::parse("bias+add+relu");
  Status s = check_pointers(t, nullptr, 0, chain);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor bias is null; post:bias+add+relu reads it"), std::string::npos)
      << s.message();
  const TensorPointers with_bias{buf, buf + 64, buf + 128, buf + 192, buf + 257};
  s = check_pointers(with_bias, nullptr, 0, chain);
  EXPECT_NE(s.message().find("tensor residual at"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("is not 16-byte aligned"), std::string::npos) << s.message();
  EXPECT_TRUE(check_pointers(t, nullptr, 0, *PostOps::parse("relu")).ok());
  EXPECT_TRUE(check_pointers(t, nullptr, 0).ok());  // no chain: bias and residual unread
}

TEST(FusedGraph, UnfusedConfigurationsAreNotBuiltAsFusedPlans) {
  EngineConfig c;
  c.engine_id = 0;
  c.unfused = true;
  const ConvProblem p = parse("post:relu/g1mb2ic8ih6iw6oc16kh3kw3ph1pw1");
  // A non-null fake handle: the refusal comes before cuDNN sees it.
  StatusOr<std::unique_ptr<CudnnPlan>> plan =
      build_plan(reinterpret_cast<cudnnHandle_t>(0x10), p, c);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("unfused+eng0 is an unfused configuration"),
            std::string::npos)
      << plan.status().message();
}

}  // namespace
}  // namespace convplan::cudnn_detail
