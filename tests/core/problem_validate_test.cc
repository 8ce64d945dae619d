// ConvProblem::validate(): good problems of every kind pass; each impossible one is refused with
// kInvalidArgument and a message that names the field and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "convplan/problem.h"

namespace convplan {
namespace {

ConvProblem problem_2d() {
  ConvProblem p;
  p.n = 2;
  p.c = 64;
  p.k = 32;
  p.input = {56, 56, 1};
  p.filter = {3, 3, 1};
  p.pad_before = {1, 1, 0};
  p.pad_after = {1, 1, 0};
  return p;
}

ConvProblem problem_1d() {
  ConvProblem p;
  p.spatial_dims = 1;
  p.c = 8;
  p.k = 8;
  p.input = {100, 1, 1};
  p.filter = {5, 1, 1};
  p.dilation = {2, 1, 1};
  return p;
}

ConvProblem problem_3d() {
  ConvProblem p;
  p.spatial_dims = 3;
  p.n = 1;
  p.c = 4;
  p.k = 6;
  p.groups = 2;
  p.input = {8, 9, 10};
  p.filter = {3, 2, 1};
  p.stride = {2, 1, 3};
  p.pad_before = {1, 0, 0};
  p.pad_after = {0, 1, 2};
  return p;
}

// Expects kInvalidArgument whose message contains every one of `parts`.
void expect_invalid(const ConvProblem& p, const std::vector<std::string>& parts) {
  const Status s = p.validate();
  ASSERT_FALSE(s.ok()) << "accepted " << p.to_string();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  for (const std::string& part : parts) {
    EXPECT_NE(s.message().find(part), std::string::npos)
        << "message '" << s.message() << "' lacks '" << part << "'";
  }
}

ConvProblem changed(ConvProblem p, const std::function<void(ConvProblem&)>& change) {
  change(p);
  return p;
}

TEST(ConvProblemValidate, AcceptsGoodProblemsOfEveryKind) {
  for (const ConvProblem& base : {problem_1d(), problem_2d(), problem_3d(), ConvProblem{}}) {
    for (Direction dir :
         {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
      for (DataType t :
           {DataType::kFloat, DataType::kHalf, DataType::kBFloat16, DataType::kDouble}) {
        for (Layout l : {Layout::kChannelsFirst, Layout::kChannelsLast}) {
          ConvProblem p = ConvProblem::with_data_type(base, t);
          p.direction = dir;
          p.layout = l;
          EXPECT_TRUE(p.validate().ok()) << p.to_string() << ": " << p.validate().to_string();
        }
      }
    }
  }
}

TEST(ConvProblemValidate, AcceptsHalfTypesComputingInTheirOwnType) {
  EXPECT_TRUE(ConvProblem::with_data_type(problem_2d(), DataType::kHalf).validate().ok());
  ConvProblem p = problem_2d();
  p.data_type = p.compute_type = DataType::kHalf;
  EXPECT_TRUE(p.validate().ok());
  p.data_type = p.compute_type = DataType::kBFloat16;
  EXPECT_TRUE(p.validate().ok());
}

TEST(ConvProblemValidate, AcceptsDepthwiseAndOddScaling) {
  ConvProblem p = problem_2d();
  p.groups = p.c = p.k = 64;
  p.alpha = 0.0;
  p.beta = 2.5;
  EXPECT_TRUE(p.validate().ok()) << p.validate().to_string();
  p.alpha = -3;
  p.beta = -0.0;
  EXPECT_TRUE(p.validate().ok());
}

TEST(ConvProblemValidate, AcceptsAnOutputOfOneWhenTheFilterJustFits) {
  ConvProblem p;
  p.input = {2, 5, 1};
  p.filter = {2, 5, 1};
  EXPECT_TRUE(p.validate().ok());
  EXPECT_EQ(p.output()[0], 1);
  EXPECT_EQ(p.output()[1], 1);
}

TEST(ConvProblemValidate, RejectsSpatialDimsOutsideOneToThree) {
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.spatial_dims = 0; }),
                 {"spatial_dims=0"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.spatial_dims = 4; }),
                 {"spatial_dims=4"});
}

TEST(ConvProblemValidate, RejectsNonPositiveSizesNamingTheField) {
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.n = 0; }), {"n=0", ">= 1"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.c = -1; }), {"c=-1"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.k = 0; }), {"k=0"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.groups = 0; }), {"groups=0"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.input[1] = 0; }), {"input[1]=0"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.filter[0] = -2; }), {"filter[0]=-2"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.stride[1] = 0; }), {"stride[1]=0"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.dilation[1] = 0; }),
                 {"dilation[1]=0 must be >= 1"});
  expect_invalid(changed(problem_3d(), [](ConvProblem& p) { p.stride[2] = 0; }), {"stride[2]=0"});
}

TEST(ConvProblemValidate, RejectsNegativePadding) {
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.pad_before[0] = -1; }),
                 {"pad_before[0]=-1", ">= 0"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.pad_after[1] = -3; }),
                 {"pad_after[1]=-3"});
}

