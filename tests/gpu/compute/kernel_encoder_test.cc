// The kernel-backed state encoder of dense puts on the device against the CPU reference codec:
// every blob it seals parses as the namespace's exact format, decodes to the state within the
// reference's own error (the kernels round like the reference up to one-code ties), for GDN and
// KDA, 8-, 6- and 4-bit codes, fp32 and bf16, [K,V] and [V,K], in chunks larger than one launch.
#include "service/compute/cuda/kernel_encoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "gpu/format/half.h"
#include "gpu/reference/codec.h"

namespace leapcache::compute {
namespace {

double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(e / n);
}

TEST(KernelEncoderTest, BlobsMatchTheReferenceCodec) {
  auto encoder = std::move(KernelEncoder::Create(0, 8)).value();
  constexpr int kDim = 128, kStates = 8;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [kind, bits] : {std::pair{StateKind::kGdn, 8}, std::pair{StateKind::kKda, 8},
                            std::pair{StateKind::kGdn, 6}, std::pair{StateKind::kKda, 4}}) {
    const BlobSpec spec = BlobSpec::Leap(kind, bits, kDim, kDim);
    ASSERT_TRUE(KernelEncoder::Supports(spec));
    SCOPED_TRACE(spec.ToString());
    for (DType dtype : {DType::kFp32, DType::kBf16}) {
      for (Orientation layout : {Orientation::kKV, Orientation::kVK}) {
        // States with a few outlier columns, like real ones.
        std::vector<float> states(static_cast<size_t>(kStates) * kDim * kDim);
        for (size_t i = 0; i < states.size(); ++i) {
          states[i] = normal(rng) * ((i % kDim) % 37 == 0 ? 20.0f : 1.0f);
          if (dtype == DType::kBf16) states[i] = RoundToBf16(states[i]);
        }
        std::vector<uint8_t> bytes;
        if (dtype == DType::kFp32) {
          bytes.resize(states.size() * 4);
          std::memcpy(bytes.data(), states.data(), bytes.size());
        } else {
          bytes.resize(states.size() * 2);
          for (size_t i = 0; i < states.size(); ++i) {
            const uint16_t h = FloatToBf16(states[i]);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
          }
        }
        std::vector<std::vector<uint8_t>> blobs;
        ASSERT_TRUE(encoder->Encode(spec, dtype, layout, {bytes, Memory::kHost}, &blobs).ok());
        ASSERT_EQ(blobs.size(), static_cast<size_t>(kStates));
        std::vector<float> got(kDim * kDim), ref_out(kDim * kDim);
        for (int s = 0; s < kStates; ++s) {
          const float* x = states.data() + static_cast<size_t>(s) * kDim * kDim;
          std::vector<float> want(x, x + kDim * kDim);
          leapcache::StatusOr<BlobSpec> parsed = ParseBlob(blobs[s]);
          ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
          EXPECT_EQ(LayoutFingerprint(*parsed), LayoutFingerprint(spec));
          ASSERT_TRUE(reference::Decode(blobs[s], got.data(), layout).ok());
          auto ref = std::move(reference::Encode(spec, want.data(), layout)).value();
          ASSERT_TRUE(reference::Decode(ref, ref_out.data(), layout).ok());
          const double e_gpu = RelErr(got, want), e_cpu = RelErr(ref_out, want);
          EXPECT_LT(e_gpu, 1.05 * e_cpu + 1e-4) << "state " << s;
        }
      }
    }
  }
  // More states than one launch holds, and a spec without kernels, are refused.
  std::vector<uint8_t> too_many(9 * kDim * kDim * 4);
  std::vector<std::vector<uint8_t>> blobs;
  EXPECT_EQ(encoder
                ->Encode(BlobSpec::Leap(StateKind::kGdn, 8), DType::kFp32, Orientation::kKV,
                         {too_many, Memory::kHost}, &blobs)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(KernelEncoder::Supports(BlobSpec::Leap(StateKind::kGdn, 8, 64, 64)));
}

}  // namespace
}  // namespace leapcache::compute
