#include "gpu/reference/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/format/crc32c.h"
#include "gpu/format/half.h"
#include "tests/unit/gpu/test_util.h"

namespace leapcache::reference {
namespace {

using testutil::AllEqualTo;
using testutil::AllFinite;
using testutil::FirstBitDifference;
using testutil::kNaN;
using testutil::kPoison;
using testutil::MessageContains;
using testutil::RealisticState;
using testutil::RelL2;
using testutil::ReportMeasured;
using testutil::SameBits;
using testutil::Transpose;

BlobSpec Spec(Codec codec, int bits, int r = 0, bool smoothing = false, int dk = 128, int dv = 128) {
  BlobSpec s;
  s.codec = codec;
  s.bits = bits;
  s.r = r;
  s.smoothing = smoothing;
  s.dk = dk;
  s.dv = dv;
  s.p = codec == Codec::kLeap ? 16 : 1;
  return s;
}

BlobSpec Fp32(int dk = 128, int dv = 128) { return Spec(Codec::kFp32, 32, 0, false, dk, dv); }
BlobSpec Bf16(int dk = 128, int dv = 128) { return Spec(Codec::kBf16, 16, 0, false, dk, dv); }
BlobSpec Fp16(int dk = 128, int dv = 128) { return Spec(Codec::kFp16, 16, 0, false, dk, dv); }
BlobSpec IntRow(int bits, int dk = 128, int dv = 128) { return Spec(Codec::kIntRow, bits, 0, false, dk, dv); }
BlobSpec IntCol(int bits, int dk = 128, int dv = 128) { return Spec(Codec::kIntCol, bits, 0, false, dk, dv); }
BlobSpec Leap(int bits, int dk = 128, int dv = 128) { return BlobSpec::Leap(StateKind::kGdn, bits, dk, dv); }

// Every codec at every width, leap with and without compensators and smoothing.
std::vector<BlobSpec> AllCodecs(int dk, int dv) {
  std::vector<BlobSpec> specs = {Fp32(dk, dv), Bf16(dk, dv), Fp16(dk, dv)};
  for (int bits : {8, 6, 4}) {
    specs.push_back(IntRow(bits, dk, dv));
    specs.push_back(IntCol(bits, dk, dv));
    specs.push_back(Leap(bits, dk, dv));
    specs.push_back(Spec(Codec::kLeap, bits, 0, true, dk, dv));
    specs.push_back(Spec(Codec::kLeap, bits, 2, false, dk, dv));
  }
  return specs;
}

const std::pair<int, int> kShapes[] = {{128, 128}, {16, 32}, {64, 128}};

std::vector<uint8_t> MustEncode(const BlobSpec& s, const std::vector<float>& state,
                                Orientation layout = Orientation::kKV) {
  StatusOr<std::vector<uint8_t>> blob = Encode(s, state.data(), layout);
  EXPECT_TRUE(blob.ok()) << s.ToString() << ": " << blob.status().ToString();
  if (!blob.ok()) return {};
  EXPECT_EQ(blob->size(), ComputeLayout(s).blob_bytes()) << s.ToString();
  return std::move(blob).value();
}

// Decodes into a NaN-poisoned buffer: every element must be written.
std::vector<float> MustDecode(const std::vector<uint8_t>& blob, size_t n,
                              Orientation layout = Orientation::kKV) {
  std::vector<float> out(n, kNaN);
  const Status st = Decode(blob, out.data(), layout);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

std::vector<float> RoundTrip(const BlobSpec& s, const std::vector<float>& state) {
  return MustDecode(MustEncode(s, state), state.size());
}

UnpackedBlob MustUnpack(const std::vector<uint8_t>& blob) {
  StatusOr<UnpackedBlob> u = Unpack(blob);
  EXPECT_TRUE(u.ok()) << u.status().ToString();
  if (!u.ok()) return {};
  return std::move(u).value();
}

std::string Name(const BlobSpec& s) {
  std::string n = std::string(CodecName(s.codec)) + std::to_string(s.bits);
  if (s.codec == Codec::kLeap) n += "_r" + std::to_string(s.r) + (s.smoothing ? "_sm" : "_nosm");
  n += "_" + std::to_string(s.dk) + "x" + std::to_string(s.dv);
  std::replace(n.begin(), n.end(), '-', '_');  // a valid test-name suffix
  return n;
}

// ---------------------------------------------------------------------------------------------
// Round-trip accuracy on the realistic state (Gaussian plus four value columns x30).

struct BoundCase {
  BlobSpec spec;
  double bound;  // relative L2 error over three seeds, 128x128 and 64x128
};

class RoundTripErrorTest : public ::testing::TestWithParam<BoundCase> {};

TEST_P(RoundTripErrorTest, RelativeErrorWithinBound) {
  const BoundCase& c = GetParam();
  double worst = 0.0;
  for (auto [dk, dv] : {std::pair{128, 128}, std::pair{64, 128}}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " shape " + std::to_string(dk) + "x" +
                   std::to_string(dv));
      BlobSpec s = c.spec;
      s.dk = dk;
      s.dv = dv;
      const std::vector<float> S = RealisticState(dk, dv, seed);
      const std::vector<float> D = RoundTrip(s, S);
      ASSERT_TRUE(AllFinite(D));
      const double err = RelL2(D, S);
      worst = std::max(worst, err);
      if (c.bound == 0.0) {
        EXPECT_EQ(FirstBitDifference(D, S), -1);
      } else {
        EXPECT_LT(err, c.bound) << s.ToString();
        EXPECT_GT(err, 0.0) << "a lossy codec reproduced a Gaussian state exactly";
      }
    }
  }
  ReportMeasured("worst_rel_l2_" + Name(c.spec), worst);
}

// Bounds are ~2x the worst error measured over the seeds and shapes above (LEAPCACHE_TEST_VERBOSE=1
// prints them; measured worst: leap 2.43e-3 / 4.65e-3 / 2.01e-2, int-col 7.06e-3 / 2.88e-2 /
// 0.126, int-row 1.98e-2 / 8.04e-2 / 0.185 at 8 / 6 / 4 bits), except fp32 (bitwise) and the
// bf16/fp16 bounds, which are the (measured 1.74e-3 and 2.11e-4).
// Leap's 8-bit spread over seeds (1.4e-3 to 2.4e-3) is the one-round subspace fit: it captures
// the four outlier directions fully for some seeds and only partly for others.
INSTANTIATE_TEST_SUITE_P(
    Codecs, RoundTripErrorTest,
    ::testing::Values(BoundCase{Fp32(), 0.0}, BoundCase{Bf16(), 4e-3}, BoundCase{Fp16(), 1e-3},
                      BoundCase{Leap(8), 5e-3}, BoundCase{Leap(6), 1e-2}, BoundCase{Leap(4), 4e-2},
                      BoundCase{IntCol(8), 1.4e-2}, BoundCase{IntCol(6), 6e-2},
                      BoundCase{IntCol(4), 0.25}, BoundCase{IntRow(8), 4e-2},
                      BoundCase{IntRow(6), 0.16}, BoundCase{IntRow(4), 0.37}),
    [](const ::testing::TestParamInfo<BoundCase>& info) { return Name(info.param.spec); });

TEST(RoundTrip, LeapBeatsIntColBeatsIntRowOnOutlierColumns) {
  for (uint32_t seed : {11u, 12u}) {
    const std::vector<float> S = RealisticState(128, 128, seed);
    for (int bits : {8, 6, 4}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " bits " + std::to_string(bits));
      const double leap = RelL2(RoundTrip(Leap(bits), S), S);
      const double col = RelL2(RoundTrip(IntCol(bits), S), S);
      const double row = RelL2(RoundTrip(IntRow(bits), S), S);
      // Measured over seeds 1-8: leap / int-col <= 0.38 at 8 bits and <= 0.18 at 6 and 4;
      // int-col / int-row 0.3-0.36 at 8 and 6 bits, up to 0.69 at 4.
      EXPECT_LT(leap, 0.5 * col) << leap << " vs " << col;
      EXPECT_LT(col, 0.8 * row) << col << " vs " << row;
    }
  }
}

