// Device tests of attached decode over CUDA IPC: the engine (this process) keeps a step's packed
// inputs and its output in a CUDA buffer; the real leapcache-server (another process, GPU 0,
// compute_backend cuda) maps the buffer and its kernels read the inputs and write the output in
// place. Every token's output is compared bit for bit with the same backend run in this process
// on the same inputs; a non-finite input in the engine's device buffer is refused by name and
// advances nothing.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/format/half.h"
#include "leapcache/data_plane.h"
#include "leapcache/decode_session.h"
#include "service/compute/compute.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr int kHeads = 4;
constexpr int kSlots = 3;
constexpr int kLayers = 2;

struct StepCase {
  StateKind kind;
  client::DType dtype;    // of the inputs and the output
  uint64_t input_offset;  // 0: read in place; 2: staged on the server's device
};

class AttachedStepTest : public ServiceTest, public ::testing::WithParamInterface<StepCase> {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=64MiB", "--page-bytes=64KiB", "--compute-backend=cuda",
            "--gpu-device=0", "--decode-memory-budget=1GiB"};
  }
  void SetUp() override {
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device";
    ASSERT_GT(devices, 0);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ServiceTest::SetUp();
  }
};

// One token's inputs for every request, packed as the data plane carries them.
struct PackedStep {
  std::vector<uint8_t> q, k, v;  // in the case's dtype
  std::vector<float> g, beta;
  std::vector<uint8_t> Packed() const {
    std::vector<uint8_t> out;
    for (const std::vector<uint8_t>* p : {&q, &k, &v}) out.insert(out.end(), p->begin(), p->end());
    const auto* gb = reinterpret_cast<const uint8_t*>(g.data());
    out.insert(out.end(), gb, gb + g.size() * 4);
    const auto* bb = reinterpret_cast<const uint8_t*>(beta.data());
    out.insert(out.end(), bb, bb + beta.size() * 4);
    return out;
  }
};

std::vector<uint8_t> Elements(client::DType dtype, size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> out(n * (dtype == client::DType::kBf16 ? 2 : 4));
  for (size_t i = 0; i < n; ++i) {
    const float f = nd(rng);
    if (dtype == client::DType::kBf16) {
      const uint16_t w = FloatToBf16(f);
      std::memcpy(out.data() + 2 * i, &w, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &f, 4);
    }
  }
  return out;
}

PackedStep RandomPacked(StateKind kind, client::DType dtype, size_t batch, std::mt19937& rng) {
  const size_t bh = batch * kHeads;
  PackedStep s;
  s.q = Elements(dtype, bh * 128, rng);
  s.k = Elements(dtype, bh * 128, rng);
  s.v = Elements(dtype, bh * 128, rng);
  std::uniform_real_distribution<float> decay(-0.3f, -0.01f), b(0.1f, 0.9f);
  s.g.resize(bh * (kind == StateKind::kGdn ? 1 : 128));
  for (float& x : s.g) x = decay(rng);
  s.beta.resize(bh);
  for (float& x : s.beta) x = b(rng);
  return s;
}

