// CpuLiveStates against the reference trackers driven in process: bit-identical outputs and
// states over several windows (refits included), for GDN and KDA, window and FP32 live forms;
// padding, slot order, Reset, Load and Export.
#include "service/compute/cpu/cpu_live_states.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gpu/reference/codec.h"
#include "tests/unit/compute/live_states_test_util.h"

namespace leapcache::compute {
namespace {

using testing::Fp32Out;
using testing::RandomStep;
using testing::ReferenceTracker;

struct Case {
  StateKind kind;
  Codec codec;
};

class CpuLiveStatesTest : public ::testing::TestWithParam<Case> {
 protected:
  DecodeShape Shape() const {
    DecodeShape s;
    if (GetParam().codec == Codec::kLeap) {
      s.spec = BlobSpec::Leap(GetParam().kind, 8, 64, 64);
    } else {
      s.spec.kind = GetParam().kind;
      s.spec.dk = s.spec.dv = 64;
      s.spec.codec = GetParam().codec;
      s.spec.bits = GetParam().codec == Codec::kFp32 ? 32 : 16;
      s.spec.p = 1;
      s.spec.r = 0;
      s.spec.smoothing = false;
    }
    s.slots = 3;
    s.layers = 2;
    s.heads = 2;
    s.l2norm_qk = true;
    s.scale = 0.125f;
    return s;
  }
};

TEST_P(CpuLiveStatesTest, MatchesReferenceTrackersBitForBit) {
  const DecodeShape s = Shape();
  auto backend = std::move(CpuLiveStates::Create(s)).value();
  // ref[slot][layer][head]
  std::vector<std::unique_ptr<reference::StateTracker>> ref;
  for (int i = 0; i < s.slots * s.layers * s.heads; ++i) ref.push_back(ReferenceTracker(s));
  std::mt19937 rng(7);
  // Batch: slot 2, padding, slot 0 (slot 1 is never stepped and must stay zero).
  const std::vector<int32_t> slots = {2, -1, 0};
  const int batch = static_cast<int>(slots.size());
  const int steps = 2 * s.spec.p + 5;  // crosses two refits for the window form
  std::vector<float> o(static_cast<size_t>(batch) * s.heads * s.spec.dv);
  std::vector<float> want(s.spec.dv);
  for (int t = 0; t < steps; ++t) {
    for (int l = 0; l < s.layers; ++l) {
      RandomStep in(s, batch, rng);
      std::fill(o.begin(), o.end(), std::nanf(""));  // poisoned: every output must be written
      ASSERT_TRUE(backend->Step(in.Step(l, slots), Fp32Out(o)).ok());
      for (int b = 0; b < batch; ++b) {
        for (int h = 0; h < s.heads; ++h) {
          const size_t bh = static_cast<size_t>(b) * s.heads + h;
          const float* got = o.data() + bh * s.spec.dv;
          if (slots[b] < 0) {
            for (int c = 0; c < s.spec.dv; ++c) ASSERT_EQ(got[c], 0.0f);
            continue;
          }
          reference::StepInput x{in.q.data() + bh * s.spec.dk, in.k.data() + bh * s.spec.dk,
                                 in.v.data() + bh * s.spec.dv, in.g.data() + bh * s.gate_size(),
                                 in.beta[bh]};
          ASSERT_TRUE(ref[(slots[b] * s.layers + l) * s.heads + h]->Step(x, want.data()).ok());
          ASSERT_EQ(0, std::memcmp(got, want.data(), want.size() * sizeof(float)))
              << "step " << t << " layer " << l << " batch " << b << " head " << h;
        }
      }
    }
  }
  // Export equals the reference's state encoded (or its boundary blob), and slot 1 is zero.
  std::vector<float> S(static_cast<size_t>(s.spec.dk) * s.spec.dv);
  for (int slot : {0, 1, 2}) {
    auto blobs = std::move(backend->Export(slot)).value();
    ASSERT_EQ(blobs.size(), static_cast<size_t>(s.layers * s.heads));
    for (int i = 0; i < s.layers * s.heads; ++i) {
      const reference::StateTracker& r = *ref[slot * s.layers * s.heads + i];
      r.State(S.data());
      auto want_blob = std::move(reference::Encode(s.spec, S.data(), Orientation::kKV)).value();
      if (s.spec.codec == Codec::kLeap) {
        const auto& w = static_cast<const reference::WindowState&>(r);
        if (w.num_records() == 0) want_blob.assign(w.blob().begin(), w.blob().end());
      }
      EXPECT_EQ(blobs[i], want_blob) << "slot " << slot << " blob " << i;
    }
  }
}

TEST_P(CpuLiveStatesTest, LoadContinuesExactlyFromTheCheckpoint) {
  const DecodeShape s = Shape();
  auto source = std::move(CpuLiveStates::Create(s)).value();
  auto target = std::move(CpuLiveStates::Create(s)).value();
  std::mt19937 rng(11);
  const std::vector<int32_t> one = {1};
  std::vector<float> o1(static_cast<size_t>(s.heads) * s.spec.dv), o2 = o1;
  // Advance the source to a window boundary (p tokens), export, load into another backend's
  // slot 0 while the source keeps slot 1: both must then produce identical outputs.
  for (int t = 0; t < s.spec.p; ++t) {
    for (int l = 0; l < s.layers; ++l) {
      RandomStep in(s, 1, rng);
      ASSERT_TRUE(source->Step(in.Step(l, one), Fp32Out(o1)).ok());
    }
  }
  auto blobs = std::move(source->Export(1)).value();
  std::vector<std::span<const uint8_t>> spans(blobs.begin(), blobs.end());
  ASSERT_TRUE(target->Load(0, spans).ok());
  const std::vector<int32_t> zero = {0};
  for (int t = 0; t < 5; ++t) {
    for (int l = 0; l < s.layers; ++l) {
      RandomStep in(s, 1, rng);
      ASSERT_TRUE(source->Step(in.Step(l, one), Fp32Out(o1)).ok());
      ASSERT_TRUE(target->Step(in.Step(l, zero), Fp32Out(o2)).ok());
      if (s.spec.codec == Codec::kLeap || s.spec.codec == Codec::kFp32) {
        // Exact: the window restarts at its blob; fp32 round-trips exactly.
        ASSERT_EQ(o1, o2) << "step " << t << " layer " << l;
      }
    }
  }
  // Reset brings the slot back to the zero state: its export equals a fresh backend's.
  ASSERT_TRUE(target->Reset(0).ok());
  auto fresh = std::move(CpuLiveStates::Create(s)).value();
  EXPECT_EQ(std::move(target->Export(0)).value(), std::move(fresh->Export(0)).value());
}

TEST_P(CpuLiveStatesTest, BadBlobsLeaveTheSlotUnchanged) {
  const DecodeShape s = Shape();
  auto backend = std::move(CpuLiveStates::Create(s)).value();
  auto before = std::move(backend->Export(0)).value();
  std::vector<std::vector<uint8_t>> blobs = before;
  blobs.back()[blobs.back().size() / 2] ^= 0x40;  // payload CRC no longer matches
  std::vector<std::span<const uint8_t>> spans(blobs.begin(), blobs.end());
  EXPECT_FALSE(backend->Load(0, spans).ok());
  spans.pop_back();
  EXPECT_EQ(backend->Load(0, spans).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::move(backend->Export(0)).value(), before);
}

INSTANTIATE_TEST_SUITE_P(Formats, CpuLiveStatesTest,
                         ::testing::Values(Case{StateKind::kGdn, Codec::kLeap},
                                           Case{StateKind::kKda, Codec::kLeap},
                                           Case{StateKind::kGdn, Codec::kFp32},
                                           Case{StateKind::kKda, Codec::kBf16}),
                         [](const auto& info) {
                           return std::string(info.param.kind == StateKind::kGdn ? "Gdn" : "Kda") +
                                  (info.param.codec == Codec::kLeap   ? "Leap8"
                                   : info.param.codec == Codec::kFp32 ? "Fp32"
                                                                      : "Bf16");
                         });

}  // namespace
}  // namespace leapcache::compute
