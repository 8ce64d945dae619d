// Post-operation chains: their text (alone and as the post: flag of a problem), canonical form,
// the messages of malformed chains, validation, equality and the hash.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "convplan/problem.h"

namespace convplan {
namespace {

constexpr const char* kConv = "g1mb2ic8ih6iw6oc16oh6ow6kh3kw3sh1sw1ph1pw1";

TEST(PostOps, EveryKindParsesAndPrintsBack) {
  for (int k = 0; k < kPostOpKinds; ++k) {
    const std::string name = to_string(static_cast<PostOpKind>(k));
    StatusOr<PostOps> chain = PostOps::parse(name);
    ASSERT_TRUE(chain.ok()) << name << ": " << chain.status().to_string();
    ASSERT_EQ(chain->count, 1);
    EXPECT_EQ(static_cast<int>(chain->ops[0].kind), k);
    EXPECT_EQ(chain->to_string(), name);
  }
}

TEST(PostOps, ChainsKeepTheirOrderAndScale) {
  StatusOr<PostOps> chain = PostOps::parse("bias+add*0.5+relu6+tanh");
  ASSERT_TRUE(chain.ok()) << chain.status().to_string();
  ASSERT_EQ(chain->count, 4);
  EXPECT_EQ(chain->ops[0].kind, PostOpKind::kBias);
  EXPECT_EQ(chain->ops[1].kind, PostOpKind::kAdd);
  EXPECT_EQ(chain->ops[1].scale, 0.5);
  EXPECT_EQ(chain->ops[2].kind, PostOpKind::kRelu6);
  EXPECT_EQ(chain->ops[3].kind, PostOpKind::kTanh);
  EXPECT_EQ(chain->to_string(), "bias+add*0.5+relu6+tanh");
}

TEST(PostOps, CanonicalScale) {
  EXPECT_EQ(PostOps::parse("add*1")->to_string(), "add");
  EXPECT_EQ(PostOps::parse("add*1.0")->to_string(), "add");
  EXPECT_EQ(PostOps::parse("add*-0")->to_string(), "add*0");
  EXPECT_EQ(PostOps::parse("add*0.10")->to_string(), "add*0.1");
  EXPECT_EQ(PostOps::parse("add*-2")->to_string(), "add*-2");
  EXPECT_EQ(PostOps::parse("add*1e-3")->to_string(), "add*0.001");
}

// Found by the parse_problem fuzzer: a large scale printed as "1.09e+94" put a '+' (the chain's
// separator) into the canonical text, which then did not parse back.
TEST(PostOps, LargeScalePrintsWithoutAPlusAndParsesBack) {
  const std::string huge = "bias+add*1" + std::string(94, '0') + "+relu";
  StatusOr<PostOps> chain = PostOps::parse(huge);
  ASSERT_TRUE(chain.ok()) << chain.status().to_string();
  EXPECT_EQ(chain->to_string(), "bias+add*1e94+relu");
  StatusOr<PostOps> again = PostOps::parse(chain->to_string());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*again, *chain);
}

struct BadChain {
  const char* text;
  const char* expected;  // a part of the message
};

TEST(PostOps, MalformedChainsNameTheToken) {
  const BadChain cases[] = {
      {"", "empty"},
      {"rleu", "'rleu' at 0"},
      {"bias+rleu", "'rleu' at 5"},
      {"bias++relu", "empty post-op at 5"},
      {"relu+", "empty post-op at 5"},
      {"+relu", "empty post-op at 0"},
      {"RELU", "'RELU' at 0"},
      {"relu*2", "only add takes one"},
      {"add*", "scale ''"},
      {"add*x", "scale 'x'"},
      {"add*1e999", "not a finite number"},
      {"add*nan", "not a finite number"},
      {"bias+relu+bias", "repeats bias"},
      {"add+add", "repeats add"},
      {"relu+relu+relu+relu+relu+relu+relu+relu+relu", "one op too many"},
      {"bias relu", "'bias relu' at 0"},
  };
  for (const BadChain& c : cases) {
    StatusOr<PostOps> chain = PostOps::parse(c.text);
    ASSERT_FALSE(chain.ok()) << c.text;
    EXPECT_EQ(chain.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(chain.status().message().find(c.expected), std::string::npos)
        << c.text << ": " << chain.status().message();
  }
}

TEST(PostOpsProblem, FlagRoundTripsThroughCanonicalText) {
  for (const char* chain : {"bias", "bias+relu", "bias+add+relu", "add*0.25+gelu_tanh",
                            "silu+sigmoid+elu+gelu+tanh+relu6+relu"}) {
    const std::string text = std::string("dt:bf16,layout:nhwc,post:") + chain + "/" + kConv;
    StatusOr<ConvProblem> p = parse_problem(text);
    ASSERT_TRUE(p.ok()) << text << ": " << p.status().to_string();
    EXPECT_EQ(p->post_ops.to_string(), chain);
    EXPECT_EQ(p->to_string(), text);  // the flag comes last in the canonical order
    StatusOr<ConvProblem> again = parse_problem(p->to_string());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *p);
    EXPECT_EQ(again->hash(), p->hash());
  }
}

TEST(PostOpsProblem, FlagMayComeAnywhereAmongTheFlags) {
  StatusOr<ConvProblem> a = parse_problem(std::string("post:bias+relu,dt:f16/") + kConv);
  StatusOr<ConvProblem> b = parse_problem(std::string("dt:f16,post:bias+relu/") + kConv);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->to_string(), std::string("dt:f16,post:bias+relu/") + kConv);
}