TEST(ConvProblemValidate, RejectsGroupsThatDoNotDivideTheChannels) {
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.groups = 3; }),
                 {"groups=3 does not divide c=64"});
  expect_invalid(changed(problem_2d(),
                         [](ConvProblem& p) {
                           p.groups = 4;
                           p.k = 30;
                         }),
                 {"groups=4 does not divide k=30"});
}

TEST(ConvProblemValidate, RejectsAnEmptyOutputExplainingTheSizes) {
  ConvProblem p;
  p.input = {2, 5, 1};
  p.filter = {2, 5, 1};
  p.dilation = {2, 1, 1};
  expect_invalid(p, {"output[0]=0 is empty: input[0]=2 + pads 0+0 < dilation*(filter-1)+1=3"});
  p.dilation = {1, 1, 1};
  p.filter = {1, 6, 1};
  p.pad_after = {0, 0, 0};
  expect_invalid(p, {"output[1]=0 is empty"});
}

TEST(ConvProblemValidate, RejectsEntriesPastSpatialDimsThatAreNotDefaults) {
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.input[2] = 5; }),
                 {"input[2]=5", "spatial_dims=2", "default 1"});
  expect_invalid(changed(problem_1d(), [](ConvProblem& p) { p.filter[1] = 3; }), {"filter[1]=3"});
  expect_invalid(changed(problem_1d(), [](ConvProblem& p) { p.pad_before[2] = 1; }),
                 {"pad_before[2]=1", "default 0"});
  expect_invalid(changed(problem_1d(), [](ConvProblem& p) { p.pad_after[1] = 1; }),
                 {"pad_after[1]=1"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.stride[2] = 2; }), {"stride[2]=2"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.dilation[2] = 0; }),
                 {"dilation[2]=0"});
}

TEST(ConvProblemValidate, RejectsComputeTypesThatDoNotGoWithTheData) {
  auto with = [](DataType data, DataType compute) {
    ConvProblem p = problem_2d();
    p.data_type = data;
    p.compute_type = compute;
    return p;
  };
  expect_invalid(with(DataType::kDouble, DataType::kFloat), {"compute_type=f32", "data_type=f64"});
  expect_invalid(with(DataType::kFloat, DataType::kDouble), {"compute_type=f64", "data_type=f32"});
  expect_invalid(with(DataType::kFloat, DataType::kHalf), {"compute_type=f16", "data_type=f32"});
  expect_invalid(with(DataType::kHalf, DataType::kBFloat16),
                 {"compute_type=bf16", "data_type=f16"});
  expect_invalid(with(DataType::kBFloat16, DataType::kHalf),
                 {"compute_type=f16", "data_type=bf16"});
  expect_invalid(with(DataType::kHalf, DataType::kDouble), {"compute_type=f64"});
}

TEST(ConvProblemValidate, RejectsNonFiniteAlphaOrBeta) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_invalid(changed(problem_2d(), [&](ConvProblem& p) { p.alpha = nan; }), {"alpha=nan"});
  expect_invalid(changed(problem_2d(), [&](ConvProblem& p) { p.alpha = -inf; }), {"alpha=-inf"});
  expect_invalid(changed(problem_2d(), [&](ConvProblem& p) { p.beta = inf; }), {"beta=inf"});
}

TEST(ConvProblemValidate, RejectsEnumValuesOutOfRange) {
  expect_invalid(
      changed(problem_2d(), [](ConvProblem& p) { p.direction = static_cast<Direction>(7); }),
      {"direction=7"});
  expect_invalid(
      changed(problem_2d(), [](ConvProblem& p) { p.data_type = static_cast<DataType>(9); }),
      {"data_type=9"});
  expect_invalid(changed(problem_2d(), [](ConvProblem& p) { p.layout = static_cast<Layout>(5); }),
                 {"layout=5"});
}

// A 2-D problem in an explicit layout: NHWC with padding between rows of x.
ConvProblem explicit_problem() {
  ConvProblem p = problem_2d();
  p.c = 4;
  p.k = 8;
  p.input = {5, 6, 1};
  p.layout = Layout::kExplicit;
  // x (2, 4, 5, 6): NHWC with each row padded to 7 pixels.
  p.x_strides = {5 * 7 * 4, 1, 7 * 4, 4, 0};
  // w (8, 4, 3, 3): KCRS packed.
  p.w_strides = {36, 9, 3, 1, 0};
  // y (2, 8, 5, 6): NCHW packed.
  p.y_strides = {240, 30, 6, 1, 0};
  return p;
}

TEST(ConvProblemValidate, AcceptsExplicitStridesThatDoNotOverlap) {
  const ConvProblem p = explicit_problem();
  EXPECT_TRUE(p.validate().ok()) << p.validate().to_string();
  EXPECT_EQ(p.x_shape().span_elements(), 1 + 1 * 140 + 3 * 1 + 4 * 28 + 5 * 4);
}

