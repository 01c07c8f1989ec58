#include "gpu/format/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>

namespace leapcache {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Slow references: round |f| to the target format's grid in double arithmetic (a / ulp is exact
// because ulp is a power of two and f has 24 significant bits; nearbyint rounds ties to even in
// the default rounding mode), then apply overflow. Returns the rounded value, signed.
double ReferenceRound(float f, int mantissa_bits, int min_exponent, double overflow_at) {
  if (std::isnan(f)) return std::numeric_limits<double>::quiet_NaN();
  const double a = std::fabs(static_cast<double>(f));
  double r = kInf;
  if (!std::isinf(a)) {
    int e = 0;
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the binade's exponent is e - 1
    const double ulp = std::ldexp(1.0, std::max(e - 1, min_exponent) - mantissa_bits);
    r = std::nearbyint(a / ulp) * ulp;
    if (r >= overflow_at) r = kInf;
  }
  return std::signbit(f) ? -r : r;
}

// binary16: 10 mantissa bits, normals from 2^-14, largest finite 65504, 2^16 overflows.
double ReferenceHalf(float f) { return ReferenceRound(f, 10, -14, 65536.0); }
// bfloat16: 7 mantissa bits, normals from 2^-126, 2^128 overflows.
double ReferenceBf16(float f) { return ReferenceRound(f, 7, -126, std::ldexp(1.0, 128)); }

// The value a half bit pattern denotes, from the IEEE definition.
double HalfValue(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 31) {
    v = mant == 0 ? kInf : std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);
  } else {
    v = std::ldexp(1.0 + mant / 1024.0, exp - 15);
  }
  return sign ? -v : v;
}

bool IsHalfNaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsBf16NaN(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// Checks that the conversion's result denotes exactly the reference value (with the sign of
// zero); NaN must stay NaN.
::testing::AssertionResult MatchesReference(float f, double got, double want) {
  if (std::isnan(want)) {
    if (std::isnan(got)) return ::testing::AssertionSuccess();
  } else if (got == want && std::signbit(got) == std::signbit(want)) {
    return ::testing::AssertionSuccess();
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "input %a (bits 0x%08x): got %a, want %a", f, FloatBits(f), got,
                want);
  return ::testing::AssertionFailure() << buf;
}

struct Case {
  float in;
  uint16_t want;
};

TEST(FloatToHalf, KnownValuesTiesSubnormalsAndOverflow) {
  const float sub = std::ldexp(1.0f, -24);  // smallest half subnormal
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.5f, 0x3800},
      {65504.0f, 0x7bff},  // largest finite half stays
      {65519.0f, 0x7bff},
      {std::nextafter(65520.0f, 0.0f), 0x7bff},
      {65520.0f, 0x7c00},  // the tie above 65504 rounds to even: infinity
      {-65520.0f, 0xfc00},
      {1e10f, 0x7c00},
      {std::numeric_limits<float>::max(), 0x7c00},
      {std::numeric_limits<float>::infinity(), 0x7c00},
      {-std::numeric_limits<float>::infinity(), 0xfc00},
      // Normal-range ties: 1 + 2^-11 is halfway between 0x3c00 and 0x3c01.
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01},
      {-(1.0f + 3 * std::ldexp(1.0f, -11)), 0xbc02},
      {2049.0f, 0x6800},  // tie between 2048 and 2050: even mantissa 2048
      {2051.0f, 0x6802},  // tie between 2050 and 2052: 2052
      // Subnormals: multiples of 2^-24, ties to even.
      {std::ldexp(1.0f, -14), 0x0400},  // smallest normal
      {sub, 0x0001},
      {-sub, 0x8001},
      {1023 * sub, 0x03ff},  // largest subnormal
      {1023.5f * sub, 0x0400},  // tie: rounds up into the smallest normal (even)
      {1022.5f * sub, 0x03fe},
      {0.5f * sub, 0x0000},  // 2^-25: tie between 0 and 2^-24 goes to 0
      {-0.5f * sub, 0x8000},
      {std::nextafter(0.5f * sub, 1.0f), 0x0001},
      {1.5f * sub, 0x0002},
      {2.5f * sub, 0x0002},
      {3.5f * sub, 0x0004},
      {std::ldexp(1.0f, -26), 0x0000},
      {1e-40f, 0x0000},  // fp32 subnormal
      {-1e-40f, 0x8000},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FloatToHalf(c.in), c.want) << "input " << c.in << " (" << std::hexfloat << c.in << ")";
  }
}

