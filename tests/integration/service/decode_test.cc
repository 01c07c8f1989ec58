// Attached decode through the real server: an engine opens a decode session, streams 260 tokens
// of bf16 inputs for two linear layers, commits a live state as a checkpoint, and resumes another
// slot from it. Outputs are compared bit for bit with the CPU reference trackers driven in this
// process (the server's CPU backend runs the same code), for GDN and KDA, window and FP32 forms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "gpu/format/half.h"
#include "gpu/reference/per_step.h"
#include "gpu/reference/window.h"
#include "leapcache/data_plane.h"
#include "leapcache/decode_session.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr int kLayers = 2, kTotalHeads = 4, kDim = 128;
constexpr client::HeadRange kHeads{1, 3};  // the session serves heads 1 and 2
constexpr int kHeadsInSession = 2;

class DecodeTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=64MiB", "--page-bytes=128KiB", "--compute-backend=cpu",
            "--decode-memory-budget=256MiB"};
  }

  client::NamespaceInfo RegisterFormat(StateKind kind, client::Codec codec) {
    client::NamespaceSpec spec;
    spec.tenant = "decode";
    spec.model = {kLayers, kTotalHeads, kDim, kDim,
                  kind == StateKind::kGdn ? client::StateKind::kGdn : client::StateKind::kKda};
    spec.format = client::StorageFormat::Leap(8);
    if (codec == client::Codec::kFp32) spec.format = {client::Codec::kFp32, 32, 1, 0, false};
    return Register(spec);
  }

  std::unique_ptr<client::DecodeSession> Open(
      uint32_t ns, int slots, client::StepChannel channel = client::StepChannel::kAuto) {
    client::ClientOptions options;
    options.target = server_->target();
    client::DecodeSessionOptions open{ns, kHeads, slots, true, 0.0f};
    open.step_channel = channel;
    auto s = client::DecodeSession::Open(options, open);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
};

// One layer's token for a batch, as the wire carries it (bf16 q, k, v) and as the reference
// sees it (the same values widened).
struct Token {
  std::vector<uint16_t> q16, k16, v16;
  std::vector<float> q, k, v, g, beta;
  Token(StateKind kind, int batch, std::mt19937& rng) {
    const size_t bh = static_cast<size_t>(batch) * kHeadsInSession;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto bf16 = [&](std::vector<uint16_t>& w, std::vector<float>& f) {
      w.resize(bh * kDim);
      f.resize(bh * kDim);
      for (size_t i = 0; i < w.size(); ++i) {
        w[i] = FloatToBf16(normal(rng));
        f[i] = Bf16ToFloat(w[i]);
      }
    };
    bf16(q16, q);
    bf16(k16, k);
    bf16(v16, v);
    std::uniform_real_distribution<float> gdn(-0.5f, -0.01f), kda(-0.3f, 0.0f), b(0.05f, 0.95f);
    g.resize(kind == StateKind::kGdn ? bh : bh * kDim);
    for (float& x : g) x = kind == StateKind::kGdn ? gdn(rng) : kda(rng);
    beta.resize(bh);
    for (float& x : beta) x = b(rng);
  }
  client::DecodeStep Step(int layer, const std::vector<int32_t>& slot) const {
    auto bytes = [](const std::vector<uint16_t>& w) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(w.data()), w.size() * 2);
    };
    return {layer, slot, client::DType::kBf16, bytes(q16), bytes(k16), bytes(v16),
            g,     beta, client::DType::kFp32};
  }
};

// The FP32 live form's blob spec (the namespace of the FP32 tests stores fp32 blobs).
BlobSpec Fp32Spec(StateKind kind) {
  BlobSpec fp32 = BlobSpec::Leap(kind, 8, kDim, kDim);
  fp32.codec = Codec::kFp32;
  fp32.bits = 32;
  fp32.p = 1;
  fp32.r = 0;
  fp32.smoothing = false;
  return fp32;
}

const reference::StepOptions kStep{true, 1.0f / std::sqrt(static_cast<float>(kDim))};

// The in-process tracker a session slot must match, from the zero state or from S_kv.
std::unique_ptr<reference::StateTracker> Reference(StateKind kind, Codec codec,
                                                   const float* S_kv = nullptr) {
  if (codec == Codec::kLeap) {
    reference::WindowOptions o;
    o.spec = BlobSpec::Leap(kind, 8, kDim, kDim);
    o.step = kStep;
    return std::move(reference::WindowState::Create(o, S_kv)).value();
  }
  return std::move(reference::PerStepState::Create(Fp32Spec(kind), kStep, S_kv)).value();
}

