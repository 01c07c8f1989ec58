// The CUDA attached-decode backend on the device against the CPU backend (the reference), for
// GDN and KDA, window (leap 8-, 6- and 4-bit) and FP32 live forms, over 272 tokens (17 refits) of
// two layers: outputs close to the reference's all along (the kernels round like the reference up
// to one-code ties at refits, which weigh more the coarser the codes), padding rows zero, an
// untouched slot still the zero state, and a slot loaded from an exported checkpoint tracking its
// source bit for bit.
#include "service/compute/cuda/cuda_live_states.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "service/compute/cpu/cpu_live_states.h"
#include "tests/unit/compute/live_states_test_util.h"

namespace leapcache::compute {
namespace {

using testing::Fp32Out;
using testing::RandomStep;

struct Case {
  StateKind kind;
  Codec codec;
  int bits = 8;  // leap: 8, 6 or 4
};

class CudaLiveStatesTest : public ::testing::TestWithParam<Case> {
 protected:
  DecodeShape Shape() const {
    DecodeShape s;
    s.spec = BlobSpec::Leap(GetParam().kind, GetParam().bits, 128, 128);
    if (GetParam().codec == Codec::kFp32) {
      s.spec.codec = Codec::kFp32;
      s.spec.bits = 32;
      s.spec.p = 1;
      s.spec.r = 0;
      s.spec.smoothing = false;
    }
    s.slots = 4;
    s.layers = 2;
    s.heads = 4;
    s.l2norm_qk = true;
    s.scale = 1.0f / std::sqrt(128.0f);
    return s;
  }
};

double RelL2(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(e / std::max(n, 1e-30));
}

TEST_P(CudaLiveStatesTest, TracksTheCpuBackend) {
  const DecodeShape s = Shape();
  absl::StatusOr<std::unique_ptr<CudaLiveStates>> gpu = CudaLiveStates::Create(s, 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = std::move(CpuLiveStates::Create(s)).value();
  std::mt19937 rng(GetParam().kind == StateKind::kGdn ? 1 : 2);
  const std::vector<int32_t> slots = {3, -1, 0, 2};  // slot 1 stays untouched
  const size_t out = slots.size() * s.heads * s.spec.dv;
  std::vector<float> og(out), oc(out);
  double worst = 0;
  const int tokens = 17 * 16;
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < s.layers; ++l) {
      RandomStep in(s, static_cast<int>(slots.size()), rng);
      std::fill(og.begin(), og.end(), std::nanf(""));
      const LayerStep step = in.Step(l, slots);
      ASSERT_TRUE((*gpu)->Step(step, Fp32Out(og)).ok());
      ASSERT_TRUE(cpu->Step(step, Fp32Out(oc)).ok());
      for (size_t i = s.heads * s.spec.dv; i < 2 * s.heads * s.spec.dv; ++i) ASSERT_EQ(og[i], 0.0f);
      const double e = RelL2(og, oc);
      ASSERT_TRUE(std::isfinite(e)) << "token " << t;
      worst = std::max(worst, e);
    }
  }
  std::printf("worst per-step output rel. L2, CUDA vs CPU backend over %d tokens: %.3g\n", tokens,
              worst);
  // Twice the format's own readout error at each width (README's accuracy table: about 5e-3,
  // 1.2e-2 and 3e-2 at 8, 6 and 4 bits).
  const int bits = GetParam().codec == Codec::kLeap ? GetParam().bits : 8;
  EXPECT_LT(worst, bits == 8 ? 1e-2 : bits == 6 ? 2.5e-2 : 6e-2);
  // The untouched slot exports exactly the zero state's blobs.
  EXPECT_EQ(std::move((*gpu)->Export(1)).value(), std::move(cpu->Export(1)).value());

  // Slot 0 sits at a window boundary (272 tokens): its export loaded into slot 1 makes slot 1
  // track slot 0 bit for bit.
  auto blobs = std::move((*gpu)->Export(0)).value();
  std::vector<std::span<const uint8_t>> spans(blobs.begin(), blobs.end());
  ASSERT_TRUE((*gpu)->Load(1, spans).ok());
  const std::vector<int32_t> pair = {0, 1};
  std::vector<float> o2(2 * s.heads * s.spec.dv);
  for (int t = 0; t < 20; ++t) {
    for (int l = 0; l < s.layers; ++l) {
      RandomStep one(s, 1, rng);
      RandomStep in = one;
      for (auto* v : {&in.q, &in.k, &in.v, &in.g, &in.beta}) {
        const size_t n = v->size();
        v->resize(2 * n);
        std::copy(v->begin(), v->begin() + n, v->begin() + n);
      }
      ASSERT_TRUE((*gpu)->Step(in.Step(l, pair), Fp32Out(o2)).ok());
      const size_t half = o2.size() / 2;
      ASSERT_TRUE(std::equal(o2.begin(), o2.begin() + half, o2.begin() + half))
          << "token " << t << " layer " << l;
    }
  }
}

// One process driving every GPU of the machine (a service on one GPU, an engine's reference on
// another): each device's backend gives the same outputs bit for bit across refits. Kernel
// attributes are per device, so this fails if a launcher sets them only on the first.
TEST_P(CudaLiveStatesTest, EveryDeviceOfOneProcessAgrees) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "one GPU: nothing to compare across devices";
  const DecodeShape s = Shape();
  std::vector<std::unique_ptr<CudaLiveStates>> backends;
  for (int d = 0; d < devices; ++d) {
    absl::StatusOr<std::unique_ptr<CudaLiveStates>> b = CudaLiveStates::Create(s, d);
    ASSERT_TRUE(b.ok()) << "device " << d << ": " << b.status();
    backends.push_back(*std::move(b));
  }
  std::mt19937 rng(9);
  const std::vector<int32_t> slots = {0, 2};
  std::vector<float> first(slots.size() * s.heads * s.spec.dv), other = first;
  for (int t = 0; t < 40; ++t) {
    for (int l = 0; l < s.layers; ++l) {
      RandomStep in(s, static_cast<int>(slots.size()), rng);
      ASSERT_TRUE(backends[0]->Step(in.Step(l, slots), Fp32Out(first)).ok());
      for (int d = 1; d < devices; ++d) {
        absl::Status st = backends[d]->Step(in.Step(l, slots), Fp32Out(other));
        ASSERT_TRUE(st.ok()) << "device " << d << ", token " << t << ": " << st;
        ASSERT_EQ(first, other) << "device " << d << ", token " << t << ", layer " << l;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, CudaLiveStatesTest,
    ::testing::Values(Case{StateKind::kGdn, Codec::kLeap}, Case{StateKind::kKda, Codec::kLeap},
                      Case{StateKind::kGdn, Codec::kLeap, 6},
                      Case{StateKind::kKda, Codec::kLeap, 4}, Case{StateKind::kGdn, Codec::kFp32},
                      Case{StateKind::kKda, Codec::kFp32}),
    [](const auto& info) {
      return std::string(info.param.kind == StateKind::kGdn ? "Gdn" : "Kda") +
             (info.param.codec == Codec::kLeap ? "Leap" + std::to_string(info.param.bits)
                                               : std::string("Fp32"));
    });

}  // namespace
}  // namespace leapcache::compute