TEST_P(AttachedStepTest, KernelsStepTheEnginesMappedBufferBitIdenticalToInProcess) {
  const StepCase c = GetParam();
  const DType dtype = c.dtype == client::DType::kBf16 ? DType::kBf16 : DType::kFp32;
  client::NamespaceSpec spec;
  spec.tenant = "t";
  spec.model = {kLayers, kHeads, 128, 128,
                c.kind == StateKind::kGdn ? client::StateKind::kGdn : client::StateKind::kKda};
  spec.format = client::StorageFormat::Leap(8);
  const client::NamespaceInfo ns = Register(spec);
  client::ClientOptions options;
  options.target = server_->target();
  options.max_message_bytes = 64 << 20;
  auto session = client::DecodeSession::Open(options, {ns.id, {}, kSlots, true, 0.0f});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_EQ((*session)->info().backend, "cuda");
  client::EngineIdentity identity;
  identity.name = "attached-step";
  identity.gpu_index = 0;
  client::AttachOptions attach;
  attach.transports = {client::Transport::kCudaIpc};
  auto engine = client::AttachedEngine::Attach(options, identity, attach);
  ASSERT_TRUE(engine.ok()) << engine.status();

  // The same shape in process, on the same backend and device.
  compute::DecodeShape shape;
  shape.spec = BlobSpec::Leap(c.kind, 8, 128, 128);
  shape.slots = kSlots;
  shape.layers = kLayers;
  shape.heads = kHeads;
  shape.l2norm_qk = true;
  shape.scale = 1.0f / std::sqrt(128.0f);
  auto cuda = compute::MakeCompute(compute::Choice::kCuda, 0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  auto local = (*cuda)->OpenLiveStates(shape);
  ASSERT_TRUE(local.ok()) << local.status();

  const std::vector<int32_t> slots = {2, -1, 0};
  const uint64_t in_bytes = client::PackedStepInputBytes((*session)->info(), slots.size(), c.dtype);
  const uint64_t out_bytes = client::StepOutputBytes((*session)->info(), slots.size(), c.dtype);
  const uint64_t out_offset = (c.input_offset + in_bytes + 15) / 16 * 16;
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, out_offset + out_bytes), cudaSuccess);
  auto* bytes = static_cast<uint8_t*>(buffer);
  auto id = (*engine)->RegisterBuffer(buffer, out_offset + out_bytes, client::MemoryKind::kCuda);
  ASSERT_TRUE(id.ok()) << id.status();
  client::DecodeBufferStep step;
  step.slot = slots;
  step.dtype = c.dtype;
  step.out_dtype = c.dtype;
  step.buffer = *id;
  step.input_offset = c.input_offset;
  step.output_offset = out_offset;

  std::mt19937 rng(c.kind == StateKind::kGdn ? 71 : 72);
  std::vector<uint8_t> want(out_bytes), got(out_bytes);
  // Past two window lengths, so refits run on states stepped from the mapped buffer.
  const int tokens = 2 * shape.spec.p + 3;
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < kLayers; ++l) {
      const PackedStep in = RandomPacked(c.kind, c.dtype, slots.size(), rng);
      const std::vector<uint8_t> packed = in.Packed();
      ASSERT_EQ(packed.size(), in_bytes);
      ASSERT_EQ(
          cudaMemcpy(bytes + c.input_offset, packed.data(), packed.size(), cudaMemcpyHostToDevice),
          cudaSuccess);
      ASSERT_EQ(cudaMemset(bytes + out_offset, 0xFF, out_bytes), cudaSuccess);  // poisoned
      step.layer = l;
      if (t == 5 && l == 1) {
        // A NaN in k, in the engine's device memory: refused by name, nothing advanced.
        std::vector<uint8_t> bad = packed;
        const size_t e = c.dtype == client::DType::kBf16 ? 2 : 4;
        const size_t at = in.q.size() / e + 37;  // k[37]
        const uint32_t nan_bits = e == 2 ? 0x7FC0u : 0x7FC00000u;
        std::memcpy(bad.data() + at * e, &nan_bits, e);
        ASSERT_EQ(
            cudaMemcpy(bytes + c.input_offset, bad.data(), bad.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
        const absl::Status refused = (*session)->StepInBuffer(**engine, step);
        EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
        EXPECT_NE(refused.message().find("k[37] is not finite"), std::string::npos) << refused;
        ASSERT_EQ(cudaMemcpy(bytes + c.input_offset, packed.data(), packed.size(),
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
      const absl::Status st = (*session)->StepInBuffer(**engine, step);
      ASSERT_TRUE(st.ok()) << "token " << t << " layer " << l << ": " << st;
      // The engine is on the server's host: its steps go through the shared-memory channel.
      ASSERT_TRUE((*session)->stepping_through_channel());
      ASSERT_EQ(cudaMemcpy(got.data(), bytes + out_offset, out_bytes, cudaMemcpyDeviceToHost),
                cudaSuccess);
      const size_t e = c.dtype == client::DType::kBf16 ? 2 : 4;
      const compute::LayerStep local_step{l, slots, dtype, in.q, in.k, in.v, in.g, in.beta};
      ASSERT_TRUE((*local)->Step(local_step, {dtype, want}).ok());
      ASSERT_EQ(got.size() % e, 0u);
      ASSERT_EQ(got, want) << "token " << t << " layer " << l;
    }
  }
  // The live states agree too: each slot commits the checkpoint the in-process states export.
  for (int slot : {0, 2}) {
    client::BlockHash hash{};
    hash.fill(static_cast<uint8_t>(slot + 1));
    ASSERT_TRUE((*session)->Commit(slot, hash, {tokens * 16, tokens}).ok());
    absl::StatusOr<client::Checkpoint> stored = client_->Get({ns.id, hash, {}, std::nullopt});
    ASSERT_TRUE(stored.ok()) << stored.status();
    absl::StatusOr<std::vector<std::vector<uint8_t>>> blobs = (*local)->Export(slot);
    ASSERT_TRUE(blobs.ok()) << blobs.status();
    std::vector<uint8_t> exported;
    for (const std::vector<uint8_t>& blob : *blobs) {
      exported.insert(exported.end(), blob.begin(), blob.end());
    }
    EXPECT_EQ(stored->bytes, exported) << "slot " << slot;
  }
  ASSERT_TRUE((*engine)->ReleaseBuffer(*id).ok());
  cudaFree(buffer);
}

INSTANTIATE_TEST_SUITE_P(Cases, AttachedStepTest,
                         ::testing::Values(StepCase{StateKind::kGdn, client::DType::kBf16, 0},
                                           StepCase{StateKind::kKda, client::DType::kBf16, 0},
                                           StepCase{StateKind::kGdn, client::DType::kFp32, 0},
                                           StepCase{StateKind::kKda, client::DType::kBf16, 2}),
                         [](const auto& info) {
                           return std::string(info.param.kind == StateKind::kGdn ? "Gdn" : "Kda") +
                                  (info.param.dtype == client::DType::kBf16 ? "Bf16" : "Fp32") +
                                  (info.param.input_offset == 0 ? "InPlace" : "Staged");
                         });

}  // namespace
}  // namespace leapcache::testing