client::BlockHash Hash(uint8_t i) {
  client::BlockHash h{};
  h.fill(0x5A);
  h[0] = i;
  return h;
}

// How a trajectory's steps reach the service: in the step messages (default) or through a
// data-plane buffer.
using Stepper = std::function<absl::Status(client::DecodeSession&, const Token&, int layer,
                                           const std::vector<int32_t>& slots,
                                           std::span<uint8_t> o)>;

absl::Status StepInMessages(client::DecodeSession& session, const Token& token, int layer,
                            const std::vector<int32_t>& slots, std::span<uint8_t> o) {
  return session.Step(token.Step(layer, slots), o);
}

void RunTrajectory(DecodeTest* test, StateKind kind, Codec codec,
                   std::unique_ptr<client::DecodeSession> session, uint32_t ns,
                   client::Client& client, const Stepper& step = StepInMessages) {
  ASSERT_NE(session, nullptr);
  const client::DecodeSessionInfo& info = session->info();
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_EQ(info.layers, kLayers);
  EXPECT_EQ(info.heads.begin, kHeads.begin);
  EXPECT_EQ(info.heads.end, kHeads.end);
  // ref[slot][layer][head]; the batch is slot 2, padding, slot 0. Slot 1 joins later.
  std::vector<std::unique_ptr<reference::StateTracker>> ref;
  for (int i = 0; i < 3 * kLayers * kHeadsInSession; ++i) ref.push_back(Reference(kind, codec));
  auto tracker = [&](int slot, int layer, int head) -> reference::StateTracker& {
    return *ref[(slot * kLayers + layer) * kHeadsInSession + head];
  };
  for (int slot = 0; slot < 3; ++slot) ASSERT_TRUE(session->Reset(slot).ok());
  std::mt19937 rng(kind == StateKind::kGdn ? 21 : 22);
  std::vector<float> want(kDim);

  auto run = [&](int steps, const std::vector<int32_t>& slots) {
    const int batch = static_cast<int>(slots.size());
    std::vector<float> o(static_cast<size_t>(batch) * kHeadsInSession * kDim);
    for (int t = 0; t < steps; ++t) {
      for (int l = 0; l < kLayers; ++l) {
        Token token(kind, batch, rng);
        std::fill(o.begin(), o.end(), std::nanf(""));
        absl::Status st =
            step(*session, token, l, slots,
                 std::span<uint8_t>(reinterpret_cast<uint8_t*>(o.data()), o.size() * 4));
        ASSERT_TRUE(st.ok()) << st;
        const int gate = kind == StateKind::kGdn ? 1 : kDim;
        for (int b = 0; b < batch; ++b) {
          for (int h = 0; h < kHeadsInSession; ++h) {
            const size_t bh = static_cast<size_t>(b) * kHeadsInSession + h;
            const float* got = o.data() + bh * kDim;
            if (slots[b] < 0) {
              for (int c = 0; c < kDim; ++c) ASSERT_EQ(got[c], 0.0f);
              continue;
            }
            reference::StepInput x{token.q.data() + bh * kDim, token.k.data() + bh * kDim,
                                   token.v.data() + bh * kDim, token.g.data() + bh * gate,
                                   token.beta[bh]};
            ASSERT_TRUE(tracker(slots[b], l, h).Step(x, want.data()).ok());
            ASSERT_EQ(0, std::memcmp(got, want.data(), kDim * sizeof(float)))
                << "token " << t << " layer " << l << " slot " << slots[b] << " head " << h;
          }
        }
      }
    }
  };

  run(256, {2, -1, 0});  // 16 full windows: slot 0 sits exactly at a boundary

  // Commit slot 0 as a checkpoint; a compact Get returns exactly the reference's blobs.
  const client::Position at{256 * 1, 1};
  ASSERT_TRUE(session->Commit(0, Hash(1), at).ok());
  EXPECT_EQ(session->Commit(0, Hash(1), at).code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<client::Checkpoint> got = client.Get({ns, Hash(1), kHeads, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<float> S(kDim * kDim);
  std::vector<uint8_t> want_blobs;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeadsInSession; ++h) {
      reference::StateTracker& t = tracker(0, l, h);
      if (codec == Codec::kLeap) {
        auto& w = static_cast<reference::WindowState&>(t);
        ASSERT_EQ(w.num_records(), 0);
        want_blobs.insert(want_blobs.end(), w.blob().begin(), w.blob().end());
      } else {
        t.State(S.data());
        auto blob =
            std::move(reference::Encode(Fp32Spec(kind), S.data(), Orientation::kKV)).value();
        want_blobs.insert(want_blobs.end(), blob.begin(), blob.end());
      }
    }
  }
  EXPECT_EQ(got->bytes, want_blobs);

  // Slot 1 resumes from the checkpoint: from here on it tracks slot 0 exactly.
  absl::StatusOr<client::Position> loaded = session->Load(1, Hash(1));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tokens, at.tokens);
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeadsInSession; ++h) {
      if (codec == Codec::kLeap) {
        auto& w0 = static_cast<reference::WindowState&>(tracker(0, l, h));
        reference::WindowOptions o;
        o.spec = BlobSpec::Leap(kind, 8, kDim, kDim);
        o.step = kStep;
        ref[(1 * kLayers + l) * kHeadsInSession + h] =
            std::move(reference::WindowState::FromSnapshot(o, w0.Snapshot())).value();
      } else {
        tracker(0, l, h).State(S.data());
        ref[(1 * kLayers + l) * kHeadsInSession + h] = Reference(kind, codec, S.data());
      }
    }
  }
  run(6, {1, 0, 2});
  (void)test;
}