TEST(ConvProblemValidate, AcceptsAnyStrideOnDimensionsOfSizeOne) {
  ConvProblem p = explicit_problem();
  p.n = 1;
  p.x_strides[0] = 1;  // n has size 1: its stride never matters
  EXPECT_TRUE(p.validate().ok()) << p.validate().to_string();
}

TEST(ConvProblemValidate, RejectsExplicitStridesThatAreNotPositive) {
  expect_invalid(changed(explicit_problem(), [](ConvProblem& p) { p.w_strides[2] = 0; }),
                 {"w_strides[2]=0", ">= 1"});
  expect_invalid(changed(explicit_problem(), [](ConvProblem& p) { p.y_strides[0] = -240; }),
                 {"y_strides[0]=-240"});
}

TEST(ConvProblemValidate, RejectsExplicitStridesThatMakeElementsOverlap) {
  // w's C stride 9 with S stride 2: element (c, r, s=2) lands on (c, r+1, s=0)... overlap.
  expect_invalid(changed(explicit_problem(),
                         [](ConvProblem& p) {
                           p.w_strides = {36, 9, 3, 2, 0};
                         }),
                 {"w_strides", "overlap"});
  // Two dimensions with the same stride.
  expect_invalid(changed(explicit_problem(),
                         [](ConvProblem& p) {
                           p.y_strides = {240, 30, 6, 6, 0};
                         }),
                 {"y_strides", "overlap"});
  // The batch stride too small for one image.
  expect_invalid(changed(explicit_problem(), [](ConvProblem& p) { p.x_strides[0] = 100; }),
                 {"x_strides", "overlap"});
}

TEST(ConvProblemValidate, RejectsExplicitStridesPastTheTensorRank) {
  expect_invalid(changed(explicit_problem(), [](ConvProblem& p) { p.x_strides[4] = 1; }),
                 {"x_strides[4]=1", "rank 4"});
}

TEST(ConvProblemValidate, RejectsStridesWithoutTheExplicitLayout) {
  for (Layout l : {Layout::kChannelsFirst, Layout::kChannelsLast}) {
    ConvProblem p = explicit_problem();
    p.layout = l;
    expect_invalid(p, {"x_strides[0]=140", std::string("layout=") + to_string(l)});
    p.x_strides = {};
    p.w_strides = {};
    expect_invalid(p, {"y_strides[0]=240"});
    p.y_strides = {};
    EXPECT_TRUE(p.validate().ok());
  }
}

TEST(ConvProblemValidate, RejectsTensorsOverCudnnsElementLimit) {
  ConvProblem p = problem_2d();
  p.n = 1024;
  p.c = 64;
  p.k = 8;
  p.input = {256, 256, 1};  // x: 1024*64*256*256 = 2^32 elements
  expect_invalid(p, {"x has 4294967296 elements", "cuDNN's limit of 2^31-1"});
  p.n = 1;
  p.k = 1 << 20;
  p.c = 1 << 12;
  p.input = {8, 8, 1};  // w: 2^32 * 9 elements
  expect_invalid(p, {"w has", "2^31-1"});
  p.k = 1 << 15;
  p.c = 1;
  p.input = {300, 300, 1};  // y: 2^15 * 300 * 300 elements
  expect_invalid(p, {"y has", "2^31-1"});
}

TEST(ConvProblemValidate, AcceptsATensorJustUnderTheElementLimit) {
  ConvProblem p;
  p.spatial_dims = 1;
  p.input = {(int64_t{1} << 31) - 1, 1, 1};
  EXPECT_TRUE(p.validate().ok()) << p.validate().to_string();
  p.input[0] += 1;
  expect_invalid(p, {"x has 2147483648 elements"});
}

TEST(ConvProblemValidate, RejectsSizesWhoseProductOverflowsInt64) {
  ConvProblem p = problem_3d();
  const int64_t big = int64_t{1} << 40;
  p.n = big;
  p.c = big;
  p.groups = 1;
  expect_invalid(p, {"x has", "overflows int64", "2^31-1"});
}

TEST(ConvProblemValidate, HugeValuesDoNotOverflowOnTheWayToAVerdict) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  ConvProblem p;
  p.pad_before = {max, max, 0};
  p.pad_after = {max, max, 0};
  expect_invalid(p, {"y has"});
  ConvProblem q;
  q.filter = {max, 1, 1};
  q.dilation = {max, 1, 1};
  expect_invalid(q, {"output[0]=0 is empty"});
  ConvProblem r;
  r.stride = {max, max, 1};
  EXPECT_TRUE(r.validate().ok());
}

TEST(ConvProblemValidate, RejectsExplicitStridesWhoseSpanExceedsTheLimit) {
  ConvProblem p = explicit_problem();
  p.x_strides[0] = int64_t{1} << 31;
  expect_invalid(p, {"x_strides span", "2^31-1"});
}

}  // namespace
}  // namespace convplan
