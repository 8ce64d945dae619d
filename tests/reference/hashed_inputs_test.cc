// The tuner's hashed input data: Backend::fill_hashed writes exactly hashed_input_value in every
// data type (the bits are built from integers, the same code the device kernel runs), and the
// sampled reference over seeds agrees exactly with the sampled reference over filled buffers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "convplan/reference.h"
#include "support/scripted_backend.h"

namespace convplan {
namespace {

const DataType kTypes[] = {DataType::kFloat, DataType::kHalf, DataType::kBFloat16,
                           DataType::kDouble};

// What fill_hashed must write: the value converted by the reference's own conversion.
std::vector<uint8_t> expected_bytes(DataType t, uint64_t seed, int64_t n) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = hashed_input_value(seed, i);
  std::vector<uint8_t> bytes(static_cast<size_t>(n * size_of(t)));
  to_data_type(t, values.data(), bytes.data(), n);
  return bytes;
}

TEST(HashedInputsTest, ValuesAreMultiplesOfOneOver128InMinusOneToOne) {
  int zeros = 0, ones = 0;
  for (int64_t i = 0; i < 100000; ++i) {
    const double v = hashed_input_value(42, i);
    ASSERT_GE(v, -1.0);
    ASSERT_LE(v, 1.0);
    ASSERT_EQ(v * 128, static_cast<double>(static_cast<int>(v * 128))) << v;
    zeros += v == 0.0;
    ones += v == 1.0;
  }
  EXPECT_GT(zeros, 200);  // about 1 in 257: every level is reached
  EXPECT_GT(ones, 200);
  EXPECT_NE(hashed_input_value(1, 7), hashed_input_value(2, 7));  // the seed matters
}

TEST(HashedInputsTest, DefaultFillWritesTheHashedValuesBitForBitInEveryType) {
  testing::ScriptedBackend backend(testing::basic_engines());
  const cudnnHandle_t h = testing::scripted_handle(0);
  // More than one part of the default's threads (parts of 256 Ki elements).
  const int64_t n = (int64_t{1} << 19) + 77;
  for (DataType t : kTypes) {
    std::vector<uint8_t> got(static_cast<size_t>(n * size_of(t)), 0xAB);
    ASSERT_TRUE(backend.fill_hashed(h, got.data(), t, n, 1234567).ok());
    EXPECT_TRUE(got == expected_bytes(t, 1234567, n)) << to_string(t);
  }
}

ConvProblem problem(Direction d, DataType t) {
  ConvProblem p;
  p.direction = d;
  p.n = 3;
  p.c = 4;
  p.k = 6;
  p.groups = 2;
  p.input = {7, 6, 1};
  p.filter = {3, 2, 1};
  p.stride = {2, 1, 1};
  p.pad_before = {1, 0, 0};
  p.pad_after = {1, 1, 0};
  p.layout = Layout::kChannelsLast;
  p.alpha = 0.5;
  p.beta = 2.0;  // the output's old values are read from its seed too
  return ConvProblem::with_data_type(p, t);
}

TEST(HashedInputsTest, SampledReferenceOverSeedsEqualsItOverFilledBuffers) {
  const HashedInputs seeds{11, 22, 33};
  for (Direction d : {Direction::kForward, Direction::kBackwardData, Direction::kBackwardFilter}) {
    for (DataType t : kTypes) {
      const ConvProblem p = problem(d, t);
      ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
      const std::vector<uint8_t> x = expected_bytes(t, seeds.x, p.x_shape().span_elements());
      const std::vector<uint8_t> w = expected_bytes(t, seeds.w, p.w_shape().span_elements());
      const std::vector<uint8_t> y = expected_bytes(t, seeds.y, p.y_shape().span_elements());
      const TensorShape os = p.shape_of(p.output_tensor());
      std::vector<int64_t> offsets;
      for (int64_t o = 0; o < os.span_elements(); o += 3) offsets.push_back(o);
      std::vector<double> from_buffers, from_seeds;
      ASSERT_TRUE(
          reference_convolution_at(p, x.data(), w.data(), y.data(), offsets, from_buffers).ok());
      ASSERT_TRUE(reference_convolution_at_hashed(p, seeds, offsets, from_seeds).ok());
      EXPECT_EQ(from_seeds, from_buffers) << p.to_string();
      double norm = 0;
      for (double v : from_seeds) norm += v * v;
      EXPECT_GT(norm, 0) << p.to_string();  // not a vacuous comparison of zeros
    }
  }
}

}  // namespace
}  // namespace convplan
