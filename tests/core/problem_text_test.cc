// The text form of ConvProblem (benchdnn's descriptor letters with a flags prefix), the enum
// names and the stable hash.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "convplan/problem.h"

namespace convplan {
namespace {

ConvProblem parse_ok(const std::string& text) {
  StatusOr<ConvProblem> p = parse_problem(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status().to_string();
  return p.ok() ? *p : ConvProblem{};
}

// ---------------------------------------------------------------------------------------------
// Enum names.

TEST(EnumText, CanonicalNamesParseBack) {
  for (Direction d : {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
    StatusOr<Direction> r = parse_direction(to_string(d));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, d);
  }
  for (DataType t : {DataType::kFloat, DataType::kHalf, DataType::kBFloat16, DataType::kDouble}) {
    StatusOr<DataType> r = parse_data_type(to_string(t));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, t);
  }
  for (Layout l : {Layout::kChannelsFirst, Layout::kChannelsLast, Layout::kExplicit}) {
    StatusOr<Layout> r = parse_layout(to_string(l));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, l);
  }
}

TEST(EnumText, AliasesParse) {
  const std::pair<const char*, DataType> types[] = {
      {"fp32", DataType::kFloat},    {"float", DataType::kFloat},       {"fp16", DataType::kHalf},
      {"half", DataType::kHalf},     {"bfloat16", DataType::kBFloat16}, {"fp64", DataType::kDouble},
      {"double", DataType::kDouble}, {"F32", DataType::kFloat}};
  for (const auto& [name, t] : types) {
    StatusOr<DataType> r = parse_data_type(name);
    ASSERT_TRUE(r.ok()) << name;
    EXPECT_EQ(*r, t) << name;
  }
  const std::pair<const char*, Layout> layouts[] = {{"channels_first", Layout::kChannelsFirst},
                                                    {"ncdhw", Layout::kChannelsFirst},
                                                    {"channels_last", Layout::kChannelsLast},
                                                    {"ndhwc", Layout::kChannelsLast},
                                                    {"NHWC", Layout::kChannelsLast}};
  for (const auto& [name, l] : layouts) {
    StatusOr<Layout> r = parse_layout(name);
    ASSERT_TRUE(r.ok()) << name;
    EXPECT_EQ(*r, l) << name;
  }
  const std::pair<const char*, Direction> dirs[] = {{"bwd_weight", Direction::kBackwardFilter},
                                                    {"bwd_w", Direction::kBackwardFilter},
                                                    {"bwd_d", Direction::kBackwardData},
                                                    {"BWD_D", Direction::kBackwardData},
                                                    {"FWD_I", Direction::kForward}};
  for (const auto& [name, d] : dirs) {
    StatusOr<Direction> r = parse_direction(name);
    ASSERT_TRUE(r.ok()) << name;
    EXPECT_EQ(*r, d) << name;
  }
}

TEST(EnumText, ErrorsListWhatIsAccepted) {
  StatusOr<DataType> t = parse_data_type("f8");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("'f8' is not a data type (f32, f16, bf16, f64"),
            std::string::npos)
      << t.status().message();
  StatusOr<Direction> d = parse_direction("up");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("fwd, bwd_data, bwd_filter"), std::string::npos);
  StatusOr<Layout> l = parse_layout("nchw16c");
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("nchw, nhwc, explicit"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The canonical form.

TEST(ProblemText, Prints2dProblemsWithHAndWLetters) {
  ConvProblem p;
  p.n = 32;
  p.c = 64;
  p.k = 64;
  p.input = {56, 56, 1};
  p.filter = {3, 3, 1};
  p.pad_before = {1, 1, 0};
  p.pad_after = {1, 1, 0};
  EXPECT_EQ(p.to_string(), "g1mb32ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1");
}

TEST(ProblemText, Prints1dProblemsWithWLettersOnly) {
  ConvProblem p;
  p.spatial_dims = 1;
  p.c = 8;
  p.k = 8;
  p.input = {100, 1, 1};
  p.filter = {5, 1, 1};
  p.dilation = {2, 1, 1};
  EXPECT_EQ(p.to_string(), "g1mb1ic8iw100oc8ow92kw5sw1pw0dw1");
}

TEST(ProblemText, Prints3dProblemsWithAsymmetricPaddingAsRLetters) {
  ConvProblem p;
  p.spatial_dims = 3;
  p.c = 4;
  p.k = 6;
  p.groups = 2;
  p.input = {8, 9, 10};
  p.filter = {3, 2, 1};
  p.stride = {2, 1, 3};
  p.pad_before = {1, 0, 0};
  p.pad_after = {0, 1, 2};
  EXPECT_EQ(p.to_string(), "g2mb1ic4id8ih9iw10oc6od4oh9ow4kd3kh2kw1sd2sh1sw3pd1ph0pw0rd0rh1rw2");
}

TEST(ProblemText, PrintsOnlyFlagsThatDifferFromTheirDefaults) {
  ConvProblem p;
  p.direction = Direction::kBackwardData;
  p.data_type = DataType::kHalf;
  p.compute_type = DataType::kHalf;
  p.layout = Layout::kChannelsLast;
  p.allow_tensor_cores = false;
  p.alpha = 0.5;
  p.beta = 1;
  EXPECT_EQ(p.to_string(),
            "dir:bwd_data,dt:f16,ct:f16,layout:nhwc,tc:0,alpha:0.5,beta:1/"
            "g1mb1ic1ih1iw1oc1oh1ow1kh1kw1sh1sw1ph0pw0");
  p.compute_type = DataType::kFloat;  // the default for f16
  EXPECT_EQ(p.to_string().substr(0, 40), "dir:bwd_data,dt:f16,layout:nhwc,tc:0,alp");
}

TEST(ProblemText, PrintsAlphaAndBetaAsShortestExactDecimals) {
  ConvProblem p;
  p.alpha = 0.1;
  p.beta = -2.5e-300;
  EXPECT_EQ(p.to_string().substr(0, 25), "alpha:0.1,beta:-2.5e-300/");
  p.alpha = -0.0;  // equal to 0, so printed as 0
  p.beta = 0.0;
  EXPECT_EQ(p.to_string().substr(0, 8), "alpha:0/");
}

TEST(ProblemText, PrintsExplicitStridesInLogicalOrder) {
  ConvProblem p;
  p.spatial_dims = 1;
  p.c = 2;
  p.k = 3;
  p.input = {4, 1, 1};
  p.layout = Layout::kExplicit;
  p.x_strides = {8, 1, 2, 0, 0};
  p.w_strides = {2, 1, 1, 0, 0};
  p.y_strides = {12, 4, 1, 0, 0};
  ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
  EXPECT_EQ(p.to_string(),
            "layout:explicit,xs:8x1x2,ws:2x1x1,ys:12x4x1/g1mb1ic2iw4oc3ow4kw1sw1pw0");
  EXPECT_EQ(parse_ok(p.to_string()), p);
}

// ---------------------------------------------------------------------------------------------
// Hand-written strings and benchdnn's rules.

TEST(ProblemText, ParsesBenchdnnDefaults) {
  const ConvProblem p = parse_ok("ic3ih5oc4kh3");
  EXPECT_EQ(p.groups, 1);
  EXPECT_EQ(p.n, 2);  // benchdnn's default minibatch
  EXPECT_EQ(p.spatial_dims, 2);
  EXPECT_EQ(p.input, (SpatialDims{5, 5, 1}));  // iw copied from ih: a square problem
  EXPECT_EQ(p.filter, (SpatialDims{3, 3, 1}));
  EXPECT_EQ(p.stride, (SpatialDims{1, 1, 1}));
  EXPECT_EQ(p.dilation, (SpatialDims{1, 1, 1}));
  EXPECT_EQ(p.pad_before, (SpatialDims{0, 0, 0}));
  EXPECT_EQ(p.pad_after, (SpatialDims{0, 0, 0}));
  EXPECT_EQ(p.output(), (SpatialDims{3, 3, 1}));
  EXPECT_EQ(p.direction, Direction::kForward);
  EXPECT_EQ(p.data_type, DataType::kFloat);
  EXPECT_EQ(p.compute_type, DataType::kFloat);
  EXPECT_EQ(p.layout, Layout::kChannelsFirst);
  EXPECT_TRUE(p.allow_tensor_cores);
}

TEST(ProblemText, ParsesABenchdnnLineWithUnderscoresAndAName) {
  const ConvProblem p =
      parse_ok("mb4ic3ih227iw227_oc96oh55ow55_kh11kw11_sh4sw4ph0pw0_n\"alexnet:conv1/a\"");
  EXPECT_EQ(p.n, 4);
  EXPECT_EQ(p.c, 3);
  EXPECT_EQ(p.k, 96);
  EXPECT_EQ(p.input, (SpatialDims{227, 227, 1}));
  EXPECT_EQ(p.filter, (SpatialDims{11, 11, 1}));
  EXPECT_EQ(p.stride, (SpatialDims{4, 4, 1}));
  EXPECT_EQ(p.output(), (SpatialDims{55, 55, 1}));
}

TEST(ProblemText, CopiesHToWAndDToHAndW) {
  const ConvProblem square = parse_ok("mb1ic8ih14oc8kh3sh2ph1dh1");
  EXPECT_EQ(square.spatial_dims, 2);
  EXPECT_EQ(square.input, (SpatialDims{14, 14, 1}));
  EXPECT_EQ(square.stride, (SpatialDims{2, 2, 1}));
  EXPECT_EQ(square.pad_before, (SpatialDims{1, 1, 0}));
  EXPECT_EQ(square.dilation, (SpatialDims{2, 2, 1}));
  const ConvProblem cube = parse_ok("ic2id4oc2kd3");
  EXPECT_EQ(cube.spatial_dims, 3);
  EXPECT_EQ(cube.input, (SpatialDims{4, 4, 4}));
  EXPECT_EQ(cube.filter, (SpatialDims{3, 3, 3}));
  const ConvProblem line = parse_ok("ic2iw9oc2kw3");
  EXPECT_EQ(line.spatial_dims, 1);
  EXPECT_EQ(line.input, (SpatialDims{9, 1, 1}));
}

TEST(ProblemText, DilationFollowsBenchdnnsConvention) {
  EXPECT_EQ(parse_ok("ic1iw10oc1kw3dw0").dilation[0], 1);
  EXPECT_EQ(parse_ok("ic1iw10oc1kw3dw1").dilation[0], 2);
  EXPECT_EQ(parse_ok("ic1iw10oc1kw3dw1").output()[0], 6);
}

TEST(ProblemText, DeducesPaddingFromAGivenOutput) {
  // Stride 1, "same" output: symmetric padding.
  ConvProblem p = parse_ok("ic16ih56oc16oh56kh3");
  EXPECT_EQ(p.pad_before, (SpatialDims{1, 1, 0}));
  EXPECT_EQ(p.pad_after, (SpatialDims{1, 1, 0}));
  // Stride 2 to half the size: benchdnn's pad before (total/2 = 0), the rest after.
  p = parse_ok("ic16ih56oc16oh28kh3sh2");
  EXPECT_EQ(p.pad_before, (SpatialDims{0, 0, 0}));
  EXPECT_EQ(p.pad_after, (SpatialDims{1, 1, 0}));
  EXPECT_EQ(p.output(), (SpatialDims{28, 28, 1}));
}

TEST(ProblemText, PaddingIsSymmetricUnlessTheOutputNeedsMore) {
  ConvProblem p = parse_ok("ic4ih56oc4oh28kh3sh2ph1");
  EXPECT_EQ(p.pad_after, (SpatialDims{1, 1, 0}));
  // ph1 alone gives 5; oh6 needs 2 rows after (benchdnn's right padding).
  p = parse_ok("ic4ih5oc4oh6kh3ph1");
  EXPECT_EQ(p.pad_before, (SpatialDims{1, 1, 0}));
  EXPECT_EQ(p.pad_after, (SpatialDims{2, 2, 0}));
  // r letters pad after explicitly.
  p = parse_ok("ic4ih5iw6oc4kh3kw3ph1pw0rh0rw2");
  EXPECT_EQ(p.pad_before, (SpatialDims{1, 0, 0}));
  EXPECT_EQ(p.pad_after, (SpatialDims{0, 2, 0}));
}

TEST(ProblemText, ParsesFlagsWithAliases) {
  const ConvProblem p =
      parse_ok("dir:bwd_w,dt:half,layout:channels_last,tc:0,alpha:2,beta:-0.25/ic8ih5oc8kh1");
  EXPECT_EQ(p.direction, Direction::kBackwardFilter);
  EXPECT_EQ(p.data_type, DataType::kHalf);
  EXPECT_EQ(p.compute_type, DataType::kFloat);
  EXPECT_EQ(p.layout, Layout::kChannelsLast);
  EXPECT_FALSE(p.allow_tensor_cores);
  EXPECT_EQ(p.alpha, 2.0);
  EXPECT_EQ(p.beta, -0.25);
  EXPECT_EQ(parse_ok("dt:f64/ic1iw1oc1kw1").compute_type, DataType::kDouble);
  EXPECT_EQ(parse_ok("dt:bf16,ct:bf16/ic1iw1oc1kw1").compute_type, DataType::kBFloat16);
  EXPECT_EQ(parse_ok("/ic1iw1oc1kw1"), parse_ok("ic1iw1oc1kw1"));
  EXPECT_EQ(parse_ok("  ic1iw1oc1kw1 \n"), parse_ok("ic1iw1oc1kw1"));
}

TEST(ProblemText, StridesImplyTheExplicitLayout) {
  const ConvProblem p = parse_ok("xs:8x1x2,ws:2x1x1,ys:12x4x1/mb1ic2iw4oc3kw1");
  EXPECT_EQ(p.layout, Layout::kExplicit);
  EXPECT_EQ(p.x_strides, (TensorStrides{8, 1, 2, 0, 0}));
  EXPECT_EQ(p.y_strides, (TensorStrides{12, 4, 1, 0, 0}));
}

TEST(ProblemText, PrintingAParsedStringGivesTheCanonicalForm) {
  const std::pair<const char*, const char*> cases[] = {
      {"ic3ih5oc4kh3", "g1mb2ic3ih5iw5oc4oh3ow3kh3kw3sh1sw1ph0pw0"},
      {"mb1_ic8_iw100_oc8_kw5_dw1", "g1mb1ic8iw100oc8ow92kw5sw1pw0dw1"},
      {"dt:fp16,ct:float,dir:fwd/ic16ih56oc16oh28kh3sh2",
       "dt:f16/g1mb2ic16ih56iw56oc16oh28ow28kh3kw3sh2sw2ph0pw0rh1rw1"},
      {"beta:1.0,alpha:1/ic2id4oc2kd3",
       "beta:1/g1mb2ic2id4ih4iw4oc2od2oh2ow2kd3kh3kw3sd1sh1sw1pd0ph0pw0"},
  };
  for (const auto& [text, canonical] : cases) {
    const ConvProblem p = parse_ok(text);
    EXPECT_EQ(p.to_string(), canonical) << text;
    EXPECT_EQ(parse_ok(p.to_string()), p) << text;
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips on random valid problems.

class RandomProblems {
 public:
  explicit RandomProblems(uint64_t seed) : rng_(seed) {}

  ConvProblem next() {
    ConvProblem p;
    p.direction = static_cast<Direction>(pick(0, 2));
    p.spatial_dims = static_cast<int>(pick(1, 3));
    p.groups = pick(1, 4);
    p.c = p.groups * pick(1, 5);
    p.k = p.groups * pick(1, 5);
    p.n = pick(1, 5);
    for (int d = 0; d < p.spatial_dims; ++d) {
      p.filter[d] = pick(1, 5);
      p.dilation[d] = pick(1, 3);
      p.stride[d] = pick(1, 4);
      p.pad_before[d] = pick(0, 3);
      p.pad_after[d] = coin() ? p.pad_before[d] : pick(0, 3);
      const int64_t extent = p.dilation[d] * (p.filter[d] - 1) + 1;
      p.input[d] = std::max<int64_t>(1, extent - p.pad_before[d] - p.pad_after[d]) + pick(0, 20);
    }
    const DataType t = static_cast<DataType>(pick(0, 3));
    p = ConvProblem::with_data_type(p, t);
    if ((t == DataType::kHalf || t == DataType::kBFloat16) && coin()) p.compute_type = t;
    p.allow_tensor_cores = coin();
    p.alpha = scale();
    p.beta = coin() ? 0.0 : scale();
    p.layout = static_cast<Layout>(pick(0, 2));
    if (p.layout == Layout::kExplicit) {
      p.x_strides = random_strides(p.x_shape());
      p.w_strides = random_strides(p.w_shape());
      p.y_strides = random_strides(p.y_shape());
    }
    return p;
  }

 private:
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool coin() { return pick(0, 1) == 1; }

  double scale() {
    switch (pick(0, 4)) {
      case 0: return 1.0;
      case 1: return static_cast<double>(pick(-4, 4)) / 4;
      case 2: return std::uniform_real_distribution<double>(-10, 10)(rng_);
      case 3: {  // any finite double, subnormals and extremes included
        double v;
        do {
          v = std::bit_cast<double>(rng_());
        } while (!std::isfinite(v));
        return v;
      }
      default: return -0.0;
    }
  }

  // Strides of a random dimension order with random gaps.
  TensorStrides random_strides(const TensorShape& shape) {
    const std::vector<int64_t> dims(shape.dims.begin(), shape.dims.begin() + shape.rank);
    std::vector<int> order(dims.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    TensorStrides s{};
    int64_t acc = 1;
    for (int d : order) {
      s[d] = acc;
      acc = acc * dims[d] + pick(0, 2);
    }
    return s;
  }

  std::mt19937_64 rng_;
};

TEST(ProblemText, RandomValidProblemsRoundTrip) {
  RandomProblems gen(20240607);
  int checked = 0;
  for (int i = 0; i < 20000; ++i) {
    const ConvProblem p = gen.next();
    ASSERT_TRUE(p.validate().ok()) << p.to_string() << ": " << p.validate().to_string();
    const std::string text = p.to_string();
    StatusOr<ConvProblem> back = parse_problem(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status().to_string();
    ASSERT_EQ(*back, p) << text << " parsed as " << back->to_string();
    ASSERT_EQ(back->to_string(), text);
    ASSERT_EQ(back->hash(), p.hash()) << text;
    ++checked;
  }
  EXPECT_EQ(checked, 20000);
}

// The same problem written the way people write benchdnn lines: letters in any order, '_'
// between them, defaults left out, outputs given or not, squares given once, flags in any order
// with aliases and defaults spelled out.
std::string loose_text(const ConvProblem& p, std::mt19937_64& rng) {
  auto coin = [&] { return rng() % 2 == 0; };
  auto pick = [&](std::initializer_list<const char*> names) {
    return std::string(names.begin()[rng() % names.size()]);
  };
  std::vector<std::string> flags;
  switch (p.direction) {
    case Direction::kForward:
      if (coin()) flags.push_back("dir:" + pick({"fwd", "forward", "FWD_D"}));
      break;
    case Direction::kBackwardData:
      flags.push_back("dir:" + pick({"bwd_data", "bwd_d", "BWD_D"}));
      break;
    case Direction::kBackwardFilter:
      flags.push_back("dir:" + pick({"bwd_filter", "bwd_w", "bwd_weight"}));
      break;
  }
  switch (p.data_type) {
    case DataType::kFloat:
      if (coin()) flags.push_back("dt:" + pick({"f32", "fp32", "float"}));
      break;
    case DataType::kHalf: flags.push_back("dt:" + pick({"f16", "fp16", "half"})); break;
    case DataType::kBFloat16: flags.push_back("dt:" + pick({"bf16", "bfloat16"})); break;
    case DataType::kDouble: flags.push_back("dt:" + pick({"f64", "fp64", "double"})); break;
  }
  if (p.compute_type != default_compute_type(p.data_type) || coin()) {
    flags.push_back(std::string("ct:") + to_string(p.compute_type));
  }
  if (p.layout == Layout::kChannelsLast)
    flags.push_back("layout:" + pick({"nhwc", "channels_last"}));
  if (p.layout == Layout::kChannelsFirst && coin())
    flags.push_back("layout:" + pick({"nchw", "channels_first"}));
  if (p.layout == Layout::kExplicit && coin()) flags.push_back("layout:explicit");
  if (!p.allow_tensor_cores || coin()) flags.push_back(p.allow_tensor_cores ? "tc:1" : "tc:0");
  auto exact = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return std::string(buf);
  };
  if (p.alpha != 1.0 || coin()) flags.push_back("alpha:" + exact(p.alpha));
  if (p.beta != 0.0 || coin()) flags.push_back("beta:" + exact(p.beta));
  if (p.layout == Layout::kExplicit) {
    const TensorStrides* strides[] = {&p.x_strides, &p.w_strides, &p.y_strides};
    const char* keys[] = {"xs:", "ws:", "ys:"};
    for (int t = 0; t < 3; ++t) {
      std::string v = keys[t];
      for (int d = 0; d < p.spatial_dims + 2; ++d) {
        if (d) v += 'x';  // not ("x" : "") + std::string: GCC 12 -Wrestrict at -O3 (core/quoted.h)
        v += std::to_string((*strides[t])[d]);
      }
      flags.push_back(v);
    }
  }
  std::shuffle(flags.begin(), flags.end(), rng);

  std::vector<std::string> entries;
  if (p.groups != 1 || coin()) entries.push_back("g" + std::to_string(p.groups));
  if (p.n != 2 || coin()) entries.push_back("mb" + std::to_string(p.n));
  entries.push_back("ic" + std::to_string(p.c));
  entries.push_back("oc" + std::to_string(p.k));
  const SpatialDims out = p.output();
  const int dims = p.spatial_dims;
  // A 2-D problem whose w values all equal its h values may leave the w letters out.
  const bool square = dims == 2 && p.input[0] == p.input[1] && p.filter[0] == p.filter[1] &&
                      p.stride[0] == p.stride[1] && p.dilation[0] == p.dilation[1] &&
                      p.pad_before[0] == p.pad_before[1] && p.pad_after[0] == p.pad_after[1];
  const int written = square && coin() ? 1 : dims;
  for (int d = 0; d < written; ++d) {
    const std::string l(1, "dhw"[kMaxSpatialDims - dims + d]);
    entries.push_back("i" + l + std::to_string(p.input[d]));
    entries.push_back("k" + l + std::to_string(p.filter[d]));
    if (coin()) entries.push_back("o" + l + std::to_string(out[d]));
    if (p.stride[d] != 1 || coin()) entries.push_back("s" + l + std::to_string(p.stride[d]));
    entries.push_back("p" + l + std::to_string(p.pad_before[d]));
    if (p.pad_after[d] != p.pad_before[d] || coin())
      entries.push_back("r" + l + std::to_string(p.pad_after[d]));
    if (p.dilation[d] != 1 || coin())
      entries.push_back("d" + l + std::to_string(p.dilation[d] - 1));
  }
  std::shuffle(entries.begin(), entries.end(), rng);
  std::string text;
  for (size_t i = 0; i < flags.size(); ++i) text += (i ? "," : "") + flags[i];
  if (!text.empty() || coin()) text += "/";
  for (const std::string& e : entries) text += e + (coin() ? "_" : "");
  if (coin()) text += "_n\"some:name/with,odd=chars\"";
  return text;
}

TEST(ProblemText, RandomProblemsParseFromLooseBenchdnnStyleText) {
  RandomProblems gen(99);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000; ++i) {
    const ConvProblem p = gen.next();
    const std::string text = loose_text(p, rng);
    StatusOr<ConvProblem> back = parse_problem(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status().to_string();
    ASSERT_EQ(*back, p) << text << " parsed as " << back->to_string() << ", not " << p.to_string();
  }
}

// Mutated texts never crash the parser: each either parses into a valid problem that prints and
// parses back to itself, or is refused with kInvalidArgument and a message.
TEST(ProblemText, MutatedTextsParseOrFailCleanly) {
  RandomProblems gen(123);
  std::mt19937_64 rng(17);
  const std::string alphabet = "0123456789abcdghiklmnoprswx_:/,.-";
  int parsed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = gen.next().to_string();
    for (int m = 0, count = 1 + static_cast<int>(rng() % 3); m < count && !text.empty(); ++m) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text.erase(at, 1); break;
        case 1: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: text[at] = alphabet[rng() % alphabet.size()]; break;
      }
    }
    StatusOr<ConvProblem> p = parse_problem(text);
    if (p.ok()) {
      ++parsed;
      ASSERT_TRUE(p->validate().ok()) << text;
      StatusOr<ConvProblem> again = parse_problem(p->to_string());
      ASSERT_TRUE(again.ok()) << text << " -> " << p->to_string();
      ASSERT_EQ(*again, *p) << text;
    } else {
      ++refused;
      ASSERT_EQ(p.status().code(), StatusCode::kInvalidArgument) << text;
      ASSERT_FALSE(p.status().message().empty()) << text;
    }
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(refused, 100);
}

// ---------------------------------------------------------------------------------------------
// Malformed strings.

struct BadText {
  const char* text;
  std::vector<std::string> parts;  // each must appear in the message
};

TEST(ProblemText, MalformedStringsPointAtTheOffendingPart) {
  const BadText cases[] = {
      {"g1mb2ic3ih5oc3kh0", {"at 14 ('kh0'): kh must be >= 1"}},
      {"ic3ih5oc3kh3q5", {"unknown letter 'q' at 12"}},
      {"ic3ih5oc3kh3ix5", {"unknown letter 'ix' at 12"}},
      {"dt:f8/ic3ih5oc3kh3", {"at 0", "dt:f8 is not a data type (f32, f16, bf16, f64)"}},
      {"dir:fwd,ct:f7/ic3ih5oc3kh3", {"at 8", "ct:f7 is not a data type"}},
      {"ic3ih5ih6oc3kh3", {"at 6 ('ih6'): ih is given twice (first at 3)"}},
      {"ic3ih5oc3", {"kh is missing", "'ih5' at 3"}},
      {"ic3iw5kw3oc3kh3", {"ih is missing", "'kh3' at 12"}},
      {"ih5oc3kh3", {"ic is missing"}},
      {"ic3ih5kh3", {"oc is missing"}},
      {"ic3oc3", {"no spatial dimension"}},
      {"ic3ih5oc3oh2kh3ph0", {"at 9 ('oh2'): oh=2 does not match the output 3"}},
      {"ic3ih5oc3kh", {"at 9 ('kh'): kh needs a number"}},
      {"ic3ih5oc3kh99999999999999999999", {"at 9", "kh=99999999999999999999 is out of range"}},
      {"ic3ih-5oc3kh3", {"at 3 ('ih-5'): ih must be >= 1"}},
      {"ic3ih5oc3kh3ph-1", {"at 12 ('ph-1'): ph must be >= 0"}},
      {"ic3ih5oc3kh3 oc4", {"unexpected character ' ' at 12"}},
      {"id4ih4ic3oc3kd3kh3", {"needs both h and w", "'ih4' at 3"}},
      {"foo:1/ic3ih5oc3kh3", {"at 0 ('foo:1')", "unknown flag 'foo'"}},
      {"dir:sideways/ic3ih5oc3kh3", {"at 0 ('dir:sideways')", "'sideways' is not a direction"}},
      {"dir:fwd,dir:fwd/ic3ih5oc3kh3", {"at 8 ('dir:fwd'): dir is given twice (first at 0)"}},
      {"dir:bwd_data", {"'/'"}},
      {"dir:fwd,,dt:f32/ic3ih5oc3kh3", {"empty flag at 8"}},
      {"dir/ic3ih5oc3kh3", {"unknown letter 'dir'"}},
      {"alpha:abc/ic3ih5oc3kh3", {"at 0 ('alpha:abc'): alpha:abc is not a number"}},
      {"beta:1.5x/ic3ih5oc3kh3", {"beta:1.5x is not a number"}},
      {"tc:2/ic3ih5oc3kh3", {"at 0 ('tc:2'): tc takes 0 or 1"}},
      {"layout:nchw16c/ic3ih5oc3kh3", {"at 0", "'nchw16c' is not a layout"}},
      {"xs:1x2/ic3ih5oc3kh3",
       {"at 0 ('xs:1x2'): xs has 2 entries; the descriptor's tensors have 4"}},
      {"xs:1xax3x4/ic3ih5oc3kh3", {"xs entry 'a' is not an integer"}},
      {"layout:explicit/ic3ih5oc3kh3", {"layout:explicit needs xs, ws and ys; xs is missing"}},
      {"layout:nhwc,xs:75x1x15x3/ic3ih5oc3kh3",
       {"at 12", "xs needs layout:explicit (layout is nhwc)"}},
      {"g3ic64ih5oc64kh3", {"is not a valid problem: groups=3 does not divide c=64"}},
      {"alpha:nan/ic3ih5oc3kh3", {"alpha=nan must be finite"}},
      {"dt:f64,ct:f32/ic3ih5oc3kh3", {"compute_type=f32 does not go with data_type=f64"}},
      {"xs:1x1x1x1,ws:27x9x3x1,ys:27x9x3x1/mb1ic3ih5oc3kh3", {"x_strides", "overlap"}},
      {"", {"empty"}},
  };
  for (const BadText& bad : cases) {
    StatusOr<ConvProblem> p = parse_problem(bad.text);
    ASSERT_FALSE(p.ok()) << "accepted '" << bad.text << "' as " << p->to_string();
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    for (const std::string& part : bad.parts) {
      EXPECT_NE(p.status().message().find(part), std::string::npos)
          << "'" << bad.text << "': message '" << p.status().message() << "' lacks '" << part
          << "'";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hash.

TEST(ProblemHash, IsFnv1aOfTheCanonicalFieldsWithKnownValues) {
  // Computed independently (Python) over the documented word sequence.
  EXPECT_EQ(ConvProblem{}.hash(), 0xa0cfeb6908e2c277ull);
  ConvProblem p;
  p.direction = Direction::kBackwardFilter;
  p.spatial_dims = 1;
  p.n = 2;
  p.c = 8;
  p.k = 4;
  p.groups = 2;
  p.input = {100, 1, 1};
  p.filter = {5, 1, 1};
  p.pad_before = {1, 0, 0};
  p.pad_after = {2, 0, 0};
  p.stride = {3, 1, 1};
  p.dilation = {2, 1, 1};
  p.data_type = DataType::kHalf;
  p.compute_type = DataType::kFloat;
  p.allow_tensor_cores = false;
  p.layout = Layout::kChannelsLast;
  p.alpha = 0.5;
  p.beta = -1.25;
  ASSERT_TRUE(p.validate().ok());
  EXPECT_EQ(p.hash(), 0xbec5d973fe3e755dull);
}

TEST(ProblemHash, EqualProblemsHashAlikeAndEveryFieldCounts) {
  const ConvProblem base = parse_ok("dir:bwd_data/mb4ic8ih10iw12oc16kh3kw3sh2sw1ph1pw1dh1dw0");
  EXPECT_EQ(base.hash(), parse_ok(base.to_string()).hash());
  ConvProblem zero = base;
  zero.beta = -0.0;
  EXPECT_EQ(zero.hash(), base.hash());  // -0 == 0
  std::vector<ConvProblem> variants;
  auto vary = [&](auto change) {
    ConvProblem v = base;
    change(v);
    variants.push_back(v);
  };
  vary([](ConvProblem& v) { v.direction = Direction::kForward; });
  vary([](ConvProblem& v) { v.n = 5; });
  vary([](ConvProblem& v) { v.c = 16; });
  vary([](ConvProblem& v) { v.k = 8; });
  vary([](ConvProblem& v) { v.groups = 2; });
  vary([](ConvProblem& v) { v.input[1] = 13; });
  vary([](ConvProblem& v) { v.filter[0] = 2; });
  vary([](ConvProblem& v) { v.pad_before[1] = 0; });
  vary([](ConvProblem& v) { v.pad_after[0] = 2; });
  vary([](ConvProblem& v) { v.stride[1] = 2; });
  vary([](ConvProblem& v) { v.dilation[1] = 2; });
  vary([](ConvProblem& v) { v.data_type = DataType::kHalf; });
  vary([](ConvProblem& v) { v.compute_type = DataType::kHalf; });
  vary([](ConvProblem& v) { v.allow_tensor_cores = false; });
  vary([](ConvProblem& v) { v.layout = Layout::kChannelsLast; });
  vary([](ConvProblem& v) { v.alpha = 2; });
  vary([](ConvProblem& v) { v.beta = 1; });
  for (const ConvProblem& v : variants) {
    EXPECT_NE(v.hash(), base.hash()) << v.to_string();
  }
}

}  // namespace
}  // namespace convplan
