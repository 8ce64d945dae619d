// Host conversions between doubles and the data types (fp16 and bf16 round to nearest even,
// infinities and NaN kept), the relative error and the tolerances per type and engine notes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "convplan/problem.h"
#include "convplan/reference.h"

namespace convplan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

uint16_t to_bits(DataType t, double v) {
  uint16_t bits = 0;
  to_data_type(t, &v, &bits, 1);
  return bits;
}

double from_bits(DataType t, uint16_t bits) {
  double v = 0;
  from_data_type(t, &bits, &v, 1);
  return v;
}

TEST(HalfConversion, ExactValuesKeepTheirBits) {
  const std::pair<double, uint16_t> cases[] = {{0.0, 0x0000},
                                               {-0.0, 0x8000},
                                               {1.0, 0x3C00},
                                               {-2.0, 0xC000},
                                               {0.5, 0x3800},
                                               {65504.0, 0x7BFF},
                                               {std::ldexp(1, -14), 0x0400},
                                               {std::ldexp(1, -24), 0x0001},
                                               {std::ldexp(1023, -24), 0x03FF},
                                               {kInf, 0x7C00},
                                               {-kInf, 0xFC00}};
  for (const auto& [v, bits] : cases) {
    EXPECT_EQ(to_bits(DataType::kHalf, v), bits) << v;
    const double back = from_bits(DataType::kHalf, bits);
    EXPECT_EQ(back, v);
    EXPECT_EQ(std::signbit(back), std::signbit(v)) << v;
  }
}

TEST(HalfConversion, RoundsToNearestEven) {
  EXPECT_EQ(to_bits(DataType::kHalf, 1 + std::ldexp(1, -11)), 0x3C00);  // tie: to even (down)
  EXPECT_EQ(to_bits(DataType::kHalf, 1 + std::ldexp(3, -11)), 0x3C02);  // tie: to even (up)
  EXPECT_EQ(to_bits(DataType::kHalf, 1 + std::ldexp(1, -11) + std::ldexp(1, -20)), 0x3C01);
  EXPECT_EQ(to_bits(DataType::kHalf, 1 + std::ldexp(1, -11) - std::ldexp(1, -20)), 0x3C00);
  EXPECT_EQ(to_bits(DataType::kHalf, std::ldexp(1, -25)), 0x0000);  // half the smallest subnormal
  EXPECT_EQ(to_bits(DataType::kHalf, std::ldexp(3, -25)), 0x0002);  // 1.5 subnormal steps: to even
  EXPECT_EQ(to_bits(DataType::kHalf, std::ldexp(3, -26)), 0x0001);  // 0.75 steps: up to one
  EXPECT_EQ(to_bits(DataType::kHalf, -std::ldexp(1023.5, -24)),
            0x8400);                                      // carries into the exponent
  EXPECT_EQ(to_bits(DataType::kHalf, 65519.99), 0x7BFF);  // below the midpoint to infinity
  EXPECT_EQ(to_bits(DataType::kHalf, 65520.0), 0x7C00);   // the midpoint rounds to even: infinity
  EXPECT_EQ(to_bits(DataType::kHalf, 1e6), 0x7C00);
  EXPECT_EQ(to_bits(DataType::kHalf, -1e300), 0xFC00);
}

// A double just above a half midpoint must round up, even though rounding it to float first
// would land exactly on the midpoint (and then round to even, down): one rounding, not two.
TEST(HalfConversion, RoundsTheDoubleOnceNotThroughFloat) {
  EXPECT_EQ(to_bits(DataType::kHalf, 1 + std::ldexp(1, -11) + std::ldexp(1, -40)), 0x3C01);
  EXPECT_EQ(to_bits(DataType::kHalf, std::ldexp(1, -25) + std::ldexp(1, -60)), 0x0001);
}

TEST(HalfConversion, KeepsNaN) {
  const uint16_t bits = to_bits(DataType::kHalf, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(bits & 0x7C00, 0x7C00);
  EXPECT_NE(bits & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(from_bits(DataType::kHalf, 0x7E00)));
  EXPECT_TRUE(std::isnan(from_bits(DataType::kHalf, 0xFC01)));
}

TEST(HalfConversion, EveryHalfRoundTripsThroughDouble) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const double v = from_bits(DataType::kHalf, static_cast<uint16_t>(b));
    if (std::isnan(v)) {
      EXPECT_TRUE((b & 0x7C00) == 0x7C00 && (b & 0x3FF) != 0) << b;
      EXPECT_TRUE(std::isnan(from_bits(DataType::kHalf, to_bits(DataType::kHalf, v))));
      continue;
    }
    ASSERT_EQ(to_bits(DataType::kHalf, v), b) << std::hex << b << " read as " << v;
  }
}

