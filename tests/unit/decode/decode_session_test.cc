// DecodeSession and DecodeSessionTable on a real CheckpointStore: input checks that change
// nothing, commit / load through the store, admission against the memory budget, idle reaping,
// and sessions stepping concurrently (this binary also runs under ThreadSanitizer).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gpu/format/half.h"
#include "service/core/host_tier.h"
#include "service/decode/decode_session_table.h"
#include "tests/unit/compute/live_states_test_util.h"
#include "tests/unit/core/test_util.h"

namespace leapcache::decode {
namespace {

using compute::DecodeShape;
using compute::LayerStep;
using compute::LiveStateBytes;
using compute::testing::Fp32Out;
using compute::testing::RandomStep;
using compute::testing::ReferenceTracker;
using core::testing::HashOf;
using core::testing::MakeStore;
using core::testing::PositionAt;
using core::testing::QuietOptions;

class DecodeSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = MakeStore({{"host", 256 * 4096}}, QuietOptions());
    core::NamespaceSpec spec;
    spec.tenant = "t";
    spec.model = {2, 4, 32, 32, StateKind::kKda};
    spec.format = BlobSpec::Leap(StateKind::kKda, 8, 32, 32);
    ns_ = *store_->RegisterNamespace(spec);
  }

  std::unique_ptr<DecodeSessionTable> Table(DecodeOptions o = {}) {
    return std::make_unique<DecodeSessionTable>(o, store_.get(), &compute::CpuCompute());
  }

  std::unique_ptr<core::CheckpointStore> store_;
  core::NamespaceId ns_ = 0;
};

TEST_F(DecodeSessionTest, BadStepsAreRefusedAndChangeNothing) {
  auto table = Table();
  SessionInfo info = *table->Open({ns_, {1, 3}, 4, true, 0.0f});
  EXPECT_EQ(info.shape.heads, 2);
  EXPECT_EQ(info.shape.layers, 2);
  EXPECT_FLOAT_EQ(info.shape.scale, 1.0f / std::sqrt(32.0f));
  auto session = *table->Find(info.id);
  const DecodeShape& s = info.shape;
  std::mt19937 rng(3);
  RandomStep good(s, 2, rng);
  const std::vector<int32_t> slots = {3, 1};
  std::vector<float> o(2 * s.heads * s.spec.dv);

  auto step = [&](int layer, std::vector<int32_t> sl, RandomStep in) {
    return session->Step(in.Step(layer, sl), Fp32Out(o)).code();
  };
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(step(2, slots, good), kBad);    // layer out of range
  EXPECT_EQ(step(0, {3, 4}, good), kBad);   // slot out of range
  EXPECT_EQ(step(0, {1, 1}, good), kBad);   // slot twice
  EXPECT_EQ(step(0, {-2, 1}, good), kBad);  // negative, not padding
  RandomStep short_q = good;
  short_q.q.pop_back();
  EXPECT_EQ(step(0, slots, short_q), kBad);
  RandomStep nan_g = good;
  nan_g.g[5] = std::nanf("");
  EXPECT_EQ(step(0, slots, nan_g), kBad);
  RandomStep inf_v = good;
  inf_v.v.back() = INFINITY;
  EXPECT_EQ(step(0, slots, inf_v), kBad);
  // Non-finite q, k, v are found wherever they sit, in fp32 and in bf16, and named by index.
  {
    RandomStep nan_q = good;
    nan_q.q[37] = -std::nanf("");
    const absl::Status st = session->Step(nan_q.Step(0, slots), Fp32Out(o));
    EXPECT_EQ(st.code(), kBad);
    EXPECT_NE(st.message().find("q[37]"), std::string::npos) << st;
    std::vector<uint16_t> k16(good.k.size());
    for (size_t i = 0; i < k16.size(); ++i) k16[i] = FloatToBf16(good.k[i]);
    std::vector<uint16_t> q16 = k16, v16(good.v.size());
    for (size_t i = 0; i < v16.size(); ++i) v16[i] = FloatToBf16(good.v[i]);
    k16[k16.size() - 1] = FloatToBf16(-INFINITY);
    auto bytes = [](const std::vector<uint16_t>& w) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(w.data()), w.size() * 2);
    };
    const LayerStep bf16{0,          slots,      DType::kBf16, bytes(q16),
                         bytes(k16), bytes(v16), good.g,       good.beta};
    const absl::Status st16 = session->Step(bf16, Fp32Out(o));
    EXPECT_EQ(st16.code(), kBad);
    EXPECT_NE(st16.message().find(absl::StrCat("k[", k16.size() - 1, "]")), std::string::npos)
        << st16;
  }
  // The CPU backend cannot read device memory: vectors said to be there are refused, by name.
  {
    LayerStep on_device = good.Step(0, slots);
    on_device.memory = compute::Memory::kDevice;
    const absl::Status st = session->Step(on_device, Fp32Out(o));
    EXPECT_EQ(st.code(), kBad);
    EXPECT_NE(st.message().find("host memory only"), std::string::npos) << st;
  }
  // known_finite is the benchmark's in-process baseline only: a session always checks.
  {
    RandomStep nan_k = good;
    nan_k.k[3] = std::nanf("");
    LayerStep vouched = nan_k.Step(0, slots);
    vouched.known_finite = true;
    const absl::Status st = session->Step(vouched, Fp32Out(o));
    EXPECT_EQ(st.code(), kBad);
    EXPECT_NE(st.message().find("always checked finite"), std::string::npos) << st;
  }
  EXPECT_EQ(session->Reset(4).code(), kBad);
  EXPECT_EQ(session->Commit(-1, HashOf(1), PositionAt(1)).code(), kBad);

  // Nothing advanced: the next step equals a fresh reference's first step.
  ASSERT_TRUE(session->Step(good.Step(0, slots), Fp32Out(o)).ok());
  std::vector<float> want(s.spec.dv);
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < s.heads; ++h) {
      auto ref = ReferenceTracker(s);
      const size_t bh = static_cast<size_t>(b) * s.heads + h;
      reference::StepInput x{good.q.data() + bh * s.spec.dk, good.k.data() + bh * s.spec.dk,
                             good.v.data() + bh * s.spec.dv, good.g.data() + bh * s.gate_size(),
                             good.beta[bh]};
      ASSERT_TRUE(ref->Step(x, want.data()).ok());
      EXPECT_EQ(0, std::memcmp(o.data() + bh * s.spec.dv, want.data(), want.size() * 4));
    }
  }
  EXPECT_EQ(session->steps(), 1u);
}

