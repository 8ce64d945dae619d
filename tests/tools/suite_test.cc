// The suite files and their parser, and how the command line's flags turn a descriptor into a
// problem.
#include "suite.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

#include "convplan/problem.h"
#include "problem_args.h"

namespace convplan::cli {
namespace {

Suite load_builtin(const std::string& name) {
  StatusOr<Suite> s = builtin_suite(name);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : Suite{};
}

TEST(BuiltinSuites, AreTheModelSuites) {
  EXPECT_EQ(builtin_suite_names(),
            (std::vector<std::string>{"mobilenet_v2", "resnet50", "resnet50_infer",
                                      "resnext50_32x4d", "unet3d"}));
}

TEST(BuiltinSuites, EachMatchesItsFileInTheSourceTree) {
  for (const std::string& name : builtin_suite_names()) {
    StatusOr<Suite> file = load_suite_file(std::string(CONVPLAN_SUITES_DIR) + "/" + name + ".txt");
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    const Suite builtin = load_builtin(name);
    ASSERT_EQ(file->entries.size(), builtin.entries.size()) << name;
    for (size_t i = 0; i < builtin.entries.size(); ++i) {
      EXPECT_EQ(file->entries[i].name, builtin.entries[i].name);
      EXPECT_EQ(file->entries[i].problem, builtin.entries[i].problem);
    }
  }
}

TEST(BuiltinSuites, ResNet50Has23DistinctForwardConvolutionsFor53Layers) {
  const Suite s = load_builtin("resnet50");
  EXPECT_EQ(s.entries.size(), 23u);
  EXPECT_EQ(s.total_count(), 53);
  std::set<std::string> distinct;
  for (const SuiteEntry& e : s.entries) {
    EXPECT_EQ(e.problem.groups, 1) << e.name;
    EXPECT_EQ(e.problem.spatial_dims, 2) << e.name;
    EXPECT_FALSE(e.given.batch) << e.name << ": batch comes from --batch";
    distinct.insert(e.problem.to_string());
  }
  EXPECT_EQ(distinct.size(), s.entries.size()) << "two lines describe the same convolution";
  // The stem and the last stage's 3x3 reach the expected output sizes.
  EXPECT_EQ(s.entries.front().problem.output()[0], 112);
  EXPECT_EQ(s.entries.back().problem.output()[0], 7);
}

// The inference suite: resnet50's shapes, each with the chain the eval-mode model (batch norm
// folded) has after it: every conv3 adds the residual, every downsample only its bias.
TEST(BuiltinSuites, ResNet50InferIsResNet50WithItsEpilogues) {
  const Suite infer = load_builtin("resnet50_infer");
  const Suite plain = load_builtin("resnet50");
  EXPECT_EQ(infer.entries.size(), 24u);
  EXPECT_EQ(infer.total_count(), 53);
  std::set<std::string> plain_shapes, infer_shapes;
  for (const SuiteEntry& e : plain.entries) plain_shapes.insert(e.problem.to_string());
  int counts[3] = {0, 0, 0};  // bias+relu, bias+add+relu, bias
  for (const SuiteEntry& e : infer.entries) {
    EXPECT_FALSE(e.given.batch) << e.name;
    infer_shapes.insert(e.problem.without_post_ops().to_string());
    const std::string chain = e.problem.post_ops.to_string();
    const bool conv3 = e.name.find("conv3") != std::string::npos;
    const bool downsample = e.name.find("downsample") != std::string::npos;
    const std::string expected = conv3 ? "bias+add+relu" : downsample ? "bias" : "bias+relu";
    EXPECT_EQ(chain, expected) << e.name;
    counts[chain == "bias+relu" ? 0 : chain == "bias" ? 2 : 1] += e.count;
  }
  EXPECT_EQ(infer_shapes, plain_shapes);
  EXPECT_EQ(counts[0], 33);  // conv1 and 16 blocks x (conv1, conv2)
  EXPECT_EQ(counts[1], 16);  // 16 blocks
  EXPECT_EQ(counts[2], 4);   // 4 stages
}

TEST(BuiltinSuites, ResNeXt50GroupsEvery3x3By32AndNothingElse) {
  const Suite s = load_builtin("resnext50_32x4d");
  EXPECT_EQ(s.entries.size(), 24u);
  EXPECT_EQ(s.total_count(), 53);
  int grouped = 0;
  for (const SuiteEntry& e : s.entries) {
    const bool is3x3 = e.problem.filter[0] == 3;
    EXPECT_EQ(e.problem.groups, is3x3 ? 32 : 1) << e.name;
    grouped += is3x3 ? 1 : 0;
  }
  EXPECT_EQ(grouped, 7);  // layer1 has one distinct 3x3, the others two (strided and not)
}

TEST(BuiltinSuites, MobileNetV2HasDepthwiseConvolutions) {
  const Suite s = load_builtin("mobilenet_v2");
  EXPECT_EQ(s.entries.size(), 30u);
  EXPECT_EQ(s.total_count(), 52);
  int depthwise = 0;
  for (const SuiteEntry& e : s.entries) {
    if (e.problem.groups > 1) {
      EXPECT_EQ(e.problem.groups, e.problem.c) << e.name;
      EXPECT_EQ(e.problem.c, e.problem.k) << e.name;
      ++depthwise;
    }
  }
  EXPECT_EQ(depthwise, 10);
}

TEST(BuiltinSuites, UNet3dIsThreeDimensionalWithBatch2) {
  const Suite s = load_builtin("unet3d");
  EXPECT_EQ(s.entries.size(), 12u);
  EXPECT_EQ(s.total_count(), 15);
  for (const SuiteEntry& e : s.entries) {
    EXPECT_EQ(e.problem.spatial_dims, 3) << e.name;
    EXPECT_TRUE(e.given.batch) << e.name;
    EXPECT_EQ(e.problem.n, 2) << e.name;
    EXPECT_GE(e.problem.k, 4) << e.name;
    EXPECT_LE(std::max(e.problem.c, e.problem.k), 384) << e.name;
  }
}

TEST(SuiteParser, IgnoresCommentsAndBlankLines) {
  StatusOr<Suite> s = parse_suite(
      "# header\n\n  conv_a 2 ic8ih8oc8kh3ph1   # trailing comment\n\t\nconv-b.1 1 "
      "dir:bwd_data/mb4ic8ih8oc8kh1\n# end",
      "t.txt");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->entries.size(), 2u);
  EXPECT_EQ(s->entries[0].name, "conv_a");
  EXPECT_EQ(s->entries[0].count, 2);
  EXPECT_EQ(s->entries[0].line, 3);
  EXPECT_EQ(s->entries[1].line, 5);
  EXPECT_EQ(s->entries[1].problem.direction, Direction::kBackwardData);
  EXPECT_TRUE(s->entries[1].given.direction);
  EXPECT_TRUE(s->entries[1].given.batch);
  EXPECT_EQ(s->total_count(), 3);
}

TEST(SuiteParser, WindowsLineEndingsParse) {
  StatusOr<Suite> s = parse_suite("a 1 ic8ih8oc8kh3\r\nb 1 ic8ih8oc16kh3\r\n", "crlf.txt");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->entries.size(), 2u);
}

