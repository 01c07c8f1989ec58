// Device tests of the data plane: the engine (this process) owns CUDA buffers; the real
// leapcache-server (another process, its CUDA context on GPU 0) writes checkpoints into them and
// reads puts from them over CUDA IPC (the service maps the engine's exported buffers), over UCX
// (staged through pinned host memory when UCX has no CUDA transport, direct otherwise), over
// NCCL (send/recv between the server's GPU and the engine's; needs the engine on another GPU,
// so it runs only with LEAPCACHE_TEST_ENGINE_GPU=1 on a machine with two) and over the inline
// fallback. Every byte is checked after copying the device buffer back. Dense gets decoded by the
// server's decode kernel are checked against the reference decode.
#include <cuda_runtime_api.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/loopback_http.h"
#include "gpu/format/crc32c.h"
#include "gpu/format/format.h"
#include "gpu/format/half.h"
#include "leapcache/data_plane.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"
#include "transport/cuda_ipc/cuda_ipc_key.h"
#include "transport/device/device_memory.h"

namespace leapcache::testing {
namespace {

using client::DenseEncoding;
using client::DType;
using client::Layout;
using client::MemoryKind;
using client::Transport;

// A device allocation, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr_, 0, bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  void* get() const { return ptr_; }
  size_t size() const { return bytes_; }
  void Upload(std::span<const uint8_t> src, size_t offset) {
    ASSERT_EQ(cudaMemcpy(static_cast<uint8_t*>(ptr_) + offset, src.data(), src.size(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<uint8_t> Download(size_t offset, size_t n) const {
    std::vector<uint8_t> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), static_cast<const uint8_t*>(ptr_) + offset, n,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// An engine named `name` on GPU `gpu`, attached to the server at `target` over `transport` only.
absl::StatusOr<std::unique_ptr<client::AttachedEngine>> AttachEngine(const std::string& target,
                                                                     const std::string& name,
                                                                     int gpu, Transport transport) {
  client::ClientOptions options;
  options.target = target;
  client::EngineIdentity identity;
  identity.name = name;
  identity.gpu_index = gpu;
  client::AttachOptions attach;
  attach.transports = {transport};
  return client::AttachedEngine::Attach(options, identity, attach);
}

client::PutTarget Target(uint32_t ns, const client::BlockHash& key, int64_t blocks) {
  return {ns, key, {blocks * 16, blocks}, {}, absl::ZeroDuration()};
}

// The engine's GPU: LEAPCACHE_TEST_ENGINE_GPU (default 0). On a machine with two GPUs, 1 puts
// the engine's buffers on another GPU than the server's CUDA context (device 0): CUDA IPC then
// maps memory of a peer GPU, and UCX stages from it.
int EngineGpu() {
  const char* g = std::getenv("LEAPCACHE_TEST_ENGINE_GPU");
  return g != nullptr ? std::atoi(g) : 0;
}

class DeviceTransferTest : public ServiceTest, public ::testing::WithParamInterface<Transport> {
 protected:
  std::vector<std::string> ServerArgs() const override {
    // The CPU reference encodes dense puts and decodes dense gets, so the stored blobs and the
    // states served are exactly the reference's (DenseGetsDecodedOnTheServersGpu takes the
    // kernels).
    return {"--memory-budget=256MiB", "--page-bytes=64KiB", "--compute-backend=cpu"};
  }
  void SetUp() override {
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess) << "no CUDA device";
    ASSERT_GT(devices, 0);
    ASSERT_TRUE(EngineGpu() >= 0 && EngineGpu() < devices) << "no GPU " << EngineGpu();
    ASSERT_EQ(cudaSetDevice(EngineGpu()), cudaSuccess);
    if (GetParam() == Transport::kNccl && EngineGpu() == 0) {
      GTEST_SKIP() << "NCCL needs the engine on another GPU than the server's GPU 0 "
                      "(LEAPCACHE_TEST_ENGINE_GPU=1 on a machine with two)";
    }
    ServiceTest::SetUp();
  }
  absl::StatusOr<std::unique_ptr<client::AttachedEngine>> Attach() const {
    return AttachEngine(server_->target(), "gpu-engine", EngineGpu(), GetParam());
  }
};

TEST_P(DeviceTransferTest, CompactAndDenseCheckpointsInAndOutOfDeviceMemoryByteExact) {
  // 128 x 128 states: the production head size, several MiB per checkpoint.
  const client::NamespaceSpec spec = SmallNamespace("tenant-gpu", 4, 8, 128);
  const client::NamespaceInfo ns = Register(spec);
  auto engine = Attach();
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->transport(), GetParam());

  const std::vector<float> states = MakeStates(spec, 11);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  const std::span<const uint8_t> dense = AsBytes(states);
  DeviceBuffer src(blobs.size() + dense.size() + 256), dst(dense.size() + 256);
  src.Upload(blobs, 256);
  src.Upload(dense, 256 + blobs.size());
  auto src_id = (*engine)->RegisterBuffer(src.get(), src.size(), MemoryKind::kCuda);
  ASSERT_TRUE(src_id.ok()) << src_id.status();
  auto dst_id = (*engine)->RegisterBuffer(dst.get(), dst.size(), MemoryKind::kCuda);
  ASSERT_TRUE(dst_id.ok()) << dst_id.status();

  ASSERT_TRUE((*engine)
                  ->PutFrom(Target(ns.id, TestHash(1), 1), std::nullopt, *src_id, 256, blobs.size())
                  .ok());
  ASSERT_TRUE((*engine)
                  ->PutFrom(Target(ns.id, TestHash(2), 1), DenseEncoding{DType::kFp32, Layout::kKV},
                            *src_id, 256 + blobs.size(), dense.size())
                  .ok());

  // Both were stored as the reference codec's blobs (the dense one encoded by the service).
  for (int key = 1; key <= 2; ++key) {
    auto got = (*engine)->GetInto({ns.id, TestHash(key), {}, std::nullopt}, *dst_id, 128);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->total_bytes, blobs.size());
    EXPECT_TRUE(dst.Download(128, blobs.size()) == blobs) << "key " << key;
    EXPECT_EQ(dst.Download(0, 128), std::vector<uint8_t>(128, 0)) << "bytes before the offset";
  }
  const std::vector<uint8_t> want_bf16 = ToBf16Bytes(DecodeBlobs(spec, blobs, Layout::kVK));
  auto bf16 = (*engine)->GetInto({ns.id, TestHash(2), {}, DenseEncoding{DType::kBf16, Layout::kVK}},
                                 *dst_id, 0);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_TRUE(dst.Download(0, want_bf16.size()) == want_bf16);

  // What another client reads is the engine's put, byte for byte.
  absl::StatusOr<client::Checkpoint> seen = client_->Get({ns.id, TestHash(1), {}, std::nullopt});
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_TRUE(seen->bytes == blobs);
  EXPECT_EQ(Stats().leases, 0u);
  EXPECT_EQ(Stats().pending_puts, 0u);
}

TEST_P(DeviceTransferTest, HostMemoryDeclaredAsCudaIsRefused) {
  auto engine = Attach();
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<uint8_t> host(4096);
  EXPECT_EQ((*engine)->RegisterBuffer(host.data(), host.size(), MemoryKind::kCuda).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(DeviceTransferTest, CudaIpcSessionsTakeDeviceBuffersOnly) {
  if (GetParam() != Transport::kCudaIpc) GTEST_SKIP() << "cuda_ipc only";
  auto engine = Attach();
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<uint8_t> host(4096);
  EXPECT_EQ((*engine)->RegisterBuffer(host.data(), host.size(), MemoryKind::kHost).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A sub-range of an allocation is exported with its offset: writes land exactly there.
  DeviceBuffer big(1 << 20);
  auto id =
      (*engine)->RegisterBuffer(static_cast<uint8_t*>(big.get()) + 4096, 65536, MemoryKind::kCuda);
  ASSERT_TRUE(id.ok()) << id.status();
  const client::NamespaceSpec spec = SmallNamespace("tenant-ipc", 1, 2, 16);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 5));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(9), 1), blobs).ok());
  auto got = (*engine)->GetInto({ns.id, TestHash(9), {}, std::nullopt}, *id, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(big.Download(4096, blobs.size()) == blobs);
  EXPECT_EQ(big.Download(0, 4096), std::vector<uint8_t>(4096, 0));
  // Past the registered range: refused before any copy.
  EXPECT_EQ(
      (*engine)->GetInto({ns.id, TestHash(9), {}, std::nullopt}, *id, 65536 - 8).status().code(),
      absl::StatusCode::kOutOfRange);
}

// An engine's CUDA IPC key carries an offset and its descriptor a byte count, both the engine's
// word. The service maps the whole allocation and copies in its own device context, so a range
// past the allocation's end would reach the service's own device memory (its GPU tier): such a
// key is refused at RegisterBuffer, with the real handle of a real 1 MiB allocation.
TEST_P(DeviceTransferTest, CudaIpcRangesPastTheAllocationAreRefused) {
  if (GetParam() != Transport::kCudaIpc) GTEST_SKIP() << "cuda_ipc only";
  auto stub = v1::DataPlane::NewStub(
      grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  v1::AttachRequest attach;
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  attach.mutable_identity()->set_name("forged-ipc-engine");
  attach.mutable_identity()->set_host(host);
  attach.mutable_identity()->set_pid(static_cast<uint32_t>(getpid()));
  attach.mutable_identity()->set_gpu_index(EngineGpu());
  absl::StatusOr<std::string> uuid = transport::CudaDeviceUuid(EngineGpu());
  ASSERT_TRUE(uuid.ok()) << uuid.status();
  attach.mutable_identity()->set_gpu_uuid(*uuid);
  v1::TransportOffer* offer = attach.add_offers();
  offer->set_kind(v1::TRANSPORT_KIND_CUDA_IPC);
  offer->set_cuda_memory(true);
  v1::AttachResponse attached;
  {
    grpc::ClientContext ctx;
    const grpc::Status st = stub->Attach(&ctx, attach, &attached);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(attached.transport(), v1::TRANSPORT_KIND_CUDA_IPC);
  }
  constexpr size_t kAllocation = 1 << 20;
  DeviceBuffer buffer(kAllocation);
  cudaIpcMemHandle_t handle;
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, buffer.get()), cudaSuccess);
  auto register_range = [&](uint64_t offset, uint64_t bytes) {
    transport::CudaIpcKey key;
    std::memcpy(key.handle.data(), &handle, sizeof(handle));
    key.offset = offset;
    v1::RegisterBufferRequest req;
    req.set_session_id(attached.session_id());
    v1::BufferDescriptor* d = req.mutable_buffer();
    d->set_transport(v1::TRANSPORT_KIND_CUDA_IPC);
    d->set_memory(v1::MEMORY_KIND_CUDA);
    d->set_address(reinterpret_cast<uint64_t>(buffer.get()) + offset);
    d->set_bytes(bytes);
    d->set_remote_key(transport::SerializeCudaIpcKey(key));
    v1::RegisterBufferResponse response;
    grpc::ClientContext ctx;
    return stub->RegisterBuffer(&ctx, req, &response);
  };
  // The whole allocation and its last byte are its own.
  EXPECT_TRUE(register_range(0, kAllocation).ok());
  EXPECT_TRUE(register_range(kAllocation - 1, 1).ok());
  // One byte past, far past, and an offset whose sum with the byte count wraps around.
  for (const auto& [offset, bytes] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, kAllocation + 1},
           {kAllocation - 4096, 65536},
           {kAllocation, 1},
           {64ull << 30, 4096},
           {UINT64_MAX - 10, 4096}}) {
    const grpc::Status st = register_range(offset, bytes);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << offset << " +" << bytes << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("leaves"), std::string::npos) << st.error_message();
  }
}