// bf16 and fp16 store each element rounded to nearest even; fp16 saturates instead of
// overflowing.
TEST(RoundTrip, SixteenBitCodecsRoundEachElementToNearestEven) {
  std::vector<float> S = RealisticState(64, 128, 21, 100.0f);
  S[5] = 1e5f;
  S[6] = -7e4f;
  S[7] = 65519.0f;
  S[8] = 3e-8f;  // fp16 subnormal range
  S[9] = 1e-39f;
  const std::vector<float> b = RoundTrip(Bf16(64, 128), S);
  const std::vector<float> h = RoundTrip(Fp16(64, 128), S);
  for (size_t i = 0; i < S.size(); ++i) {
    ASSERT_EQ(FloatBits(b[i]), FloatBits(RoundToBf16(S[i]))) << i;
    ASSERT_EQ(FloatBits(h[i]), FloatBits(RoundToHalf(std::clamp(S[i], -65504.0f, 65504.0f)))) << i;
  }
  EXPECT_EQ(h[5], 65504.0f);
  EXPECT_EQ(h[6], -65504.0f);
  EXPECT_EQ(h[7], 65504.0f);
}

// Each integer element is within half a quantization step of its input: int-row's step is
// max(row absmax, 2^-96) / q, int-col's the same per column, leap's s_k[a] * s_v[j] / q on the
// residual. Checks each element against its own row's/column's scales, so a mixed-up index shows.
TEST(RoundTrip, IntegerCodecsErrorWithinHalfAStepPerElement) {
  for (auto [dk, dv] : kShapes) {
    for (int bits : {8, 6, 4}) {
      const float q = static_cast<float>(MaxCode(bits));
      std::vector<float> S = RealisticState(dk, dv, 30 + bits);
      testutil::ScaleRows(S, dk, dv, {1, 7}, 50.0f);
      testutil::ScaleRows(S, dk, dv, {4}, 1e-3f);
      SCOPED_TRACE(std::to_string(dk) + "x" + std::to_string(dv) + " bits " + std::to_string(bits));
      std::vector<float> row_max(dk, 0.0f), col_max(dv, 0.0f);
      for (int a = 0; a < dk; ++a) {
        for (int j = 0; j < dv; ++j) {
          row_max[a] = std::max(row_max[a], std::fabs(S[a * dv + j]));
          col_max[j] = std::max(col_max[j], std::fabs(S[a * dv + j]));
        }
      }
      const std::vector<float> R = RoundTrip(IntRow(bits, dk, dv), S);
      const std::vector<float> C = RoundTrip(IntCol(bits, dk, dv), S);
      for (int a = 0; a < dk; ++a) {
        for (int j = 0; j < dv; ++j) {
          const float x = S[a * dv + j];
          const float row_step = std::max(row_max[a], kScaleFloor) / q;
          const float col_step = std::max(col_max[j], kScaleFloor) / q;
          ASSERT_LE(std::fabs(R[a * dv + j] - x), row_step * 0.5001f) << "int-row a " << a << " j " << j;
          ASSERT_LE(std::fabs(C[a * dv + j] - x), col_step * 0.5001f) << "int-col a " << a << " j " << j;
        }
      }
      for (const BlobSpec& s : {Leap(bits, dk, dv), Spec(Codec::kLeap, bits, 0, true, dk, dv),
                                Spec(Codec::kLeap, bits, 3, false, dk, dv)}) {
        const std::vector<uint8_t> blob = MustEncode(s, S);
        const UnpackedBlob u = MustUnpack(blob);
        const std::vector<float> D = MustDecode(blob, S.size());
        for (int a = 0; a < dk; ++a) {
          for (int j = 0; j < dv; ++j) {
            float comp = 0.0f;
            for (int h = 0; h < s.r; ++h) comp += std::fabs(u.kfac[h * dk + a] * u.vfac[h * dv + j]);
            const float step = u.row_scale[a] * u.col_factor[j];
            const float slack = 1e-5f * (std::fabs(S[a * dv + j]) + comp);
            ASSERT_LE(std::fabs(D[a * dv + j] - S[a * dv + j]), 0.5001f * step + slack)
                << s.ToString() << " a " << a << " j " << j;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Layout and bytes

TEST(Encode, BlobSizesFollowTheLayout) {
  const std::vector<float> S = RealisticState(128, 128, 4);
  EXPECT_EQ(MustEncode(Leap(8), S).size(), 64u + 19456u);
  EXPECT_EQ(19456.0 / (128 * 128), 1.1875);
  EXPECT_EQ(MustEncode(Leap(6), S).size(), 64u + 12288u + 1024u + 6u * 512u);
  EXPECT_EQ(MustEncode(Leap(4), S).size(), 64u + 8192u + 1024u + 8u * 512u);
  EXPECT_EQ(MustEncode(Fp32(), S).size(), 64u + 65536u);
  EXPECT_EQ(MustEncode(Bf16(), S).size(), 64u + 32768u);
  EXPECT_EQ(MustEncode(IntRow(8), S).size(), 64u + 16384u + 512u);
  EXPECT_EQ(MustEncode(IntCol(4), S).size(), 64u + 8192u + 512u);
  for (auto [dk, dv] : kShapes) {
    const std::vector<float> T = RealisticState(dk, dv, 4);
    for (const BlobSpec& s : AllCodecs(dk, dv)) {
      const std::vector<uint8_t> blob = MustEncode(s, T);
      const StatusOr<BlobSpec> parsed = ParseBlob(blob);
      ASSERT_TRUE(parsed.ok()) << s.ToString();
      EXPECT_EQ(parsed->ToString(), s.ToString());
    }
  }
}

// The payload is value-major whatever the input layout: a [dv][dk] input of S^T gives the same
// bytes as the [dk][dv] input of S, and decoding to either layout gives transposes.
TEST(Encode, OrientationsGiveIdenticalBlobsAndTransposedDecodes) {
  for (auto [dk, dv] : kShapes) {
    const std::vector<float> S = RealisticState(dk, dv, 40);
    const std::vector<float> St = Transpose(S, dk, dv);  // [dv][dk]
    for (const BlobSpec& s : AllCodecs(dk, dv)) {
      SCOPED_TRACE(s.ToString());
      const std::vector<uint8_t> kv = MustEncode(s, S, Orientation::kKV);
      const std::vector<uint8_t> vk = MustEncode(s, St, Orientation::kVK);
      EXPECT_EQ(kv, vk);
      const std::vector<float> out_kv = MustDecode(kv, S.size(), Orientation::kKV);
      const std::vector<float> out_vk = MustDecode(kv, S.size(), Orientation::kVK);
      EXPECT_EQ(FirstBitDifference(out_vk, Transpose(out_kv, dk, dv)), -1);
      // The codes section is [dv][dk]: for fp32 it is S^T's bytes.
      if (s.codec == Codec::kFp32) {
        EXPECT_EQ(std::memcmp(kv.data() + kHeaderBytes, St.data(), St.size() * 4), 0);
      }
    }
  }
}

TEST(Encode, IsDeterministic) {
  const std::vector<float> S = RealisticState(64, 128, 50);
  for (const BlobSpec& s : AllCodecs(64, 128)) {
    // A second copy at another address and alignment.
    std::vector<float> shifted(S.size() + 1);
    std::copy(S.begin(), S.end(), shifted.begin() + 1);
    const StatusOr<std::vector<uint8_t>> a = Encode(s, S.data(), Orientation::kKV);
    const StatusOr<std::vector<uint8_t>> b = Encode(s, shifted.data() + 1, Orientation::kKV);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b) << s.ToString();
    EXPECT_EQ(*a, MustEncode(s, S)) << s.ToString();
  }
}

// Scaling a state by 2^12 scales every code scale by a power of two (the smoothing scale by
// 2^6, through an exact sqrt), so without compensators the decoded state scales exactly. The
// balanced compensator factors scale by 2^6 each too, but their smallest entries sit in fp16's
// subnormal range where rounding is not scale-free, so leap with r > 0 is only close.
TEST(Encode, PowerOfTwoScalingIsExactWithoutCompensators) {
  const std::vector<float> S = RealisticState(64, 128, 51);
  for (float factor : {4096.0f, 1.0f / 4096.0f}) {
    std::vector<float> scaled = S;
    for (float& x : scaled) x *= factor;
    for (const BlobSpec& s : AllCodecs(64, 128)) {
      if (s.codec == Codec::kFp16) continue;  // saturates and has subnormals: not scale-free
      SCOPED_TRACE(s.ToString() + " x" + std::to_string(factor));
      std::vector<float> want = RoundTrip(s, S);
      for (float& x : want) x *= factor;
      const std::vector<float> got = RoundTrip(s, scaled);
      if (s.codec != Codec::kLeap || s.r == 0) {
        EXPECT_EQ(FirstBitDifference(got, want), -1);
      } else {
        // Measured: differences <= 2.0e-4 relative (a few code flips), errors 1.7e-3 - 1.9e-2.
        const double err = RelL2(want, scaled);
        EXPECT_LT(RelL2(got, want), 0.25 * err);
        EXPECT_LT(RelL2(got, scaled), 1.25 * err);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Degenerate states

TEST(Encode, ZeroStateDecodesToExactZero) {
  for (auto [dk, dv] : kShapes) {
    const std::vector<float> Z(testutil::Elements(dk, dv), 0.0f);
    for (const BlobSpec& s : AllCodecs(dk, dv)) {
      const std::vector<float> D = RoundTrip(s, Z);
      EXPECT_TRUE(AllEqualTo(D, 0.0f)) << s.ToString() << " first diff " << FirstBitDifference(D, Z);
    }
  }
}

// Bound of the relative error on the non-zero entries of a single-row/column state; measured
// values in the comments.
double NonZeroBound(const BlobSpec& s, bool row) {
  switch (s.codec) {
    case Codec::kFp32:
      return 0.0;
    case Codec::kBf16:
      return 4e-3;  // measured <= 2.2e-3
    case Codec::kFp16:
      return 1e-3;  // measured <= 2.4e-4
    case Codec::kIntRow:
      if (!row) return 1e-6;  // one element per row: exact up to the 1/q rounding
      break;
    case Codec::kIntCol:
      if (row) return 1e-6;
      break;
    case Codec::kLeap:
      if (s.r > 0) return 1e-4;  // compensators carry a rank-one state: measured <= 2.7e-5
      if (row && !s.smoothing) return 1e-6;
      break;
  }
  // The absmax step over one Gaussian row or column: measured <= 0.77 / q.
  return 1.5 / MaxCode(s.bits);
}

// One non-zero key row, then one non-zero value column, in an otherwise zero state. The zero
// entries come back exactly zero in every codec: the integer codes of a zero row/column are 0,
// and a compensator pair of a rank-one state has exact zeros where the state does (K = S Qv is
// zero on zero rows, Qv = orth(S^T Qk) is zero on zero columns).
TEST(Encode, SingleNonZeroRowOrColumn) {
  for (auto [dk, dv] : kShapes) {
    for (bool row : {true, false}) {
      const int index = row ? dk / 2 + 1 : dv / 3;
      const std::vector<float> G = testutil::GaussianState(dk, dv, 60 + dk);
      std::vector<float> S(G.size(), 0.0f);
      for (int a = 0; a < dk; ++a) {
        for (int j = 0; j < dv; ++j) {
          if ((row && a == index) || (!row && j == index)) S[a * dv + j] = 1.0f + G[a * dv + j];
        }
      }
      for (const BlobSpec& s : AllCodecs(dk, dv)) {
        SCOPED_TRACE(s.ToString() + (row ? " row " : " column ") + std::to_string(index));
        const std::vector<float> D = RoundTrip(s, S);
        ASSERT_TRUE(AllFinite(D));
        std::vector<float> nz, nz_ref;
        for (size_t i = 0; i < S.size(); ++i) {
          if (S[i] == 0.0f) {
            ASSERT_EQ(D[i], 0.0f) << "zero entry " << i << " decoded as " << D[i];
          } else {
            nz.push_back(D[i]);
            nz_ref.push_back(S[i]);
          }
        }
        // A rank-one state: with r >= 1 the compensator carries it to fp16 precision. A row
        // state under int-col (or a column state under int-row) has one element per scale
        // group, stored exactly as +-q times its own scale.
        const double err = RelL2(nz, nz_ref);
        ReportMeasured(std::string(row ? "row_" : "col_") + Name(s), err);
        EXPECT_LE(err, NonZeroBound(s, row));
      }
    }
  }
}

// States whose scales are subnormal. The integer codecs divide by the scale, so codes keep
// their relative precision; the decoded element code * s / q is rounded to the subnormal grid
// (2^-149). Asserted here: finite everywhere, each element within half of its step plus q + 2
// subnormal ulps.
TEST(Encode, DenormalStatesDecodeFiniteWithinTheirStep) {
  std::vector<float> tiny = RealisticState(128, 128, 70, 1e-39f);  // mostly fp32 subnormals
  size_t subnormals = 0;
  for (float x : tiny) subnormals += std::fpclassify(x) == FP_SUBNORMAL;
  ASSERT_GT(subnormals, tiny.size() / 2);
  for (const BlobSpec& s : AllCodecs(128, 128)) {
    SCOPED_TRACE(s.ToString());
    const std::vector<float> D = RoundTrip(s, tiny);
    ASSERT_TRUE(AllFinite(D));
    if (s.codec == Codec::kFp32) {
      EXPECT_EQ(FirstBitDifference(D, tiny), -1);
    }
    if (s.codec == Codec::kIntRow || s.codec == Codec::kIntCol ||
        (s.codec == Codec::kLeap && !s.smoothing)) {
      for (size_t i = 0; i < D.size(); ++i) {
        const int dk = 128, dv = 128, a = static_cast<int>(i) / dv, j = static_cast<int>(i) % dv;
        float m = 0.0f;
        if (s.codec == Codec::kIntRow) {
          for (int c = 0; c < dv; ++c) m = std::max(m, std::fabs(tiny[a * dv + c]));
        } else {
          for (int r = 0; r < dk; ++r) m = std::max(m, std::fabs(tiny[r * dv + j]));
        }
        // The decode's factor s / q is itself rounded to the subnormal grid, and the code
        // multiplies that rounding by up to q: allow q + 2 subnormal ulps.
        ASSERT_LE(std::fabs(D[i] - tiny[i]),
                  m / MaxCode(s.bits) * 0.5001f + (MaxCode(s.bits) + 2) * kScaleFloor) << i;
      }
    }
    if (s.codec == Codec::kLeap && s.smoothing) {
      // Measured 5.4e-3 (8 bit), 2.3e-2 (6 bit), 9.8e-2 (4 bit): the compensators vanish at
      // this scale (their fp16 factors underflow), the smoothed residual alone carries it.
      const double bound = s.bits == 8 ? 1.2e-2 : s.bits == 6 ? 5e-2 : 0.2;
      EXPECT_LT(RelL2(D, tiny), bound);
      ReportMeasured("denormal_rel_l2_" + Name(s), RelL2(D, tiny));
    }
  }
}

// KNOWN BUG (reported, not fixed: gpu/ is not ours). The absmax scales of int-row and int-col
// (and leap's column scale without smoothing) are floored at 2^-96 ~ 1.26e-29, so a non-zero
// row/column whose absmax is below ~2^-96 / (2q) decodes to exactly zero (relative error 1.0),
// and one below 2^-96 is quantized with a coarser step than its own absmax. FORMAT.md section 4
// says the floor "only changes rows and columns that are all zero (or whose mean underflows)",
// which holds for leap's sqrt(mean |row|) smoothing scale but not for absmax scales. Measured:
// RealisticState * 1e-35 (or 1e-39) round-trips with relative error 1.0 through int-row and
// int-col 8-bit (0.029 / 0.0084 for the same state at scale 1).
// Enable once tiny rows keep their relative precision.
TEST(Encode, TinyNonZeroRowsKeepTheirRelativePrecision) {
  const int dk = 64, dv = 128;
  for (float scale : {1e-30f, 1e-35f, 1e-39f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    const std::vector<float> ref = RealisticState(dk, dv, 72);
    std::vector<float> S = ref;
    for (float& x : S) x *= scale;
    for (const BlobSpec& s : {IntRow(8, dk, dv), IntCol(8, dk, dv)}) {
      const double normal = RelL2(RoundTrip(s, ref), ref);
      EXPECT_LT(RelL2(RoundTrip(s, S), S), 1.5 * normal) << s.ToString();
    }
  }
}

// A normal state with one key row at 1e-40 (subnormal) and one at 1e-25 (tiny but above the
// floor): every codec decodes finite; int-row keeps the 1e-25 row to its usual relative
// precision; the other rows are unaffected.
TEST(Encode, DenormalRowKeepsOtherRowsAndDecodesFinite) {
  const int dk = 64, dv = 128;
  std::vector<float> S = RealisticState(dk, dv, 71);
  testutil::ScaleRows(S, dk, dv, {9}, 1e-40f);
  testutil::ScaleRows(S, dk, dv, {20}, 1e-25f);
  auto row = [&](const std::vector<float>& M, int a) {
    return std::vector<float>(M.begin() + a * dv, M.begin() + (a + 1) * dv);
  };
  for (const BlobSpec& s : AllCodecs(dk, dv)) {
    SCOPED_TRACE(s.ToString());
    const std::vector<float> D = RoundTrip(s, S);
    ASSERT_TRUE(AllFinite(D));
    if (s.codec == Codec::kIntRow) {
      const double step = 1.0 / MaxCode(s.bits);
      for (int a = 0; a < dk; ++a) {
        if (a == 9) continue;
        EXPECT_LT(RelL2(row(D, a), row(S, a)), 0.5 * step * std::sqrt(dv)) << "row " << a;
      }
      // The 1e-25 row is as precise as any other (its scale is above the floor).
      EXPECT_LT(RelL2(row(D, 20), row(S, 20)), 2.0 * RelL2(row(D, 0), row(S, 0)) + 1e-3);
    }
    if (s.codec == Codec::kLeap || s.codec == Codec::kIntCol) {
      std::vector<float> rest, rest_ref;
      for (int a = 0; a < dk; ++a) {
        if (a == 9 || a == 20) continue;
        const std::vector<float> d = row(D, a), r = row(S, a);
        rest.insert(rest.end(), d.begin(), d.end());
        rest_ref.insert(rest_ref.end(), r.begin(), r.end());
      }
      const double normal = RelL2(RoundTrip(s, RealisticState(dk, dv, 71)), RealisticState(dk, dv, 71));
      EXPECT_LT(RelL2(rest, rest_ref), 1.5 * normal + 1e-6);
    }
    // The tiny rows stay tiny: no other row's scale or compensator leaks into them.
    for (int a : {9, 20}) {
      for (int j = 0; j < dv; ++j) ASSERT_LE(std::fabs(D[a * dv + j]), 1e-20f) << a << " " << j;
    }
  }
}

// A state of rank <= r: one subspace iteration captures it exactly, the fp16 factors carry it to
// ~2^-11 and the quantized residual is what fp16 rounding left: far below the r = 0 error.
TEST(Encode, RankDeficientStatesAreCarriedByCompensators) {
  for (auto [dk, dv] : kShapes) {
    for (int rank : {1, 2, 4}) {
      const std::vector<float> S = testutil::LowRankState(dk, dv, rank, 80 + rank);
      for (int bits : {8, 4}) {
        SCOPED_TRACE(std::to_string(dk) + "x" + std::to_string(dv) + " rank " + std::to_string(rank) +
                     " bits " + std::to_string(bits));
        const double none = RelL2(RoundTrip(Spec(Codec::kLeap, bits, 0, true, dk, dv), S), S);
        for (int r : {4, 8}) {
          if (r < rank) continue;
          const std::vector<float> D = RoundTrip(Spec(Codec::kLeap, bits, r, true, dk, dv), S);
          ASSERT_TRUE(AllFinite(D));
          const double err = RelL2(D, S);
          // Measured: <= 1.7e-6 at 8 bits and 3.0e-5 at 4 bits (128x128); r = 0 gives 3.5e-3
          // and 6.5e-2.
          EXPECT_LT(err, bits == 8 ? 1e-5 : 1e-4) << "r " << r;
          EXPECT_LT(err, 2e-3);
          EXPECT_LT(err, 0.01 * none) << "r " << r << " vs r=0 " << none;
          ReportMeasured("rank" + std::to_string(rank) + "_r" + std::to_string(r) + "_" +
                             std::to_string(bits) + "bit_" + std::to_string(dk) + "x" + std::to_string(dv),
                         err);
        }
      }
    }
  }
}

// Without compensators and smoothing, leap's encoder is int-col's: same codes, same column
// scales, same payload bytes, bit-identical decode.
TEST(Encode, LeapWithoutCompensatorsOrSmoothingIsIntCol) {
  for (auto [dk, dv] : kShapes) {
    const std::vector<float> S = RealisticState(dk, dv, 90);
    for (int bits : {8, 6, 4}) {
      SCOPED_TRACE(std::to_string(dk) + "x" + std::to_string(dv) + " bits " + std::to_string(bits));
      const std::vector<uint8_t> leap = MustEncode(Spec(Codec::kLeap, bits, 0, false, dk, dv), S);
      const std::vector<uint8_t> col = MustEncode(IntCol(bits, dk, dv), S);
      ASSERT_EQ(leap.size(), col.size());
      EXPECT_TRUE(std::equal(leap.begin() + kHeaderBytes, leap.end(), col.begin() + kHeaderBytes));
      EXPECT_EQ(FirstBitDifference(MustDecode(leap, S.size()), MustDecode(col, S.size())), -1);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Input validation

TEST(Encode, NonFiniteElementIsInvalidArgumentNamingIndex) {
  const std::vector<float> S = RealisticState(128, 128, 100);
  const float inf = std::numeric_limits<float>::infinity();
  for (Orientation layout : {Orientation::kKV, Orientation::kVK}) {
    for (auto [index, value] : {std::pair<size_t, float>{1234, kNaN}, {77, inf}, {0, -inf},
                                {16383, kNaN}, {9000, -kNaN}}) {
      for (const BlobSpec& s : {Leap(8), IntRow(6), Fp16(), Fp32()}) {
        std::vector<float> bad = S;
        bad[index] = value;
        const StatusOr<std::vector<uint8_t>> blob = Encode(s, bad.data(), layout);
        ASSERT_FALSE(blob.ok()) << s.ToString() << " index " << index;
        EXPECT_EQ(blob.status().code(), StatusCode::kInvalidArgument) << blob.status().ToString();
        EXPECT_TRUE(MessageContains(blob.status(), "element " + std::to_string(index) + " "));
      }
    }
  }
  EXPECT_EQ(Encode(Leap(8), nullptr, Orientation::kKV).status().code(), StatusCode::kInvalidArgument);
}

TEST(Encode, MagnitudeAbove2To64IsOutOfRange) {
  const std::vector<float> S = RealisticState(128, 128, 101);
  for (auto [index, value] : {std::pair<size_t, float>{4000, std::ldexp(1.0f, 65)},
                              {5, -3e19f},
                              {16000, std::numeric_limits<float>::max()},
                              {1, std::nextafter(std::ldexp(1.0f, 64), 1e38f)}}) {
    for (const BlobSpec& s : {Leap(8), IntCol(8), Bf16(), Fp32()}) {
      std::vector<float> bad = S;
      bad[index] = value;
      const StatusOr<std::vector<uint8_t>> blob = Encode(s, bad.data(), Orientation::kKV);
      ASSERT_FALSE(blob.ok());
      EXPECT_EQ(blob.status().code(), StatusCode::kOutOfRange) << blob.status().ToString();
      EXPECT_TRUE(MessageContains(blob.status(), "element " + std::to_string(index) + " "));
    }
  }
}

// 2^64 itself is in range; a state at that magnitude encodes and decodes finite in every codec
// (the compensator fit gives up cleanly: its squared norms overflow, so the pairs are zero).
TEST(Encode, StatesUpTo2To64DecodeFinite) {
  std::vector<float> S = RealisticState(64, 128, 102, 1.0f);
  float m = 0.0f;
  for (float x : S) m = std::max(m, std::fabs(x));
  int e = 0;
  std::frexp(m, &e);
  for (float& x : S) x = std::ldexp(x, 64 - e);  // now all < 2^64, exactly scaled
  S[777] = -std::ldexp(1.0f, 64);
  for (const BlobSpec& s : AllCodecs(64, 128)) {
    SCOPED_TRACE(s.ToString());
    const std::vector<float> D = RoundTrip(s, S);
    ASSERT_TRUE(AllFinite(D));
    if (s.codec == Codec::kFp16) continue;  // saturates at 65504
    const double bound = s.codec == Codec::kFp32 ? 0.0 : s.bits == 16 ? 4e-3 : s.bits == 8 ? 5e-2
                                                                     : s.bits == 6 ? 0.2 : 0.5;
    EXPECT_LE(RelL2(D, S), bound);
  }
}

TEST(Encode, RejectsInvalidSpecAndLayout) {
  const std::vector<float> S = RealisticState(128, 128, 103);
  BlobSpec bad = Leap(8);
  bad.dk = 100;
  StatusOr<std::vector<uint8_t>> blob = Encode(bad, S.data(), Orientation::kKV);
  EXPECT_EQ(blob.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageContains(blob.status(), "dk"));
  blob = Encode(Leap(8), S.data(), static_cast<Orientation>(2));
  EXPECT_EQ(blob.status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Decode of damaged blobs: an error status, never a crash, and the output left untouched.

void ExpectDecodeFailsUntouched(const std::vector<uint8_t>& blob, size_t n, const std::string& what) {
  std::vector<float> out(n, kPoison);
  const Status st = Decode(blob, out.data(), Orientation::kKV);
  ASSERT_FALSE(st.ok()) << what;
  EXPECT_TRUE(st.code() == StatusCode::kDataLoss || st.code() == StatusCode::kInvalidArgument)
      << what << ": " << st.ToString();
  EXPECT_TRUE(AllEqualTo(out, kPoison)) << what << ": output written on error";
  EXPECT_FALSE(Unpack(blob).ok()) << what;
}

// Re-seals a blob of `spec` after a deliberate payload edit: both checksums are valid again.
void Reseal(const BlobSpec& spec, std::vector<uint8_t>& blob) { SealBlob(spec, blob); }

TEST(Decode, TruncatedOrCorruptedBlobsFailWithoutWriting) {
  const int dk = 16, dv = 32;
  const std::vector<float> S = RealisticState(dk, dv, 110);
  for (const BlobSpec& s : {Leap(8, dk, dv), Leap(4, dk, dv), IntRow(6, dk, dv), Fp32(dk, dv)}) {
    SCOPED_TRACE(s.ToString());
    const std::vector<uint8_t> blob = MustEncode(s, S);
    for (size_t n = 0; n < blob.size(); ++n) {
      ExpectDecodeFailsUntouched(std::vector<uint8_t>(blob.begin(), blob.begin() + n), S.size(),
                                 "truncated to " + std::to_string(n));
    }
    std::vector<uint8_t> bad = blob;
    for (size_t i = 0; i < bad.size(); ++i) {
      bad[i] ^= 0x40;  // every byte: header and payload
      ExpectDecodeFailsUntouched(bad, S.size(), "byte " + std::to_string(i) + " flipped");
      bad[i] ^= 0x40;
    }
    bad = blob;
    StoreU16(bad.data() + header::kVersion, 2);
    StoreU32(bad.data() + header::kHeaderCrc, Crc32c(bad.data(), header::kHeaderCrc));
    ExpectDecodeFailsUntouched(bad, S.size(), "version 2");
    std::vector<float> out(S.size(), kPoison);
    const Status st = Decode(bad, out.data(), Orientation::kKV);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageContains(st, "version"));
    // The intact blob still decodes.
    EXPECT_TRUE(AllFinite(MustDecode(blob, S.size())));
  }
}

// The check readers and the store's commit share: each unusable value named with its index.
TEST(CheckStoredValues, NamesTheFirstUnusableValue) {
  const int dk = 16, dv = 32;
  const BlobSpec s = Leap(8, dk, dv);
  const std::vector<uint8_t> blob = MustEncode(s, RealisticState(dk, dv, 112));
  const auto payload = [](const std::vector<uint8_t>& b) {
    return std::span<const uint8_t>(b).subspan(kHeaderBytes);
  };
  EXPECT_TRUE(CheckStoredValues(s, payload(blob)).ok());
  const PayloadLayout l = ComputeLayout(s);
  std::vector<uint8_t> bad = blob;
  const float zero = 0.0f;
  std::memcpy(bad.data() + kHeaderBytes + l.col_scale_offset + 4 * 7, &zero, 4);
  Status st = CheckStoredValues(s, payload(bad));
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(MessageContains(st, "column scale 7 is not finite and positive")) << st.ToString();
  bad = blob;
  StoreU16(bad.data() + kHeaderBytes + l.comp_offset + 2 * 9, 0x7e00);  // fp16 NaN
  st = CheckStoredValues(s, payload(bad));
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(MessageContains(st, "compensator 9 is not finite")) << st.ToString();
  // Float codecs store the elements themselves: each must be finite.
  const BlobSpec f = Fp32(dk, dv);
  const std::vector<uint8_t> dense = MustEncode(f, RealisticState(dk, dv, 113));
  EXPECT_TRUE(CheckStoredValues(f, payload(dense)).ok());
  std::vector<uint8_t> nan = dense;
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + kHeaderBytes + 4 * 37, &q, 4);
  st = CheckStoredValues(f, payload(nan));
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(MessageContains(st, "element 37 is not finite")) << st.ToString();
  for (const Codec c : {Codec::kBf16, Codec::kFp16}) {
    BlobSpec h = f;
    h.codec = c;
    h.bits = 16;
    std::vector<uint8_t> half = MustEncode(h, RealisticState(dk, dv, 114));
    EXPECT_TRUE(CheckStoredValues(h, payload(half)).ok());
    StoreU16(half.data() + kHeaderBytes + 2 * 5, c == Codec::kBf16 ? 0x7F80 : 0x7C00);  // +inf
    st = CheckStoredValues(h, payload(half));
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << CodecName(c);
    EXPECT_TRUE(MessageContains(st, "element 5 is not finite")) << st.ToString();
  }
}

// Hand-made blobs with valid checksums whose scales or compensators are not usable.
TEST(Decode, ValidChecksumsButUnusableScalesAreDataLoss) {
  const int dk = 16, dv = 32;
  const BlobSpec s = Leap(8, dk, dv);
  const std::vector<uint8_t> blob = MustEncode(s, RealisticState(dk, dv, 111));
  const PayloadLayout l = ComputeLayout(s);
  const float inf = std::numeric_limits<float>::infinity();
  for (auto [offset, value] : {std::pair<size_t, float>{l.row_scale_offset + 4 * 3, kNaN},
                               {l.row_scale_offset, 0.0f},
                               {l.row_scale_offset + 4 * (dk - 1), -1.0f},
                               {l.col_scale_offset + 4 * 5, inf},
                               {l.col_scale_offset, 0.0f},
                               {l.col_scale_offset + 4 * (dv - 1), -2.0f}}) {
    std::vector<uint8_t> bad = blob;
    std::memcpy(bad.data() + kHeaderBytes + offset, &value, 4);
    Reseal(s, bad);
    ASSERT_TRUE(ParseBlob(bad).ok());
    ExpectDecodeFailsUntouched(bad, testutil::Elements(dk, dv), "scale at " + std::to_string(offset));
    std::vector<float> out(testutil::Elements(dk, dv), kPoison);
    EXPECT_EQ(Decode(bad, out.data(), Orientation::kKV).code(), StatusCode::kDataLoss);
  }
  for (uint16_t h : {uint16_t{0x7c00}, uint16_t{0xfe00}}) {
    for (size_t at : {size_t{0}, 2 * static_cast<size_t>(dk) + 6, l.comp_bytes - 2}) {
      std::vector<uint8_t> bad = blob;
      StoreU16(bad.data() + kHeaderBytes + l.comp_offset + at, h);
      Reseal(s, bad);
      ExpectDecodeFailsUntouched(bad, testutil::Elements(dk, dv), "compensator at " + std::to_string(at));
    }
  }
}

TEST(Decode, InvalidLayoutLeavesOutputUntouched) {
  const std::vector<uint8_t> blob = MustEncode(Leap(8, 16, 32), RealisticState(16, 32, 112));
  std::vector<float> out(512, kPoison);
  EXPECT_EQ(Decode(blob, out.data(), static_cast<Orientation>(5)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(AllEqualTo(out, kPoison));
}

// ---------------------------------------------------------------------------------------------
// Unpack / BaseReadout: the decomposed form the kernels read from.

TEST(Unpack, HoldsTheSpecCodesAndScales) {
  for (auto [dk, dv] : kShapes) {
    const std::vector<float> S = RealisticState(dk, dv, 120);
    for (const BlobSpec& s : AllCodecs(dk, dv)) {
      SCOPED_TRACE(s.ToString());
      const UnpackedBlob u = MustUnpack(MustEncode(s, S));
      EXPECT_EQ(u.spec.ToString(), s.ToString());
      if (!IsIntegerCodec(s.codec)) {
        EXPECT_EQ(u.dense.size(), S.size());
        continue;
      }
      const int q = MaxCode(s.bits);
      ASSERT_EQ(u.codes.size(), S.size());
      int max_code = 0;
      for (int8_t c : u.codes) {
        ASSERT_GE(c, -q);
        ASSERT_LE(c, q);
        max_code = std::max(max_code, std::abs(static_cast<int>(c)));
      }
      EXPECT_EQ(max_code, q) << "absmax scaling uses the full code range";
      ASSERT_EQ(u.row_scale.size(), static_cast<size_t>(dk));
      ASSERT_EQ(u.col_factor.size(), static_cast<size_t>(dv));
      if (!HasRowScales(s)) {
        EXPECT_TRUE(AllEqualTo(u.row_scale, 1.0f));
      }
      if (!HasColScales(s)) {
        EXPECT_TRUE(AllEqualTo(u.col_factor, 1.0f / q));
      }
      EXPECT_EQ(u.kfac.size(), static_cast<size_t>(s.r) * dk);
      EXPECT_EQ(u.vfac.size(), static_cast<size_t>(s.r) * dv);
    }
  }
}

// The stored scales and codes are the ones codec.h documents (the GPU encoder must produce the
// same bytes): int-row s_k = max(row absmax, 2^-96); int-col s_v = max(column absmax, 2^-96);
// leap s_k = max(sqrt(mean_j |E|), 2^-149), s_v = max(max_a |E / s_k|, 2^-149) on the residual
// E = S - sum_h K~_h U~_h^T; code[j][a] = rne(q * ((E / s_k) / s_v)).
TEST(Unpack, ScalesAndCodesFollowTheDocumentedFormulas) {
  for (auto [dk, dv] : kShapes) {
    std::vector<float> S = RealisticState(dk, dv, 125);
    testutil::ScaleRows(S, dk, dv, {2}, 0.0f);  // a zero row: floored scale
    for (int bits : {8, 6, 4}) {
      const float q = static_cast<float>(MaxCode(bits));
      for (const BlobSpec& s : {IntRow(bits, dk, dv), IntCol(bits, dk, dv), Leap(bits, dk, dv),
                                Spec(Codec::kLeap, bits, 0, true, dk, dv),
                                Spec(Codec::kLeap, bits, 2, false, dk, dv)}) {
        SCOPED_TRACE(s.ToString());
        const UnpackedBlob u = MustUnpack(MustEncode(s, S));
        std::vector<float> E = S;
        for (int a = 0; a < dk; ++a) {
          for (int j = 0; j < dv; ++j) {
            float c = 0.0f;
            for (int h = 0; h < s.r; ++h) c += u.kfac[h * dk + a] * u.vfac[h * dv + j];
            E[a * dv + j] = S[a * dv + j] - c;
          }
        }
        std::vector<float> sk(dk, 1.0f), sv(dv, 0.0f);
        for (int a = 0; a < dk; ++a) {
          if (s.codec == Codec::kIntRow) {
            float m = 0.0f;
            for (int j = 0; j < dv; ++j) m = std::max(m, std::fabs(S[a * dv + j]));
            sk[a] = std::max(m, kScaleFloor);
            ASSERT_EQ(u.row_scale[a], sk[a]) << "row " << a;
          } else if (s.smoothing) {
            double sum = 0.0;
            for (int j = 0; j < dv; ++j) sum += std::fabs(E[a * dv + j]);
            sk[a] = std::max(static_cast<float>(std::sqrt(sum / dv)), kScaleFloor);
            ASSERT_NEAR(u.row_scale[a], sk[a], 1e-6 * sk[a]) << "row " << a;
          } else {
            ASSERT_EQ(u.row_scale[a], 1.0f);
          }
        }
        for (int j = 0; j < dv; ++j) {
          if (s.codec == Codec::kIntRow) {
            ASSERT_EQ(u.col_factor[j], 1.0f / q);
            continue;
          }
          float m = 0.0f;
          for (int a = 0; a < dk; ++a) m = std::max(m, std::fabs(E[a * dv + j] / sk[a]));
          sv[j] = std::max(m, kScaleFloor);
          ASSERT_NEAR(u.col_factor[j], sv[j] / q, 1e-6 * sv[j] / q + 1e-44f) << "column " << j;
        }
        for (int a = 0; a < dk; ++a) {
          for (int j = 0; j < dv; ++j) {
            const float x = s.codec == Codec::kIntRow ? q * (S[a * dv + j] / sk[a])
                                                      : q * ((E[a * dv + j] / sk[a]) / sv[j]);
            ASSERT_LE(std::fabs(u.codes[static_cast<size_t>(j) * dk + a] - x), 0.5f + 1e-3f)
                << "code of a " << a << " j " << j << " (stored [dv][dk])";
          }
        }
      }
    }
  }
}

// out = B^T y from codes, scales and compensators equals the dense decoded state's B^T y.
TEST(BaseReadout, MatchesTheDequantizedState) {
  std::mt19937 rng(121);
  std::normal_distribution<float> normal;
  for (auto [dk, dv] : kShapes) {
    const std::vector<float> S = RealisticState(dk, dv, 122);
    std::vector<float> y(dk);
    for (float& v : y) v = normal(rng);
    for (const BlobSpec& s : AllCodecs(dk, dv)) {
      SCOPED_TRACE(s.ToString());
      const UnpackedBlob u = MustUnpack(MustEncode(s, S));
      std::vector<float> D(S.size(), kNaN);
      Dequantize(u, D.data());
      EXPECT_EQ(FirstBitDifference(D, RoundTrip(s, S)), -1);
      std::vector<float> want(dv);
      for (int j = 0; j < dv; ++j) {
        double acc = 0.0;
        for (int a = 0; a < dk; ++a) acc += static_cast<double>(D[a * dv + j]) * y[a];
        want[j] = static_cast<float>(acc);
      }
      std::vector<float> got(dv, kNaN);
      BaseReadout(u, y.data(), got.data());
      EXPECT_LT(RelL2(got, want), 1e-5);
    }
  }
}

}  // namespace
}  // namespace leapcache::reference