struct BadSuite {
  const char* text;
  const char* expected;  // substring of the message
};

TEST(SuiteParser, ErrorsNameTheSourceTheLineAndTheProblem) {
  const BadSuite cases[] = {
      {"a 1 ic8ih8oc8kh3\nb 1\n", "bad.txt:2: expected NAME COUNT DESCRIPTOR, found 2 fields"},
      {"a 1 ic8ih8oc8kh3 extra\n", "bad.txt:1: expected NAME COUNT DESCRIPTOR, found 4 fields"},
      {"\n\na x ic8ih8oc8kh3\n", "bad.txt:3: count 'x' is not a whole number from 1 to 1000000000"},
      {"a 1000000001 ic8ih8oc8kh3\n", "bad.txt:1: count '1000000001'"},
      {"a 99999999999999999999 ic8ih8oc8kh3\n", "bad.txt:1: count '99999999999999999999'"},
      {"a 0 ic8ih8oc8kh3\n", "bad.txt:1: count '0'"},
      {"a 2x ic8ih8oc8kh3\n", "bad.txt:1: count '2x'"},
      {"a/b 1 ic8ih8oc8kh3\n", "bad.txt:1: name 'a/b'"},
      {"a 1 ic8ih8oc8kh3\na 1 ic8ih8oc16kh3\n", "bad.txt:2: name 'a' is used already on line 1"},
      {"# only a comment\n", "bad.txt: no convolutions"},
  };
  for (const BadSuite& c : cases) {
    StatusOr<Suite> s = parse_suite(c.text, "bad.txt");
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.expected), std::string::npos)
        << "message: " << s.status().message() << "\nexpected: " << c.expected;
  }
}