TEST_F(DecodeTest, GdnWindowTrajectoryMatchesTheReference) {
  const auto ns = RegisterFormat(StateKind::kGdn, client::Codec::kLeap);
  RunTrajectory(this, StateKind::kGdn, Codec::kLeap, Open(ns.id, 3), ns.id, *client_);
}

TEST_F(DecodeTest, KdaWindowTrajectoryMatchesTheReference) {
  const auto ns = RegisterFormat(StateKind::kKda, client::Codec::kLeap);
  RunTrajectory(this, StateKind::kKda, Codec::kLeap, Open(ns.id, 3), ns.id, *client_);
}

TEST_F(DecodeTest, KdaFp32TrajectoryMatchesTheReference) {
  const auto ns = RegisterFormat(StateKind::kKda, client::Codec::kFp32);
  RunTrajectory(this, StateKind::kKda, Codec::kFp32, Open(ns.id, 3), ns.id, *client_);
}

#ifdef LEAPCACHE_TEST_UCX
client::EngineIdentity Engine(const std::string& name) {
  client::EngineIdentity id;
  id.name = name;
  return id;
}

// The same trajectory with every step's vectors in the engine's registered host buffer, moved by
// the service over UCX (loopback tcp) instead of in the step messages: bit-identical outputs.
// Each step goes through the shared-memory step channel (`through_channel`: the session asked
// for it, and the server is on this host) or the Step stream.
void RunOverDataPlane(DecodeTest* test, ServerProcess& server, client::Client& client,
                      StateKind kind, Codec codec, uint32_t ns,
                      std::unique_ptr<client::DecodeSession> session, bool through_channel) {
  client::ClientOptions options;
  options.target = server.target();
  client::AttachOptions attach;
  attach.transports = {client::Transport::kUcx};
  attach.ucx_transports = "tcp";
  auto engine = client::AttachedEngine::Attach(options, Engine("decode-engine"), attach);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_EQ((*engine)->transport(), client::Transport::kUcx);
  constexpr size_t kMaxBatch = 3;
  ASSERT_NE(session, nullptr);
  const uint64_t in_bytes =
      client::PackedStepInputBytes(session->info(), kMaxBatch, client::DType::kBf16);
  const uint64_t out_bytes =
      client::StepOutputBytes(session->info(), kMaxBatch, client::DType::kFp32);
  // Inputs at an odd offset: the packed layout promises no alignment.
  std::vector<uint8_t> buffer(1 + in_bytes + out_bytes);
  auto id = (*engine)->RegisterBuffer(buffer.data(), buffer.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(id.ok()) << id.status();
  const Stepper over_data_plane = [&](client::DecodeSession& s, const Token& token, int layer,
                                      const std::vector<int32_t>& slots,
                                      std::span<uint8_t> o) -> absl::Status {
    uint8_t* p = buffer.data() + 1;
    auto put = [&p](const void* src, size_t n) {
      std::memcpy(p, src, n);
      p += n;
    };
    put(token.q16.data(), token.q16.size() * 2);
    put(token.k16.data(), token.k16.size() * 2);
    put(token.v16.data(), token.v16.size() * 2);
    put(token.g.data(), token.g.size() * 4);
    put(token.beta.data(), token.beta.size() * 4);
    const uint64_t out_offset = 1 + in_bytes;
    std::memset(buffer.data() + out_offset, 0xFF, o.size());  // poisoned: must be written
    client::DecodeBufferStep step;
    step.layer = layer;
    step.slot = slots;
    step.dtype = client::DType::kBf16;
    step.out_dtype = client::DType::kFp32;
    step.buffer = *id;
    step.input_offset = 1;
    step.output_offset = out_offset;
    if (absl::Status st = s.StepInBuffer(**engine, step); !st.ok()) return st;
    if (s.stepping_through_channel() != through_channel) {
      return absl::InternalError(
          absl::StrCat("the step went through the ", through_channel ? "stream" : "channel"));
    }
    std::memcpy(o.data(), buffer.data() + out_offset, o.size());
    return absl::OkStatus();
  };
  RunTrajectory(test, kind, codec, std::move(session), ns, client, over_data_plane);
}

TEST_F(DecodeTest, GdnWindowTrajectoryOverTheDataPlaneMatchesTheReference) {
  const auto ns = RegisterFormat(StateKind::kGdn, client::Codec::kLeap);
  RunOverDataPlane(this, *server_, *client_, StateKind::kGdn, Codec::kLeap, ns.id, Open(ns.id, 3),
                   /*through_channel=*/true);
}

TEST_F(DecodeTest, GdnWindowTrajectoryOverTheDataPlaneAndTheStepStreamMatchesTheReference) {
  const auto ns = RegisterFormat(StateKind::kGdn, client::Codec::kLeap);
  RunOverDataPlane(this, *server_, *client_, StateKind::kGdn, Codec::kLeap, ns.id,
                   Open(ns.id, 3, client::StepChannel::kStream), /*through_channel=*/false);
}

TEST_F(DecodeTest, KdaWindowTrajectoryOverTheDataPlaneMatchesTheReference) {
  const auto ns = RegisterFormat(StateKind::kKda, client::Codec::kLeap);
  RunOverDataPlane(this, *server_, *client_, StateKind::kKda, Codec::kLeap, ns.id, Open(ns.id, 3),
                   /*through_channel=*/true);
}

TEST_F(DecodeTest, DataPlaneStepsCheckTheirBuffersAndSessions) {
  const auto ns = RegisterFormat(StateKind::kGdn, client::Codec::kLeap);
  auto session = Open(ns.id, 2);
  ASSERT_NE(session, nullptr);
  client::ClientOptions options;
  options.target = server_->target();
  client::AttachOptions attach;
  attach.transports = {client::Transport::kUcx};
  attach.ucx_transports = "tcp";
  auto engine = client::AttachedEngine::Attach(options, Engine("decode-engine"), attach);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> slots = {0, 1};
  const uint64_t in_bytes =
      client::PackedStepInputBytes(session->info(), slots.size(), client::DType::kFp32);
  std::vector<uint8_t> small(in_bytes);  // no room for o after the inputs
  auto id = (*engine)->RegisterBuffer(small.data(), small.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(id.ok()) << id.status();
  client::DecodeBufferStep step;
  step.slot = slots;
  step.buffer = *id;
  step.output_offset = in_bytes;
  EXPECT_EQ(session->StepInBuffer(**engine, step).code(), absl::StatusCode::kOutOfRange);
  step.buffer = *id + 100;
  EXPECT_EQ(session->StepInBuffer(**engine, step).code(), absl::StatusCode::kNotFound);
  // The inline transport has no buffers for the service to reach.
  attach.transports = {client::Transport::kInline};
  auto inline_engine = client::AttachedEngine::Attach(options, Engine("inline"), attach);
  ASSERT_TRUE(inline_engine.ok()) << inline_engine.status();
  auto inline_id =
      (*inline_engine)->RegisterBuffer(small.data(), small.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(inline_id.ok());
  step.buffer = *inline_id;
  step.output_offset = 0;
  EXPECT_EQ(session->StepInBuffer(**inline_engine, step).code(),
            absl::StatusCode::kFailedPrecondition);
  // Nothing advanced: a normal step from the zero state still works.
  std::vector<uint8_t> host(in_bytes + client::StepOutputBytes(session->info(), slots.size(),
                                                               client::DType::kFp32));
  auto ok_id = (*engine)->RegisterBuffer(host.data(), host.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(ok_id.ok());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* f = reinterpret_cast<float*>(host.data());
  const size_t bh = slots.size() * kHeadsInSession;
  for (size_t i = 0; i < bh * 3 * kDim; ++i) f[i] = normal(rng);
  for (size_t i = 0; i < bh; ++i) f[bh * 3 * kDim + i] = -0.1f;     // g
  for (size_t i = 0; i < bh; ++i) f[bh * 3 * kDim + bh + i] = 0.5f;  // beta
  step.buffer = *ok_id;
  step.input_offset = 0;
  // An o that overlaps the inputs (which kernels stepping the buffer in place would overwrite
  // as they read them) is refused, and nothing advances.
  step.output_offset = in_bytes - 4;
  const absl::Status overlap = session->StepInBuffer(**engine, step);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument) << overlap;
  EXPECT_NE(overlap.message().find("overlaps its inputs"), std::string::npos) << overlap;
  step.output_offset = in_bytes;
  const absl::Status first = session->StepInBuffer(**engine, step);
  EXPECT_TRUE(first.ok()) << first;

  // A batch longer than the session's slots is refused before anything moves, as in the step
  // messages (each slot at most once, padding included in the count).
  const std::vector<int32_t> padded = {0, -1, -1, 1};
  step.slot = padded;
  EXPECT_EQ(session->StepInBuffer(**engine, step).code(), absl::StatusCode::kOutOfRange)
      << "the client sees the inputs of 4 requests do not fit the 2-request buffer";
  const uint64_t padded_in =
      client::PackedStepInputBytes(session->info(), padded.size(), client::DType::kFp32);
  std::vector<uint8_t> wide(padded_in + client::StepOutputBytes(session->info(), padded.size(),
                                                                client::DType::kFp32));
  auto wide_id = (*engine)->RegisterBuffer(wide.data(), wide.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(wide_id.ok());
  step.buffer = *wide_id;
  step.output_offset = padded_in;
  EXPECT_EQ(session->StepInBuffer(**engine, step).code(), absl::StatusCode::kInvalidArgument);
}
#endif  // LEAPCACHE_TEST_UCX

TEST_F(DecodeTest, BadRequestsGetPreciseStatuses) {
  const auto ns = RegisterFormat(StateKind::kGdn, client::Codec::kLeap);
  client::ClientOptions options;
  options.target = server_->target();
  EXPECT_EQ(client::DecodeSession::Open(options, {ns.id + 7, {}, 1}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client::DecodeSession::Open(options, {ns.id, {3, 9}, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client::DecodeSession::Open(options, {ns.id, {}, 1 << 30}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto session = Open(ns.id, 2);
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->Load(0, Hash(9)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(session->Reset(2).code(), absl::StatusCode::kInvalidArgument);
  std::mt19937 rng(1);
  Token token(StateKind::kGdn, 2, rng);
  std::vector<float> o(2 * kHeadsInSession * kDim);
  auto out = std::span<uint8_t>(reinterpret_cast<uint8_t*>(o.data()), o.size() * 4);
  const std::vector<int32_t> twice = {1, 1};
  EXPECT_EQ(session->Step(token.Step(0, twice), out).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> ok = {1, 0};
  EXPECT_EQ(session->Step(token.Step(kLayers, ok), out).code(), absl::StatusCode::kInvalidArgument);
  token.g[0] = std::nanf("");
  EXPECT_EQ(session->Step(token.Step(0, ok), out).code(), absl::StatusCode::kInvalidArgument);
  token.g[0] = -0.1f;
  // After the refusals the stream reopens and the step runs.
  EXPECT_TRUE(session->Step(token.Step(0, ok), out).ok());
  ASSERT_TRUE(session->Close().ok());
  EXPECT_EQ(session->Reset(0).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace leapcache::testing