// The server's own choice of dense-get decoder on a GPU: the decode kernel. Both ways to read a
// dense checkpoint (StateCache's messages and an attached engine's CUDA IPC buffer) serve the
// same bytes, and they are the reference decode's bf16 codes, or others within rounding where the
// fp32 values straddle a rounding boundary (the kernel's fp32 arithmetic runs in another order).
class KernelDecodeTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=256MiB", "--page-bytes=64KiB", "--compute-backend=cuda"};
  }
};

TEST_F(KernelDecodeTest, DenseGetsDecodedOnTheServersGpu) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-kernel-decode", 4, 8, 128);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 13));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(3), 1), blobs).ok());
  const DenseEncoding bf16_vk{DType::kBf16, Layout::kVK};
  absl::StatusOr<client::Checkpoint> inline_get = client_->Get({ns.id, TestHash(3), {}, bf16_vk});
  ASSERT_TRUE(inline_get.ok()) << inline_get.status();
  const std::vector<uint8_t> want = ToBf16Bytes(DecodeBlobs(spec, blobs, Layout::kVK));
  ASSERT_EQ(inline_get->bytes.size(), want.size());
  // Codes differ only where the fp32 values straddle a rounding boundary: by one bf16 step, or
  // by fp32 rounding of the states' scale for elements near zero (where the sums cancel).
  const std::vector<float> ref_fp32 = DecodeBlobs(spec, blobs, Layout::kVK);
  double scale = 0;
  for (float x : ref_fp32) scale += double(x) * x;
  scale = std::sqrt(scale / ref_fp32.size());
  size_t differ = 0;
  for (size_t i = 0; i < ref_fp32.size(); ++i) {
    const uint16_t got = inline_get->bytes[2 * i] | inline_get->bytes[2 * i + 1] << 8;
    const uint16_t ref = want[2 * i] | want[2 * i + 1] << 8;
    if (got == ref) continue;
    const float diff = std::fabs(Bf16ToFloat(got) - Bf16ToFloat(ref));
    const float step = std::ldexp(1.0f, std::ilogb(ref_fp32[i]) - 7);
    ASSERT_TRUE(diff <= step || diff <= 1e-5 * scale) << "element " << i;
    ++differ;
  }
  EXPECT_LT(differ, ref_fp32.size() / 1000);

  ASSERT_EQ(cudaSetDevice(EngineGpu()), cudaSuccess);
  auto engine = AttachEngine(server_->target(), "kernel-decode-engine", EngineGpu(), Transport::kCudaIpc);
  ASSERT_TRUE(engine.ok()) << engine.status();
  DeviceBuffer dst(want.size());
  ASSERT_EQ(cudaMemset(dst.get(), 0xFF, dst.size()), cudaSuccess);  // poison
  auto id = (*engine)->RegisterBuffer(dst.get(), dst.size(), MemoryKind::kCuda);
  ASSERT_TRUE(id.ok()) << id.status();
  auto got = (*engine)->GetInto({ns.id, TestHash(3), {}, bf16_vk}, *id, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(dst.Download(0, want.size()) == inline_get->bytes);
  EXPECT_EQ(Stats().leases, 0u);
}