TEST(BFloat16Conversion, ExactValuesKeepTheirBits) {
  const std::pair<double, uint16_t> cases[] = {{0.0, 0x0000},
                                               {-0.0, 0x8000},
                                               {1.0, 0x3F80},
                                               {-2.0, 0xC000},
                                               {0.5, 0x3F00},
                                               {kInf, 0x7F80},
                                               {-kInf, 0xFF80},
                                               {std::ldexp(1, -133), 0x0001},
                                               {std::ldexp(255, 120), 0x7F7F}};
  for (const auto& [v, bits] : cases) {
    EXPECT_EQ(to_bits(DataType::kBFloat16, v), bits) << v;
    EXPECT_EQ(from_bits(DataType::kBFloat16, bits), v);
  }
}

TEST(BFloat16Conversion, RoundsToNearestEven) {
  EXPECT_EQ(to_bits(DataType::kBFloat16, 1 + std::ldexp(1, -8)), 0x3F80);  // tie: down to even
  EXPECT_EQ(to_bits(DataType::kBFloat16, 1 + std::ldexp(3, -8)), 0x3F82);  // tie: up to even
  EXPECT_EQ(to_bits(DataType::kBFloat16, 1 + std::ldexp(1, -8) + std::ldexp(1, -20)), 0x3F81);
  EXPECT_EQ(to_bits(DataType::kBFloat16, 1e39), 0x7F80);  // beyond float: infinity
  EXPECT_EQ(to_bits(DataType::kBFloat16, -1e300), 0xFF80);
}

TEST(BFloat16Conversion, RoundsTheDoubleOnceNotThroughFloat) {
  EXPECT_EQ(to_bits(DataType::kBFloat16, 1 + std::ldexp(1, -8) + std::ldexp(1, -40)), 0x3F81);
}

TEST(BFloat16Conversion, KeepsNaN) {
  const uint16_t bits = to_bits(DataType::kBFloat16, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(bits & 0x7F80, 0x7F80);
  EXPECT_NE(bits & 0x007F, 0);
  // A NaN whose payload lives only in the low float bits must not become infinity.
  const double low_payload_nan = static_cast<double>(std::bit_cast<float>(0x7F800001u));
  const uint16_t b2 = to_bits(DataType::kBFloat16, low_payload_nan);
  EXPECT_TRUE(std::isnan(from_bits(DataType::kBFloat16, b2)));
}

TEST(BFloat16Conversion, EveryBFloat16RoundTripsThroughDouble) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const double v = from_bits(DataType::kBFloat16, static_cast<uint16_t>(b));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(from_bits(DataType::kBFloat16, to_bits(DataType::kBFloat16, v))));
      continue;
    }
    ASSERT_EQ(to_bits(DataType::kBFloat16, v), b) << std::hex << b << " read as " << v;
  }
}

TEST(FloatConversions, Fp32RoundsAndFp64IsExact) {
  const std::vector<double> values = {0.1, -1.0 / 3, 1e-40, 1e300, 123456789.0};
  std::vector<float> f(values.size());
  to_data_type(DataType::kFloat, values.data(), f.data(), static_cast<int64_t>(values.size()));
  std::vector<double> back(values.size());
  from_data_type(DataType::kFloat, f.data(), back.data(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f[i], static_cast<float>(values[i]));
    EXPECT_EQ(back[i], static_cast<double>(static_cast<float>(values[i])));
  }
  std::vector<double> d(values.size());
  to_data_type(DataType::kDouble, values.data(), d.data(), static_cast<int64_t>(values.size()));
  EXPECT_EQ(d, values);
}

TEST(RelativeError, IsTheL2NormOfTheDifferenceOverTheReference) {
  EXPECT_DOUBLE_EQ(relative_l2_error({3, 4}, {0, 4}), 3.0 / 4.0);
  EXPECT_EQ(relative_l2_error({0, 0}, {0, 0}), 0.0);
  EXPECT_EQ(relative_l2_error({1, 0}, {0, 0}), kInf);
  EXPECT_EQ(relative_l2_error({std::nan(""), 1}, {1, 1}), kInf);
  EXPECT_EQ(relative_l2_error({1, 2}, {1, 2, 3}), kInf);
}

TEST(RelativeErrorTolerance, DependsOnTheTypesAndTheEngineNotes) {
  auto tolerance = [](DataType t, NoteSet notes) {
    return relative_error_tolerance(ConvProblem::with_data_type(ConvProblem{}, t), notes);
  };
  EXPECT_EQ(tolerance(DataType::kDouble, 0), 1e-12);
  EXPECT_EQ(tolerance(DataType::kDouble, kNoteTensorCore), 1e-12);
  EXPECT_EQ(tolerance(DataType::kFloat, 0), 1e-5);
  EXPECT_EQ(tolerance(DataType::kFloat, kNoteNonDeterministic | kNoteFft), 1e-5);
  EXPECT_EQ(tolerance(DataType::kFloat, kNoteTensorCore), 5e-3);
  EXPECT_EQ(tolerance(DataType::kFloat, kNoteDownConvertInputs), 5e-3);
  EXPECT_EQ(tolerance(DataType::kHalf, 0), 1e-2);
  EXPECT_EQ(tolerance(DataType::kBFloat16, kNoteTensorCore), 1e-2);
}

}  // namespace
}  // namespace convplan