TEST(PostOpsProblem, MalformedFlagNamesTheFlagAndTheToken) {
  StatusOr<ConvProblem> p = parse_problem(std::string("dt:f16,post:bias+rleu/") + kConv);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("at 7 ('post:bias+rleu')"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("'rleu' at 5"), std::string::npos) << p.status().message();
  StatusOr<ConvProblem> twice = parse_problem(std::string("post:relu,post:tanh/") + kConv);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("post is given twice"), std::string::npos);
  StatusOr<ConvProblem> empty = parse_problem(std::string("post:/") + kConv);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("chain is empty"), std::string::npos);
}

TEST(PostOpsProblem, BackwardDirectionsAndBetaAreRefusedNamingTheField) {
  for (const char* dir : {"bwd_data", "bwd_filter"}) {
    StatusOr<ConvProblem> p = parse_problem(std::string("dir:") + dir + ",post:bias+relu/" + kConv);
    ASSERT_FALSE(p.ok()) << dir;
    EXPECT_NE(p.status().message().find("post_ops=bias+relu is only for direction=fwd"),
              std::string::npos)
        << p.status().message();
  }
  StatusOr<ConvProblem> beta = parse_problem(std::string("beta:1,post:relu/") + kConv);
  ASSERT_FALSE(beta.ok());
  EXPECT_NE(beta.status().message().find("beta=1.000000 must be 0 with post_ops=relu"),
            std::string::npos)
      << beta.status().message();
}

TEST(PostOpsProblem, ValidateChecksHandBuiltChains) {
  ConvProblem p = *parse_problem(kConv);
  p.post_ops.push(PostOpKind::kRelu, 2.0);
  EXPECT_NE(p.validate().message().find("post_ops[0].scale=2.000000 must be 1 for relu"),
            std::string::npos)
      << p.validate().message();
  p.post_ops = PostOps{};
  p.post_ops.push(PostOpKind::kBias);
  p.post_ops.push(PostOpKind::kBias);
  EXPECT_NE(p.validate().message().find("more than one bias"), std::string::npos);
  p.post_ops = PostOps{};
  for (int i = 0; i <= kMaxPostOps; ++i) p.post_ops.push(PostOpKind::kTanh);
  EXPECT_NE(p.validate().message().find("post_ops.count=9 must be 0..8"), std::string::npos)
      << p.validate().message();
  p.post_ops = PostOps{};
  p.post_ops.push(static_cast<PostOpKind>(77));
  EXPECT_NE(p.validate().message().find("post_ops[0].kind=77 is not a post-op"), std::string::npos);
}

TEST(PostOpsProblem, ChainIsPartOfEqualityAndHash) {
  const ConvProblem plain = *parse_problem(kConv);
  const ConvProblem relu = *parse_problem(std::string("post:relu/") + kConv);
  const ConvProblem bias_relu = *parse_problem(std::string("post:bias+relu/") + kConv);
  const ConvProblem relu_bias = *parse_problem(std::string("post:relu+bias/") + kConv);
  const ConvProblem add_half = *parse_problem(std::string("post:add*0.5/") + kConv);
  const ConvProblem add_one = *parse_problem(std::string("post:add/") + kConv);
  const std::vector<ConvProblem> all{plain, relu, bias_relu, relu_bias, add_half, add_one};
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = 0; j < all.size(); ++j) {
      EXPECT_EQ(all[i] == all[j], i == j) << i << " " << j;
      if (i != j) {
        EXPECT_NE(all[i].hash(), all[j].hash()) << i << " " << j;
      }
    }
  EXPECT_EQ(relu.without_post_ops(), plain);
  EXPECT_EQ(relu.without_post_ops().hash(), plain.hash());
}

TEST(PostOpsProblem, EntriesPastCountDoNotMatter) {
  ConvProblem a = *parse_problem(std::string("post:relu/") + kConv);
  ConvProblem b = a;
  b.post_ops.ops[3] = PostOp{PostOpKind::kGelu, 1.0};
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.to_string(), b.to_string());
}

TEST(PostOpsProblem, TensorsOfTheChain) {
  const ConvProblem nchw = *parse_problem(std::string("post:bias+add/") + kConv);
  const TensorShape b = nchw.bias_shape();
  EXPECT_EQ(b.rank, 4);
  EXPECT_EQ(b.elements(), 16);
  EXPECT_EQ(b.span_elements(), 16);
  EXPECT_EQ(b.strides[1], 1);
  EXPECT_EQ(nchw.residual_shape(), nchw.y_shape());
  const ConvProblem nhwc = *parse_problem(std::string("layout:nhwc,post:bias+add/") + kConv);
  EXPECT_EQ(nhwc.bias_shape().strides[1], 1);
  EXPECT_EQ(nhwc.bias_shape().span_elements(), 16);
  const double plain = parse_problem(kConv)->min_bytes();
  EXPECT_EQ(nchw.min_bytes(), plain + 4.0 * (16 + 2 * 16 * 36));
}

}  // namespace
}  // namespace convplan