// A server whose checkpoints sit in its GPU tier on device 0: CUDA IPC gets of compact
// checkpoints are copied device to device from the tier into the engine's buffer (one kernel
// launch, no host staging; across GPUs with LEAPCACHE_TEST_ENGINE_GPU=1), NCCL gets gathered on
// the device and sent (engine on GPU 1 only); the bytes and the CRC the client checks them
// against are exact, for whole checkpoints and head ranges, at any offset. Dense gets of the
// same checkpoints still decode.
class GpuTierTransferTest : public ServiceTest, public ::testing::WithParamInterface<Transport> {
 protected:
  void SetUp() override {
    if (GetParam() == Transport::kNccl && EngineGpu() == 0) {
      GTEST_SKIP() << "NCCL needs the engine on another GPU than the server's GPU 0";
    }
    ServiceTest::SetUp();
  }
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=256MiB", "--page-bytes=64KiB", "--gpu-memory-budget=512MiB",
            "--gpu-device=0", "--compute-backend=cpu"};
  }
};

TEST_P(GpuTierTransferTest, GetsFromTheGpuTierByteExact) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-gpu-tier", 4, 8, 128);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<float> states = MakeStates(spec, 21);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(4), 1), blobs).ok());

  ASSERT_EQ(cudaSetDevice(EngineGpu()), cudaSuccess);
  auto engine = AttachEngine(server_->target(), "gpu-tier-engine", EngineGpu(), GetParam());
  ASSERT_TRUE(engine.ok()) << engine.status();
  DeviceBuffer dst(blobs.size() * 2 + 4096);
  ASSERT_EQ(cudaMemset(dst.get(), 0xA5, dst.size()), cudaSuccess);  // poison
  auto id = (*engine)->RegisterBuffer(dst.get(), dst.size(), MemoryKind::kCuda);
  ASSERT_TRUE(id.ok()) << id.status();

  for (uint64_t offset : {uint64_t{0}, uint64_t{4096 + 7}}) {
    auto got = (*engine)->GetInto({ns.id, TestHash(4), {}, std::nullopt}, *id, offset);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->total_bytes, blobs.size());
    EXPECT_TRUE(dst.Download(offset, blobs.size()) == blobs) << "offset " << offset;
  }
  EXPECT_EQ(dst.Download(blobs.size() + 4096 + 7, 64), std::vector<uint8_t>(64, 0xA5))
      << "nothing past the checkpoint";
  // Heads 2..5 of every layer.
  std::vector<uint8_t> want;
  const size_t blob = blobs.size() / (4 * 8);
  for (int l = 0; l < 4; ++l) {
    want.insert(want.end(), blobs.begin() + (l * 8 + 2) * blob, blobs.begin() + (l * 8 + 6) * blob);
  }
  auto part = (*engine)->GetInto({ns.id, TestHash(4), {2, 6}, std::nullopt}, *id, 64);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_TRUE(dst.Download(64, want.size()) == want);
  // A dense get of the same checkpoint goes through the host and decodes.
  const std::vector<uint8_t> want_bf16 = ToBf16Bytes(DecodeBlobs(spec, blobs, Layout::kKV));
  auto dense = (*engine)->GetInto(
      {ns.id, TestHash(4), {}, DenseEncoding{DType::kBf16, Layout::kKV}}, *id, 0);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_TRUE(dst.Download(0, want_bf16.size()) == want_bf16);
  EXPECT_EQ(Stats().leases, 0u);
}

