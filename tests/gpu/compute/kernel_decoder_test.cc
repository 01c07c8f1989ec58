// The kernel-backed decoder of dense gets on the device against the CPU reference codec: for GDN
// and KDA, 8-, 6- and 4-bit codes, fp32 and bf16, [K,V] and [V,K], the states it returns for the
// reference's blobs equal the reference decode to within fp32 rounding (bf16: the same codes, or
// another within rounding where the fp32 values straddle a rounding boundary); a damaged blob, one
// with a NaN compensator under valid checksums or one of another format is refused naming it,
// before anything is written.
#include "service/compute/cuda/kernel_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/format/half.h"
#include "gpu/reference/codec.h"

namespace leapcache::compute {
namespace {

constexpr int kDim = 128;

double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(e / n);
}

double Rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / v.size());
}

// The distance between neighbouring bf16 values around x.
float Bf16Step(float x) { return x == 0.0f ? 0.0f : std::ldexp(1.0f, std::ilogb(x) - 7); }

// `n` blobs of `spec` encoded by the reference from Gaussian states with outlier columns.
std::vector<std::vector<uint8_t>> ReferenceBlobs(const BlobSpec& spec, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<float> state(kDim * kDim);
  for (int s = 0; s < n; ++s) {
    for (size_t i = 0; i < state.size(); ++i) {
      state[i] = normal(rng) * ((i % kDim) % 37 == 0 ? 20.0f : 1.0f);
    }
    blobs.push_back(std::move(reference::Encode(spec, state.data(), Orientation::kKV)).value());
  }
  return blobs;
}

struct Decoded {
  absl::Status status;
  std::vector<uint8_t> bytes;
};

Decoded Decode(KernelDecoder& decoder, const BlobSpec& spec, DType dtype, Orientation layout,
               const std::vector<std::vector<uint8_t>>& blobs) {
  const size_t state_bytes = kDim * kDim * (dtype == DType::kBf16 ? 2 : 4);
  Decoded d;
  d.bytes.assign(blobs.size() * state_bytes, 0xFF);  // poison: NaN in both dtypes
  d.status = decoder.Decode(
      spec, dtype, layout, blobs.size(), [&](size_t i) { return std::span(blobs[i]); },
      [](size_t i) { return absl::StrCat("state ", i); }, {d.bytes, Memory::kHost});
  return d;
}

TEST(KernelDecoderTest, StatesMatchTheReferenceDecode) {
  constexpr int kStates = 24;
  auto decoder = std::move(KernelDecoder::Create(0, kStates)).value();
  for (auto [kind, bits] : {std::pair{StateKind::kGdn, 8}, std::pair{StateKind::kKda, 8},
                            std::pair{StateKind::kKda, 6}, std::pair{StateKind::kGdn, 4}}) {
    const BlobSpec spec = BlobSpec::Leap(kind, bits, kDim, kDim);
    ASSERT_TRUE(KernelDecoder::Supports(spec));
    const std::vector<std::vector<uint8_t>> blobs = ReferenceBlobs(spec, kStates, 5);
    for (DType dtype : {DType::kFp32, DType::kBf16}) {
      for (Orientation layout : {Orientation::kKV, Orientation::kVK}) {
        SCOPED_TRACE(absl::StrCat(spec.ToString(), " ", StateKindName(kind),
                                  dtype == DType::kBf16 ? " bf16" : " fp32",
                                  layout == Orientation::kKV ? " KV" : " VK"));
        const Decoded got = Decode(*decoder, spec, dtype, layout, blobs);
        ASSERT_TRUE(got.status.ok()) << got.status;
        size_t neighbours = 0;
        for (int s = 0; s < kStates; ++s) {
          std::vector<float> want(kDim * kDim);
          ASSERT_TRUE(reference::Decode(blobs[s], want.data(), layout).ok());
          std::vector<float> out(kDim * kDim);
          const uint8_t* at = got.bytes.data() + s * out.size() * (dtype == DType::kBf16 ? 2 : 4);
          if (dtype == DType::kFp32) {
            std::memcpy(out.data(), at, out.size() * 4);
            EXPECT_LT(RelErr(out, want), 1e-6) << "state " << s;
            continue;
          }
          // A different code only where the fp32 values differ by rounding: within one bf16
          // step, or (elements near zero, where the sums cancel) within fp32 rounding of the
          // state's scale.
          const float scale = static_cast<float>(Rms(want));
          for (size_t i = 0; i < out.size(); ++i) {
            uint16_t code;
            std::memcpy(&code, at + 2 * i, 2);
            const uint16_t ref = FloatToBf16(want[i]);
            if (code == ref) continue;
            const float diff = std::fabs(Bf16ToFloat(code) - Bf16ToFloat(ref));
            ASSERT_TRUE(diff <= Bf16Step(want[i]) || diff <= 1e-5f * scale)
                << "state " << s << " element " << i << ": " << Bf16ToFloat(code) << " for "
                << want[i];
            ++neighbours;
          }
        }
        // Another code needs an fp32 value within a few ulps of a bf16 rounding boundary.
        EXPECT_LT(neighbours, size_t{kStates} * kDim * kDim / 1000);
      }
    }
  }
}

TEST(KernelDecoderTest, BadBlobsAreRefusedBeforeAnythingIsWritten) {
  auto decoder = std::move(KernelDecoder::Create(0, 8)).value();
  const BlobSpec spec = BlobSpec::Leap(StateKind::kGdn, 8, kDim, kDim);
  std::vector<std::vector<uint8_t>> blobs = ReferenceBlobs(spec, 8, 7);
  blobs[5][kHeaderBytes + 100] ^= 0x01;  // one payload bit: its CRC no longer matches
  Decoded got = Decode(*decoder, spec, DType::kFp32, Orientation::kKV, blobs);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_NE(got.status.message().find("state 5"), std::string::npos) << got.status;
  EXPECT_EQ(got.bytes, std::vector<uint8_t>(got.bytes.size(), 0xFF));

  // A NaN compensator under valid checksums: refused as the reference decoder refuses it.
  blobs = ReferenceBlobs(spec, 8, 7);
  StoreU16(blobs[3].data() + kHeaderBytes + ComputeLayout(spec).comp_offset, 0x7e00);
  SealBlob(spec, blobs[3]);
  got = Decode(*decoder, spec, DType::kFp32, Orientation::kKV, blobs);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_NE(got.status.message().find("state 3: compensator 0 is not finite"), std::string::npos)
      << got.status;
  EXPECT_EQ(got.bytes, std::vector<uint8_t>(got.bytes.size(), 0xFF));

  // A valid blob of another format (KDA's layout) is not the namespace's.
  blobs = ReferenceBlobs(spec, 8, 7);
  blobs[2] = ReferenceBlobs(BlobSpec::Leap(StateKind::kKda, 8, kDim, kDim), 1, 9)[0];
  got = Decode(*decoder, spec, DType::kBf16, Orientation::kVK, blobs);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kDataLoss) << got.status;
  EXPECT_NE(got.status.message().find("state 2"), std::string::npos) << got.status;

  // More states than one launch holds, and formats without kernels, are refused.
  blobs = ReferenceBlobs(spec, 9, 7);
  EXPECT_EQ(Decode(*decoder, spec, DType::kFp32, Orientation::kKV, blobs).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(KernelDecoder::Supports(BlobSpec::Leap(StateKind::kGdn, 8, 64, 64)));
}

}  // namespace
}  // namespace leapcache::compute