TEST(FloatToHalf, NaNStaysNaNWithSign) {
  // 0x7f800001 has only low mantissa bits set: truncating them would give infinity.
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7f802000u, 0x7fffffffu, 0xffc00000u, 0xff800001u}) {
    const uint16_t h = FloatToHalf(BitsFloat(bits));
    EXPECT_TRUE(IsHalfNaN(h)) << std::hex << bits << " -> " << h;
    EXPECT_EQ(h >> 15, bits >> 31) << std::hex << bits;
    EXPECT_TRUE(std::isnan(HalfToFloat(h)));
  }
}

TEST(HalfToFloat, SpecialPatterns) {
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0xfe00)));
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x8000), 0.0f);
}

TEST(Half, AllBitPatternsRoundTripExactly) {
  int nan_patterns = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    const double want = HalfValue(h);
    ASSERT_TRUE(MatchesReference(f, f, want)) << "pattern 0x" << std::hex << i;
    if (IsHalfNaN(h)) {
      ++nan_patterns;
      const uint16_t back = FloatToHalf(f);
      ASSERT_TRUE(IsHalfNaN(back)) << std::hex << i;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << i;
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << "pattern 0x" << std::hex << i;
  }
  EXPECT_EQ(nan_patterns, 2 * 1023);
}

TEST(Half, PositiveFinitePatternsAreStrictlyIncreasing) {
  for (uint16_t h = 0; h < 0x7c00; ++h) {
    ASSERT_LT(HalfToFloat(h), HalfToFloat(static_cast<uint16_t>(h + 1))) << std::hex << h;
  }
}

// Random floats across every exponent (uniform bit patterns), floats concentrated in the half
// range (biased exponents 96..146, below 2^-25 to above 65520), and exact halfway points between
// adjacent halves: all against the double-arithmetic reference.
TEST(FloatToHalf, MatchesSlowReferenceOnRandomFloats) {
  constexpr uint32_t kSeed = 20240601;
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_int_distribution<uint32_t> exponent(96, 146);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7fffff);
  std::uniform_int_distribution<int> finite_half(0, 0x7bfe);
  for (int i = 0; i < 400000; ++i) {
    const float f = BitsFloat(any(rng));
    ASSERT_TRUE(MatchesReference(f, HalfToFloat(FloatToHalf(f)), ReferenceHalf(f)));
    const uint32_t sign = (any(rng) & 1u) << 31;
    const float g = BitsFloat(sign | (exponent(rng) << 23) | mantissa(rng));
    ASSERT_TRUE(MatchesReference(g, HalfToFloat(FloatToHalf(g)), ReferenceHalf(g)));
    // Midpoint of two adjacent finite halves: exact in fp32 (12 significant bits).
    const uint16_t lo = static_cast<uint16_t>(finite_half(rng));
    const double mid = 0.5 * (HalfValue(lo) + HalfValue(static_cast<uint16_t>(lo + 1)));
    const float m = static_cast<float>(sign ? -mid : mid);
    ASSERT_EQ(static_cast<double>(std::fabs(m)), mid);
    const uint16_t even = (lo & 1u) ? static_cast<uint16_t>(lo + 1) : lo;
    ASSERT_EQ(FloatToHalf(m), static_cast<uint16_t>((sign >> 16) | even)) << std::hexfloat << m;
  }
}

// A deterministic sweep of every 1021st fp32 bit pattern (4.2M patterns, all exponents).
TEST(FloatToHalf, MatchesSlowReferenceOnStridedSweep) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1021) {
    const float f = BitsFloat(static_cast<uint32_t>(u));
    ASSERT_TRUE(MatchesReference(f, HalfToFloat(FloatToHalf(f)), ReferenceHalf(f)));
  }
}