// A compact put from the engine's device buffer into the GPU tier of the server's device goes
// device to device (CUDA IPC maps the engine's buffer; the blobs are copied into the reserved
// pages in one batch and the commit checks them there), at any offset of the buffer: every byte
// comes back, a blob with a bad value under a valid checksum is refused as the host's checks
// refuse it and nothing becomes visible, and the metrics count the device-to-device puts.
TEST_P(GpuTierTransferTest, CompactPutsFromEngineMemoryGoDeviceToDevice) {
  if (GetParam() != Transport::kCudaIpc) GTEST_SKIP() << "device-to-device puts are CUDA IPC's";
  const client::NamespaceSpec spec = SmallNamespace("tenant-gpu-put", 4, 8, 128);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 23));
  ASSERT_EQ(cudaSetDevice(EngineGpu()), cudaSuccess);
  auto engine = AttachEngine(server_->target(), "gpu-put-engine", EngineGpu(), GetParam());
  ASSERT_TRUE(engine.ok()) << engine.status();
  constexpr size_t kAt = 4096 + 3;
  DeviceBuffer buffer(kAt + blobs.size());
  buffer.Upload(blobs, kAt);
  auto id = (*engine)->RegisterBuffer(buffer.get(), buffer.size(), MemoryKind::kCuda);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(
      (*engine)->PutFrom(Target(ns.id, TestHash(6), 1), std::nullopt, *id, kAt, blobs.size()).ok());
  auto got = client_->Get({ns.id, TestHash(6), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);

  // A row scale of unit 9 made NaN, the blob resealed: only the value is wrong.
  std::vector<uint8_t> bad = blobs;
  const BlobSpec format = ToBlobSpec(spec);
  const size_t blob = ComputeLayout(format).blob_bytes();
  const size_t scale = kHeaderBytes + ComputeLayout(format).row_scale_offset + 4 * 5;
  const uint32_t nan = 0x7FC00000u;
  std::memcpy(bad.data() + 9 * blob + scale, &nan, 4);
  SealBlob(format, std::span<uint8_t>(bad.data() + 9 * blob, blob));
  buffer.Upload(bad, kAt);
  const absl::Status refused =
      (*engine)->PutFrom(Target(ns.id, TestHash(7), 1), std::nullopt, *id, kAt, bad.size());
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("blob (layer 1, head 1): row scale 5 is not finite"),
            std::string::npos)
      << refused;
  EXPECT_EQ(client_->Get({ns.id, TestHash(7), {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Stats().pending_puts, 0u);

  if (EngineGpu() == 0) {
    absl::StatusOr<base::HttpResponse> r = base::HttpGet(server_->metrics_port(), "/metrics");
    ASSERT_TRUE(r.ok()) << r.status();
    const std::string series = "leapcache_data_plane_device_transfers_total{op=\"put\"} ";
    const size_t at = r->body.find(series);
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(std::stod(r->body.substr(at + series.size(), 32)), 1.0);  // the refused put: none
  }
}

// A server that keeps checkpoints in its GPU tier and decodes with its kernels: a dense get into
// an engine buffer that CUDA IPC maps on the same device is decoded there, the kernel reading
// each stored blob where it lies and writing the state into the engine's buffer, the side states
// copied beside them and the CRC computed over what was written, where it lies (the client takes
// it as the landed bytes' check); no byte goes through the host. The bytes equal the staged kernel
// path's (the inline get, and an engine buffer at an offset the kernels cannot write in place) bit
// for bit, for whole checkpoints, layer ranges and head ranges, bf16 and fp32, both layouts; a
// namespace whose stored units are not aligned for the kernel takes the staged path with the same
// result. The metrics count the in-place gets only.
class GpuTierKernelDecodeTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=256MiB", "--page-bytes=64KiB", "--gpu-memory-budget=512MiB",
            "--gpu-device=0", "--compute-backend=cuda"};
  }
  double DeviceGets() {
    absl::StatusOr<base::HttpResponse> r = base::HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return -1;
    const std::string series = "leapcache_data_plane_device_transfers_total{op=\"get\"} ";
    const size_t at = r->body.find(series);
    return at == std::string::npos ? 0.0 : std::stod(r->body.substr(at + series.size(), 32));
  }
};