TEST_F(DecodeSessionTest, CommitStoresTheLiveStateAndLoadResumesIt) {
  auto table = Table();
  SessionInfo info = *table->Open({ns_, {}, 2, false, 0.25f});
  auto session = *table->Find(info.id);
  const DecodeShape& s = info.shape;
  std::mt19937 rng(5);
  const std::vector<int32_t> slot0 = {0}, slot1 = {1};
  std::vector<float> o(s.heads * s.spec.dv), o2 = o;
  for (int t = 0; t < 21; ++t) {  // mid-window: the commit encodes the open window's state
    for (int l = 0; l < s.layers; ++l) {
      RandomStep in(s, 1, rng);
      ASSERT_TRUE(session->Step(in.Step(l, slot0), Fp32Out(o)).ok());
    }
  }
  ASSERT_TRUE(session->Commit(0, HashOf(9), PositionAt(3)).ok());
  EXPECT_EQ(session->Commit(0, HashOf(9), PositionAt(3)).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(session->Load(1, HashOf(10)).status().code(), absl::StatusCode::kNotFound);

  // Committing again without a step in between stores the same bytes (the export is a pure
  // function of the live state, which the commit left unchanged).
  ASSERT_TRUE(session->Commit(0, HashOf(11), PositionAt(3)).ok());
  auto stored = [&](uint64_t i) {
    auto lease = *store_->Get(ns_, HashOf(i), {0, 4});
    std::vector<uint8_t> bytes(lease.total_bytes());
    EXPECT_TRUE(lease.CopyAll(bytes).ok());
    return bytes;
  };
  EXPECT_EQ(stored(9), stored(11));

  // Loading the checkpoint into slot 1 and stepping both slots with the same inputs: the outputs
  // agree to the encoding's error (the commit quantised an open window), and a second commit of
  // slot 1 at a boundary after the load is exactly its blob again.
  absl::StatusOr<core::Position> at = session->Load(1, HashOf(9));
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(*at, PositionAt(3));
  double err = 0, norm = 0;
  for (int t = 0; t < 3; ++t) {
    for (int l = 0; l < s.layers; ++l) {
      RandomStep in(s, 1, rng);
      ASSERT_TRUE(session->Step(in.Step(l, slot0), Fp32Out(o)).ok());
      ASSERT_TRUE(session->Step(in.Step(l, slot1), Fp32Out(o2)).ok());
      for (size_t i = 0; i < o.size(); ++i) {
        err += (o[i] - o2[i]) * (o[i] - o2[i]);
        norm += o[i] * o[i];
      }
    }
  }
  EXPECT_GT(norm, 0);
  EXPECT_LT(std::sqrt(err / norm), 2e-2);
}

TEST_F(DecodeSessionTest, AdmissionAgainstTheBudgetAndClose) {
  DecodeOptions o;
  DecodeShape probe;
  probe.spec = BlobSpec::Leap(StateKind::kKda, 8, 32, 32);
  probe.slots = 10;
  probe.layers = 2;
  probe.heads = 4;
  o.memory_budget = LiveStateBytes(probe);  // exactly one 10-slot session
  o.max_slots = 16;
  auto table = Table(o);
  EXPECT_EQ(table->Open({ns_, {}, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->Open({ns_, {}, 17}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->Open({ns_ + 1, {}, 1}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Open({ns_, {2, 5}, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->Open({ns_, {}, 1, false, -1.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<SessionInfo> a = table->Open({ns_, {}, 10});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_STREQ(a->backend, "cpu");
  EXPECT_EQ(table->Stats().state_bytes, o.memory_budget);
  EXPECT_EQ(table->Open({ns_, {}, 1}).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(table->Close(a->id).ok());
  EXPECT_EQ(table->Close(a->id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Find(a->id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Stats().state_bytes, 0u);
  EXPECT_TRUE(table->Open({ns_, {}, 10}).ok());
  const TableStats st = table->Stats();
  EXPECT_EQ(st.opened, 2u);
  EXPECT_EQ(st.closed, 1u);
  EXPECT_EQ(st.refused, 1u);  // capacity refusals only; bad requests are not counted
}

TEST_F(DecodeSessionTest, IdleSessionsAreReaped) {
  DecodeOptions o;
  o.idle_timeout = absl::Hours(1);  // the test calls Reap with its own clock
  auto table = Table(o);
  SessionInfo a = *table->Open({ns_, {}, 1});
  SessionInfo b = *table->Open({ns_, {}, 1});
  EXPECT_EQ(table->Reap(absl::Now()), 0u);
  EXPECT_EQ(table->Reap(absl::Now() + absl::Hours(2)), 2u);
  EXPECT_EQ(table->Find(a.id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Find(b.id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Stats().state_bytes, 0u);
  EXPECT_EQ(table->Stats().reaped, 2u);
}

// A Step stream holds its session between steps. Closing or reaping it must end it for that
// holder too: its live states are freed at once (the table stops counting them, so they must
// not stay allocated) and every later call is NOT_FOUND, never a step on freed states.
TEST_F(DecodeSessionTest, AClosedOrReapedSessionHeldElsewhereIsEndedForItsHolder) {
  DecodeOptions o;
  o.idle_timeout = absl::Hours(1);
  auto table = Table(o);
  SessionInfo a = *table->Open({ns_, {}, 2});
  SessionInfo b = *table->Open({ns_, {}, 2});
  std::shared_ptr<DecodeSession> held_a = *table->Find(a.id);
  std::shared_ptr<DecodeSession> held_b = *table->Find(b.id);
  std::mt19937 rng(5);
  const RandomStep step(a.shape, 1, rng);
  const std::vector<int32_t> slot = {0};
  std::vector<float> o_out(a.shape.heads * a.shape.spec.dv);
  ASSERT_TRUE(held_a->Step(step.Step(0, slot), Fp32Out(o_out)).ok());
  ASSERT_TRUE(table->Close(a.id).ok());
  EXPECT_EQ(held_a->Step(step.Step(0, slot), Fp32Out(o_out)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(held_a->Reset(0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(held_a->Load(0, HashOf(1)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(held_a->Commit(0, HashOf(2), PositionAt(1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Reap(absl::Now() + absl::Hours(2)), 1u);
  EXPECT_EQ(held_b->Step(step.Step(0, slot), Fp32Out(o_out)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(table->Stats().state_bytes, 0u);
  // Nothing was committed by the ended session.
  EXPECT_EQ(store_->Stats().checkpoints, 0u);
}

TEST_F(DecodeSessionTest, ATenantPastItsSessionQuotaIsRefusedUntilOneCloses) {
  DecodeOptions o;
  o.max_sessions_per_tenant = 2;
  o.idle_timeout = absl::Hours(1);
  auto table = Table(o);
  core::NamespaceSpec other;
  other.tenant = "u";
  other.model = {2, 4, 32, 32, StateKind::kKda};
  other.format = BlobSpec::Leap(StateKind::kKda, 8, 32, 32);
  const core::NamespaceId theirs = *store_->RegisterNamespace(other);
  SessionInfo a = *table->Open({ns_, {}, 1});
  SessionInfo b = *table->Open({ns_, {}, 1});
  absl::StatusOr<SessionInfo> over = table->Open({ns_, {}, 1});
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("tenant_max_decode_sessions"), std::string::npos);
  EXPECT_TRUE(table->Open({theirs, {}, 1}).ok());  // another tenant's quota is its own
  ASSERT_TRUE(table->Close(a.id).ok());
  EXPECT_TRUE(table->Open({ns_, {}, 1}).ok());
  // Reaped sessions give their place back too.
  EXPECT_EQ(table->Reap(absl::Now() + absl::Hours(2)), 3u);
  EXPECT_TRUE(table->Open({ns_, {}, 1}).ok());
  EXPECT_TRUE(table->Open({ns_, {}, 1}).ok());
  EXPECT_EQ(table->Find(b.id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DecodeSessionTest, BackendChoice) {
  EXPECT_EQ(*compute::ParseChoice("auto"), compute::Choice::kAuto);
  EXPECT_EQ(compute::ParseChoice("gpu").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<compute::Compute>> cuda =
      compute::MakeCompute(compute::Choice::kCuda, 0);
  if (cuda.ok()) {
    DecodeSessionTable cuda_only({}, store_.get(), cuda->get());
    absl::StatusOr<SessionInfo> s = cuda_only.Open({ns_, {}, 1});
    // dk = 32 has no kernels: refused, never silently served by the CPU.
    EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented) << s.status();
  } else {
    // No CUDA build (UNIMPLEMENTED) or no device (UNAVAILABLE): refused at start-up instead.
    EXPECT_TRUE(absl::IsUnimplemented(cuda.status()) || absl::IsUnavailable(cuda.status()))
        << cuda.status();
  }
  absl::StatusOr<std::unique_ptr<compute::Compute>> automatic_compute =
      compute::MakeCompute(compute::Choice::kAuto, 0);
  ASSERT_TRUE(automatic_compute.ok()) << automatic_compute.status();
  DecodeSessionTable automatic({}, store_.get(), automatic_compute->get());
  absl::StatusOr<SessionInfo> a = automatic.Open({ns_, {}, 1});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_STREQ(a->backend, "cpu");
}

TEST_F(DecodeSessionTest, ConcurrentSessionsMatchTheirReferences) {
  DecodeOptions o;
  o.idle_timeout = absl::Milliseconds(200);  // the reaper runs while sessions step
  auto table = Table(o);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      SessionInfo info = *table->Open({ns_, {i % 4, i % 4 + 1}, 1});
      auto session = *table->Find(info.id);
      const DecodeShape& s = info.shape;
      std::vector<std::unique_ptr<reference::StateTracker>> ref;
      for (int l = 0; l < s.layers; ++l) ref.push_back(ReferenceTracker(s));
      std::mt19937 rng(100 + i);
      std::vector<float> o(s.spec.dv), want(s.spec.dv);
      const std::vector<int32_t> slot = {0};
      for (int t = 0; t < 20; ++t) {
        for (int l = 0; l < s.layers; ++l) {
          RandomStep in(s, 1, rng);
          if (!session->Step(in.Step(l, slot), Fp32Out(o)).ok()) ++failures;
          reference::StepInput x{in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta[0]};
          (void)ref[l]->Step(x, want.data());
          if (o != want) ++failures;
        }
        (void)table->Stats();
      }
      if (!table->Close(info.id).ok()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  const TableStats st = table->Stats();
  EXPECT_EQ(st.sessions, 0u);
  EXPECT_EQ(st.steps, uint64_t{kThreads} * 20 * 2);  // closed sessions' steps are kept
  EXPECT_EQ(st.request_steps, st.steps);
}

}  // namespace
}  // namespace leapcache::decode
