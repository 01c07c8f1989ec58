#include "gpu/reference/packing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/format/format.h"

namespace leapcache::reference {
namespace {

constexpr uint8_t kGuardByte = 0xA5;
constexpr int8_t kGuardCode = 0x5A;
constexpr size_t kGuard = 16;

// Packs `codes` into a buffer followed by guard bytes and checks nothing past n * bits / 8 bytes
// was written.
std::vector<uint8_t> Pack(const std::vector<int8_t>& codes, int bits) {
  const size_t bytes = codes.size() * bits / 8;
  std::vector<uint8_t> out(bytes + kGuard, kGuardByte);
  PackCodes(codes.data(), codes.size(), bits, out.data());
  for (size_t i = bytes; i < out.size(); ++i) {
    EXPECT_EQ(out[i], kGuardByte) << "PackCodes wrote past its output at byte " << i;
  }
  out.resize(bytes);
  return out;
}

std::vector<int8_t> Unpack(const std::vector<uint8_t>& packed, size_t n, int bits) {
  std::vector<uint8_t> in = packed;
  in.resize(packed.size() + kGuard, 0xFF);  // garbage after the stream must not be read into codes
  std::vector<int8_t> codes(n + kGuard, kGuardCode);
  UnpackCodes(in.data(), n, bits, codes.data());
  for (size_t i = n; i < codes.size(); ++i) {
    EXPECT_EQ(codes[i], kGuardCode) << "UnpackCodes wrote past its output at code " << i;
  }
  codes.resize(n);
  return codes;
}

// The documented stream order, bit by bit: code i occupies stream bits [i*b, (i+1)*b), stream
// bit t is bit (t % 8) of byte t / 8.
std::vector<int8_t> UnpackByDefinition(const std::vector<uint8_t>& packed, size_t n, int bits) {
  std::vector<int8_t> codes(n);
  for (size_t i = 0; i < n; ++i) {
    int v = 0;
    for (int b = 0; b < bits; ++b) {
      const size_t t = i * bits + b;
      v |= ((packed[t / 8] >> (t % 8)) & 1) << b;
    }
    if (v >= (1 << (bits - 1))) v -= 1 << bits;  // two's complement in b bits
    codes[i] = static_cast<int8_t>(v);
  }
  return codes;
}

class PackingTest : public ::testing::TestWithParam<int> {};

TEST_P(PackingTest, EveryCodeValueRoundTripsInEveryPosition) {
  const int bits = GetParam();
  const int q = MaxCode(bits);
  // Ascending sweep of all 2q+1 codes, repeated with every phase shift relative to the byte
  // boundaries (a 6-bit code lands on 4 different bit offsets).
  for (int shift = 0; shift < 8; ++shift) {
    std::vector<int8_t> codes;
    for (int rep = 0; rep < 3; ++rep) {
      for (int c = -q; c <= q; ++c) codes.push_back(static_cast<int8_t>(c));
    }
    for (int s = 0; s < shift; ++s) codes.insert(codes.begin(), static_cast<int8_t>(s % 2 ? -q : q));
    while (codes.size() % 16 != 0) codes.push_back(static_cast<int8_t>(-q));
    const std::vector<uint8_t> packed = Pack(codes, bits);
    ASSERT_EQ(packed.size(), codes.size() * bits / 8);
    EXPECT_EQ(Unpack(packed, codes.size(), bits), codes) << "bits " << bits << " shift " << shift;
    EXPECT_EQ(UnpackByDefinition(packed, codes.size(), bits), codes);
  }
}

TEST_P(PackingTest, RandomRowsMatchTheDocumentedBitStream) {
  const int bits = GetParam();
  const int q = MaxCode(bits);
  constexpr uint32_t kSeed = 1234;
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int> code(-q, q);
  for (size_t n : {16u, 32u, 48u, 128u, 256u}) {
    std::vector<int8_t> codes(n);
    for (int8_t& c : codes) c = static_cast<int8_t>(code(rng));
    const std::vector<uint8_t> packed = Pack(codes, bits);
    EXPECT_EQ(UnpackByDefinition(packed, n, bits), codes) << "n " << n;
    EXPECT_EQ(Unpack(packed, n, bits), codes) << "n " << n;
  }
}

TEST_P(PackingTest, UnpackSignExtendsEveryBitPattern) {
  // Any byte stream unpacks to the two's complement reading of its b-bit fields, including the
  // pattern -2^(b-1) that the encoder never writes.
  const int bits = GetParam();
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> packed(64 * bits / 8);
  for (uint8_t& b : packed) b = static_cast<uint8_t>(byte(rng));
  const std::vector<int8_t> codes = Unpack(packed, 64, bits);
  EXPECT_EQ(codes, UnpackByDefinition(packed, 64, bits));
  for (int8_t c : codes) {
    EXPECT_GE(c, -(1 << (bits - 1)));
    EXPECT_LE(c, (1 << (bits - 1)) - 1);
  }
  // Re-packing reproduces the stream bit for bit.
  EXPECT_EQ(Pack(codes, bits), packed);
}

INSTANTIATE_TEST_SUITE_P(Bits, PackingTest, ::testing::Values(8, 6, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "Bits" + std::to_string(info.param);
                         });

TEST(Packing, FourBitOrderLowNibbleFirst) {
  EXPECT_EQ(Pack({1, -2}, 4), (std::vector<uint8_t>{0xE1}));
  EXPECT_EQ(Pack({7, -7, 0, -1}, 4), (std::vector<uint8_t>{0x97, 0xF0}));
  EXPECT_EQ(Unpack({0xE1}, 2, 4), (std::vector<int8_t>{1, -2}));
  EXPECT_EQ(Unpack({0x0F}, 2, 4), (std::vector<int8_t>{-1, 0}));
}

TEST(Packing, SixBitFourCodesInThreeLittleEndianBytes) {
  // c0 | c1 << 6 | c2 << 12 | c3 << 18 = 0x103081.
  EXPECT_EQ(Pack({1, 2, 3, 4}, 6), (std::vector<uint8_t>{0x81, 0x30, 0x10}));
  // Negative codes in 6-bit two's complement: -1 = 0x3f, -31 = 0x21, 31 = 0x1f -> 0x01F87F.
  EXPECT_EQ(Pack({-1, -31, 31, 0}, 6), (std::vector<uint8_t>{0x7F, 0xF8, 0x01}));
  EXPECT_EQ(Unpack({0x7F, 0xF8, 0x01}, 4, 6), (std::vector<int8_t>{-1, -31, 31, 0}));
}

TEST(Packing, EightBitIsPlainInt8) {
  EXPECT_EQ(Pack({-127, 127, -1, 0}, 8), (std::vector<uint8_t>{0x81, 0x7F, 0xFF, 0x00}));
  EXPECT_EQ(Unpack({0x80, 0x01}, 2, 8), (std::vector<int8_t>{-128, 1}));
}

}  // namespace
}  // namespace leapcache::reference