TEST(SuiteParser, BadDescriptorCarriesTheParserMessage) {
  const std::string bad = "ic8ih8oc8kh0";
  StatusOr<ConvProblem> direct = parse_problem(bad);
  ASSERT_FALSE(direct.ok());
  StatusOr<Suite> s = parse_suite("ok 1 ic8ih8oc8kh3\nbroken 1 " + bad + "\n", "x.txt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("x.txt:2: descriptor '" + bad + "': "), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find(direct.status().message()), std::string::npos)
      << s.status().message();
}

TEST(SuiteParser, MissingFileIsNotFoundNamingThePath) {
  StatusOr<Suite> s = load_suite_file("/nonexistent/suite.txt");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("/nonexistent/suite.txt"), std::string::npos);
}

TEST(SuiteParser, UnknownBuiltinNamesTheKnownOnes) {
  StatusOr<Suite> s = builtin_suite("vgg");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'vgg'"), std::string::npos);
  EXPECT_NE(s.status().message().find("resnet50"), std::string::npos);
}

TEST(GivenFields, SeesPrefixKeysAndBatch) {
  GivenFields g = given_fields("dir:bwd_filter,dt:f16/g1mb8ic8ih8oc8kh3");
  EXPECT_TRUE(g.direction);
  EXPECT_TRUE(g.data_type);
  EXPECT_FALSE(g.layout);
  EXPECT_TRUE(g.batch);
  g = given_fields("ic8ih8oc8kh3");
  EXPECT_FALSE(g.direction || g.data_type || g.layout || g.batch);
  g = given_fields("layout:nhwc/ic8ih8oc8kh3nmb_is_a_name");
  EXPECT_TRUE(g.layout);
  EXPECT_FALSE(g.batch) << "letters in the trailing name are not entries";
  g = given_fields("ic8_mb3_ih8oc8kh3");
  EXPECT_TRUE(g.batch);
}

TEST(ProblemOverrides, FlagsWinOverTheDescriptorPrefix) {
  ProblemOverrides flags;
  flags.direction = Direction::kBackwardData;
  flags.data_type = DataType::kHalf;
  flags.layout = Layout::kChannelsLast;
  flags.batch = 16;
  StatusOr<ConvProblem> p = make_problem("dir:fwd,dt:f64,layout:nchw/mb2ic8ih8oc8kh3", flags);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->direction, Direction::kBackwardData);
  EXPECT_EQ(p->data_type, DataType::kHalf);
  EXPECT_EQ(p->compute_type, DataType::kFloat) << "the compute type follows the data type";
  EXPECT_EQ(p->layout, Layout::kChannelsLast);
  EXPECT_EQ(p->n, 16);
}

TEST(ProblemOverrides, DefaultsFillOnlyWhatTheDescriptorLeftOut) {
  StatusOr<ConvProblem> p =
      make_problem("dt:f32,layout:nchw/mb4ic8ih8oc8kh3", {}, bench_defaults());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->data_type, DataType::kFloat);
  EXPECT_EQ(p->layout, Layout::kChannelsFirst);
  EXPECT_EQ(p->n, 4);
  p = make_problem("ic8ih8oc8kh3", {}, bench_defaults());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->data_type, DataType::kBFloat16);
  EXPECT_EQ(p->layout, Layout::kChannelsLast);
  EXPECT_EQ(p->n, 32);
}

TEST(ProblemOverrides, WithoutFlagsOrDefaultsTheParserDecides) {
  StatusOr<ConvProblem> p = make_problem("ic8ih8oc8kh3", {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, *parse_problem("ic8ih8oc8kh3"));
}

TEST(ProblemOverrides, NewLayoutDropsExplicitStrides) {
  const ConvProblem base = *parse_problem("mb2ic8ih4iw4oc8kh1kw1");
  ConvProblem strided = base;
  strided.layout = Layout::kExplicit;
  strided.x_strides = {128, 16, 4, 1, 0};
  strided.w_strides = {8, 1, 1, 1, 0};
  strided.y_strides = {128, 16, 4, 1, 0};
  ASSERT_TRUE(strided.validate().ok()) << strided.validate().to_string();
  ProblemOverrides flags;
  flags.layout = Layout::kChannelsLast;
  StatusOr<ConvProblem> p = make_problem(strided.to_string(), flags);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->layout, Layout::kChannelsLast);
  EXPECT_EQ(p->x_strides, TensorStrides{});
}

