#include "base/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace coalesce {
namespace {

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(Half, RoundTripsEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if ((h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << std::hex << h;
    } else {
      EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
    }
  }
}

TEST(BFloat16, RoundTripsEveryValue) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    EXPECT_EQ(Bits(f), b << 16);
    if ((b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(f))));
    } else {
      EXPECT_EQ(FloatToBFloat16(f), b) << std::hex << b;
    }
  }
}

TEST(Half, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(FloatToHalf(inf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00);
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  // Subnormals: 2^-24 is the smallest, 2^-14 the smallest normal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.0f, -24)), 0x03ff);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -30)), 0x0000);  // underflow
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -30)), 0x8000);
}

TEST(Half, RoundsToNearestEven) {
  // Ties between 1 and 1 + 2^-10 go to the even mantissa.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
            0x3c01);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -20)),
            0x3c00);
  // The overflow threshold is the tie between 65504 and 2^16.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  // Ties in the subnormal range, and across into the normal range.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToHalf(std::ldexp(5.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToHalf(std::ldexp(2047.0f, -25)), 0x0400);
}

TEST(BFloat16, SpecialValuesAndRounding) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(inf), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-inf), 0xff80);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(
      FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A signalling-looking NaN whose payload sits in the dropped bits must not
  // become infinity.
  EXPECT_TRUE(
      std::isnan(BFloat16ToFloat(FloatToBFloat16(FromBits(0x7f800001)))));
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(
      FloatToBFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
      0x3f81);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7f7f0000)), 0x7f7f);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00010000)), 0x0001);  // subnormal
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00018000)), 0x0002);  // tie -> even
}

// FloatToHalf against the nearest entry of a table of every finite half,
// ties to the even bit pattern, found by search rather than bit tricks.
TEST(Half, MatchesBruteForceNearest) {
  // Every finite non-negative half, ascending, then 2^16 standing for
  // infinity (0x7c00): IEEE rounds to infinity what would round to 2^16.
  std::vector<double> table;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    table.push_back(HalfToFloat(static_cast<uint16_t>(h)));
  }
  table.push_back(65536);
  ASSERT_TRUE(std::is_sorted(table.begin(), table.end()));

  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_int_distribution<int> exponent(-27, 17);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  int failures = 0;
  for (int i = 0; i < 1000000 && failures < 10; ++i) {
    // Half from the half's own range (subnormals through overflow), half
    // any float bit pattern.
    float f = i % 2 == 0 ? std::ldexp(mantissa(rng), exponent(rng))
                         : FromBits(bits(rng));
    if (std::isnan(f)) continue;
    if (bits(rng) & 1) f = -f;
    const double a = std::fabs(static_cast<double>(f));
    uint32_t want;
    if (a >= table.back()) {
      want = 0x7c00;
    } else {
      const size_t hi = std::upper_bound(table.begin(), table.end(), a) -
                        table.begin();  // table[hi] > a >= table[hi - 1]
      const size_t lo = hi - 1;
      const double d_lo = a - table[lo];
      const double d_hi = table[hi] - a;
      want = static_cast<uint32_t>(d_lo < d_hi   ? lo
                                   : d_hi < d_lo ? hi
                                                 : (lo % 2 == 0 ? lo : hi));
    }
    if (std::signbit(f)) want |= 0x8000;
    if (FloatToHalf(f) != want) {
      ++failures;
      ADD_FAILURE() << "FloatToHalf(" << f << " = bits 0x" << std::hex
                    << Bits(f) << ") = 0x" << FloatToHalf(f) << ", want 0x"
                    << want;
    }
  }
}

TEST(DType, LoadAndStoreRoundToTheType) {
  unsigned char buf[8];
  StoreFromFloat(buf, DType::kFloat32, 1, 1.0f + std::ldexp(1.0f, -20));
  EXPECT_EQ(LoadAsFloat(buf, DType::kFloat32, 1), 1.0f + std::ldexp(1.0f, -20));
  StoreFromFloat(buf, DType::kFloat16, 2, 1.0f + std::ldexp(1.0f, -20));
  EXPECT_EQ(LoadAsFloat(buf, DType::kFloat16, 2), 1.0f);
  StoreFromFloat(buf, DType::kBFloat16, 3, -3.0f - std::ldexp(1.0f, -10));
  EXPECT_EQ(LoadAsFloat(buf, DType::kBFloat16, 3), -3.0f);
}

TEST(DType, NamesParseBack) {
  for (DType t : kAllDTypes) {
    DType parsed;
    ASSERT_TRUE(ParseDType(DTypeName(t), &parsed));
    EXPECT_EQ(parsed, t);
  }
  DType unused;
  EXPECT_FALSE(ParseDType("float64", &unused));
  EXPECT_EQ(ElementSize(DType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DType::kBFloat16), 2u);
  EXPECT_EQ(UnitRoundoff(DType::kFloat16), std::ldexp(1.0, -11));
}

}  // namespace
}  // namespace coalesce