TEST(FloatToBf16, KnownValuesTiesSubnormalsAndOverflow) {
  const Case cases[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3f80},
      {-2.0f, 0xc000},
      {1.0f + std::ldexp(1.0f, -8), 0x3f80},      // tie: even
      {1.0f + 3 * std::ldexp(1.0f, -8), 0x3f82},  // tie: even
      {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), 0x3f81},
      {std::numeric_limits<float>::max(), 0x7f80},  // past the last bf16 midpoint: infinity
      {BitsFloat(0x7f7f7fffu), 0x7f7f},             // just below that midpoint: largest finite
      {BitsFloat(0x7f7f8000u), 0x7f80},             // the midpoint itself: ties to even (inf)
      {std::numeric_limits<float>::infinity(), 0x7f80},
      {-std::numeric_limits<float>::infinity(), 0xff80},
      {BitsFloat(0x00018000u), 0x0002},  // fp32 subnormal tie: 1.5 units -> 2
      {BitsFloat(0x00028000u), 0x0002},  // 2.5 units -> 2
      {BitsFloat(0x00008000u), 0x0000},  // 0.5 unit -> 0
      {BitsFloat(0x00008001u), 0x0001},
      {BitsFloat(0x007fffffu), 0x0080},  // largest fp32 subnormal rounds to the smallest normal
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FloatToBf16(c.in), c.want) << std::hexfloat << c.in;
  }
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u}) {
    const uint16_t b = FloatToBf16(BitsFloat(bits));
    EXPECT_TRUE(IsBf16NaN(b)) << std::hex << bits << " -> " << b;
    EXPECT_EQ(b >> 15, bits >> 31);
    EXPECT_TRUE(std::isnan(Bf16ToFloat(b)));
  }
}

TEST(Bf16, AllBitPatternsRoundTripExactly) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = Bf16ToFloat(b);
    ASSERT_EQ(FloatBits(f), i << 16);
    if (IsBf16NaN(b)) {
      ASSERT_TRUE(IsBf16NaN(FloatToBf16(f))) << std::hex << i;
      continue;
    }
    ASSERT_EQ(FloatToBf16(f), b) << "pattern 0x" << std::hex << i;
  }
}

TEST(FloatToBf16, MatchesSlowReferenceOnRandomFloats) {
  constexpr uint32_t kSeed = 77;
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 400000; ++i) {
    const float f = BitsFloat(any(rng));
    ASSERT_TRUE(MatchesReference(f, Bf16ToFloat(FloatToBf16(f)), ReferenceBf16(f)));
    // Exact ties: a bf16 value plus half its ulp (low 16 bits 0x8000).
    const float t = BitsFloat((any(rng) & 0xffff0000u) | 0x8000u);
    ASSERT_TRUE(MatchesReference(t, Bf16ToFloat(FloatToBf16(t)), ReferenceBf16(t)));
  }
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) {
    const float f = BitsFloat(static_cast<uint32_t>(u));
    ASSERT_TRUE(MatchesReference(f, Bf16ToFloat(FloatToBf16(f)), ReferenceBf16(f)));
  }
}

TEST(RoundTo16Bit, AgreesWithTheConversions) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (int i = 0; i < 1000; ++i) {
    const float f = normal(rng);
    EXPECT_EQ(FloatBits(RoundToHalf(f)), FloatBits(HalfToFloat(FloatToHalf(f))));
    EXPECT_EQ(FloatBits(RoundToBf16(f)), FloatBits(Bf16ToFloat(FloatToBf16(f))));
    EXPECT_LE(std::fabs(RoundToHalf(f) - f), std::fabs(f) * std::ldexp(1.0f, -11) + 1e-7f);
    EXPECT_LE(std::fabs(RoundToBf16(f) - f), std::fabs(f) * std::ldexp(1.0f, -8));
  }
}

}  // namespace
}  // namespace leapcache