TEST(ProblemOverrides, InvalidResultCarriesValidateMessage) {
  ProblemOverrides flags;
  StatusOr<ConvProblem> p = make_problem("g3mb2ic64ih8oc64kh3", flags);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("groups"), std::string::npos) << p.status().message();
}

TEST(SuiteProblems, FlagsApplyToEveryEntryAndEqualProblemsMerge) {
  StatusOr<Suite> s = parse_suite(
      "a 2 mb1ic8ih8oc8kh3ph1\nb 3 mb5ic8ih8oc8kh3ph1\nc 1 dt:f32/ic16ih8oc8kh1\n", "m.txt");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ProblemOverrides flags;
  flags.batch = 8;
  StatusOr<std::vector<SuiteProblem>> ps = suite_problems(*s, flags, bench_defaults());
  ASSERT_TRUE(ps.ok()) << ps.status().to_string();
  ASSERT_EQ(ps->size(), 2u) << "a and b are equal once the batch is 8";
  EXPECT_EQ((*ps)[0].name, "a");
  EXPECT_EQ((*ps)[0].count, 5);
  EXPECT_EQ((*ps)[0].problem.n, 8);
  EXPECT_EQ((*ps)[0].problem.data_type, DataType::kBFloat16);
  EXPECT_EQ((*ps)[1].problem.data_type, DataType::kFloat) << "c's own dt: stays";
}

TEST(SuiteProblems, CountsOfEqualProblemsAddUpWithoutOverflow) {
  // Case 3 of issue 18: two huge counts of one problem wrapped to -2.
  StatusOr<Suite> s =
      parse_suite("a 1000000000 ic8ih8oc8kh3\nb 1000000000 ic8ih8oc8kh3\n", "m.txt");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->total_count(), 2000000000);
  StatusOr<std::vector<SuiteProblem>> ps = suite_problems(*s, {}, bench_defaults());
  ASSERT_TRUE(ps.ok());
  ASSERT_EQ(ps->size(), 1u);
  EXPECT_EQ((*ps)[0].count, 2000000000);
}

TEST(SuiteProblems, A200000LineSuiteParsesAndMergesInLinearTime) {
  // Case 3 of issue 18: 200000 lines took 353 s (every entry compared with every earlier one).
  // At that rate this test would run past CTest's timeout; merged counts are checked too.
  std::string text;
  for (int i = 0; i < 200000; ++i) {
    text += "c" + std::to_string(i) + " 2 ic" + std::to_string(8 + i % 100000) + "ih8oc8kh1\n";
  }
  StatusOr<Suite> s = parse_suite(text, "big.txt");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->total_count(), 400000);
  StatusOr<std::vector<SuiteProblem>> ps = suite_problems(*s, {}, bench_defaults());
  ASSERT_TRUE(ps.ok());
  ASSERT_EQ(ps->size(), 100000u);
  for (const SuiteProblem& p : *ps) ASSERT_EQ(p.count, 4) << p.name;
}

TEST(SuiteParser, DevicesAndFifosAreRefusedWithoutReading) {
  EXPECT_EQ(load_suite_file("/dev/zero").status().code(), StatusCode::kInvalidArgument);
}

TEST(SuiteProblems, ResNet50WithTheBenchDefaultsIsBatch32Bf16ChannelsLast) {
  StatusOr<std::vector<SuiteProblem>> ps =
      suite_problems(load_builtin("resnet50"), {}, bench_defaults());
  ASSERT_TRUE(ps.ok()) << ps.status().to_string();
  ASSERT_EQ(ps->size(), 23u);
  for (const SuiteProblem& p : *ps) {
    EXPECT_EQ(p.problem.n, 32);
    EXPECT_EQ(p.problem.data_type, DataType::kBFloat16);
    EXPECT_EQ(p.problem.layout, Layout::kChannelsLast);
    EXPECT_EQ(p.problem.direction, Direction::kForward);
  }
}

TEST(SuiteProblems, AnOverrideThatBreaksAnEntryNamesIt) {
  StatusOr<Suite> s = parse_suite("fine 1 ic8ih8oc8kh3\n", "o.txt");
  ASSERT_TRUE(s.ok());
  Suite broken = *s;
  broken.entries[0].problem.groups = 3;  // as if the flags made it invalid
  StatusOr<std::vector<SuiteProblem>> ps = suite_problems(broken, {}, {});
  ASSERT_FALSE(ps.ok());
  EXPECT_NE(ps.status().message().find("o.txt:1: fine: "), std::string::npos)
      << ps.status().message();
}

}  // namespace
}  // namespace convplan::cli