// Side states of `units` units: finite bf16 conv elements (conv_bytes), then random extra bytes.
std::vector<uint8_t> MakeSideStates(size_t units, size_t side_bytes, size_t conv_bytes,
                                    uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<uint8_t> out(units * side_bytes);
  for (size_t u = 0; u < units; ++u) {
    uint8_t* side = out.data() + u * side_bytes;
    for (size_t i = 0; i < conv_bytes; i += 2) {
      const float x = normal(rng);
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      const uint16_t bf16 = static_cast<uint16_t>(bits >> 16);
      std::memcpy(side + i, &bf16, 2);
    }
    for (size_t i = conv_bytes; i < side_bytes; ++i) side[i] = static_cast<uint8_t>(rng());
  }
  return out;
}

TEST_F(GpuTierKernelDecodeTest, DenseGetsDecodeIntoTheEngineBufferWhereTheBlobsLie) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto engine = AttachEngine(server_->target(), "in-place-decode-engine", 0, Transport::kCudaIpc);
  ASSERT_TRUE(engine.ok()) << engine.status();
  // extra 0: units of 19,520 + 2,304 bytes, 16-byte aligned in the tier (in place); extra 5:
  // units that are not (staged).
  for (int extra : {0, 5}) {
    SCOPED_TRACE("extra bytes " + std::to_string(extra));
    client::NamespaceSpec spec =
        SmallNamespace("tenant-in-place-" + std::to_string(extra), 4, 8, 128);
    spec.model.conv = client::ConvShape{3072, 3, client::ConvDType::kBf16};
    spec.model.extra_bytes = extra;
    const client::NamespaceInfo ns = Register(spec);
    const size_t conv_bytes = 3072 / 8 * 3 * 2;
    ASSERT_EQ(ns.side_bytes, conv_bytes + extra);
    const size_t units = 4 * 8;
    const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 31 + extra));
    const std::vector<uint8_t> sides = MakeSideStates(units, ns.side_bytes, conv_bytes, 7 + extra);
    std::vector<uint8_t> compact;
    for (size_t u = 0; u < units; ++u) {
      compact.insert(compact.end(), blobs.begin() + u * ns.blob_bytes,
                     blobs.begin() + (u + 1) * ns.blob_bytes);
      compact.insert(compact.end(), sides.begin() + u * ns.side_bytes,
                     sides.begin() + (u + 1) * ns.side_bytes);
    }
    const client::BlockHash hash = TestHash(40 + extra);
    ASSERT_TRUE(client_->PutCompact(Target(ns.id, hash, 1), compact).ok());

    const size_t max_bytes = units * (128 * 128 * 4 + ns.side_bytes);
    DeviceBuffer dst(max_bytes + 4096);
    auto id = (*engine)->RegisterBuffer(dst.get(), dst.size(), MemoryKind::kCuda);
    ASSERT_TRUE(id.ok()) << id.status();
    struct Case {
      DenseEncoding dense;
      client::HeadRange heads;
      client::LayerRange layers;
    };
    for (const Case& c :
         {Case{{DType::kBf16, Layout::kVK}, {}, {}}, Case{{DType::kFp32, Layout::kKV}, {}, {}},
          Case{{DType::kBf16, Layout::kKV}, {}, {1, 3}},
          Case{{DType::kFp32, Layout::kVK}, {2, 7}, {}}}) {
      const client::GetRequest request{ns.id, hash, c.heads, c.dense, c.layers};
      // The staged kernel path's bytes, through messages.
      absl::StatusOr<client::Checkpoint> want = client_->Get(request);
      ASSERT_TRUE(want.ok()) << want.status();
      // 256: aligned for the kernels (in place when the units are); 258: not (staged).
      for (uint64_t offset : {uint64_t{256}, uint64_t{258}}) {
        SCOPED_TRACE("offset " + std::to_string(offset));
        ASSERT_EQ(cudaMemset(dst.get(), 0xC3, dst.size()), cudaSuccess);  // poison
        const double before = DeviceGets();
        auto got = (*engine)->GetInto(request, *id, offset);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->total_bytes, want->bytes.size());
        const std::vector<uint8_t> landed = dst.Download(offset, want->bytes.size());
        EXPECT_TRUE(landed == want->bytes);
        // In place, the service checksummed the bytes where they landed and the client took
        // its CRC instead of reading them again; either way it is theirs.
        const bool in_place = extra == 0 && offset == 256;
        EXPECT_EQ(got->checked_by_service, in_place);
        EXPECT_EQ(got->crc32c, Crc32c(landed.data(), landed.size()));
        EXPECT_EQ(dst.Download(0, offset), std::vector<uint8_t>(offset, 0xC3));
        EXPECT_EQ(dst.Download(offset + want->bytes.size(), 64), std::vector<uint8_t>(64, 0xC3))
            << "nothing past the checkpoint";
        EXPECT_EQ(DeviceGets() - before, in_place ? 1.0 : 0.0)
            << "in place only where the units and the buffer are aligned for the kernels";
      }
    }
    // The decoded states are the reference's to within the kernel's fp32 rounding.
    auto whole = client_->Get({ns.id, hash, {}, DenseEncoding{DType::kFp32, Layout::kKV}});
    ASSERT_TRUE(whole.ok()) << whole.status();
    const std::vector<float> ref = DecodeBlobs(spec, blobs, Layout::kKV);
    std::vector<float> got_states;
    for (size_t u = 0; u < units; ++u) {
      const uint8_t* unit = whole->bytes.data() + u * (128 * 128 * 4 + ns.side_bytes);
      const std::vector<float> state = FloatsOf({unit, 128 * 128 * 4});
      got_states.insert(got_states.end(), state.begin(), state.end());
      EXPECT_EQ(std::memcmp(unit + 128 * 128 * 4, sides.data() + u * ns.side_bytes, ns.side_bytes),
                0)
          << "side state of unit " << u;
    }
    EXPECT_LT(RelativeError(ref, got_states), 1e-6);
  }
  EXPECT_EQ(Stats().leases, 0u);
}

INSTANTIATE_TEST_SUITE_P(DeviceTransports, GpuTierTransferTest,
                         ::testing::Values(Transport::kCudaIpc, Transport::kNccl),
                         [](const auto& info) {
                           return std::string(info.param == Transport::kNccl ? "nccl"
                                                                             : "cuda_ipc");
                         });

INSTANTIATE_TEST_SUITE_P(Transports, DeviceTransferTest,
                         ::testing::Values(Transport::kCudaIpc, Transport::kUcx, Transport::kNccl,
                                           Transport::kInline),
                         [](const auto& info) {
                           switch (info.param) {
                             case Transport::kCudaIpc:
                               return std::string("cuda_ipc");
                             case Transport::kUcx:
                               return std::string("ucx");
                             case Transport::kNccl:
                               return std::string("nccl");
                             default:
                               return std::string("inline");
                           }
                         });

}  // namespace
}  // namespace leapcache::testing
