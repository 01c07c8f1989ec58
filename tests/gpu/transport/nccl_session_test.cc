// Device tests of NCCL data-plane sessions beyond the byte-exact round trips of
// device_transfer_test.cc: when NCCL is chosen, and what a session does when the engine breaks
// the protocol (a get it never receives, a put it never sends). The engine side here is this
// process driving the raw DataPlane RPCs and its own NcclLink, so it can misbehave on purpose.
// The real leapcache-server runs in another process with its CUDA context on GPU 0.
#include <cuda_runtime_api.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "leapcache/data_plane.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "transport/device/device_memory.h"
#include "transport/nccl/nccl_link.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

using client::Transport;

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

class NcclSessionTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=128MiB", "--page-bytes=64KiB", "--gpu-device=0"};
  }
  void SetUp() override {
    ASSERT_GT(DeviceCount(), 0) << "no CUDA device";
    ServiceTest::SetUp();
  }

  absl::StatusOr<std::unique_ptr<client::AttachedEngine>> Attach(
      int gpu, std::vector<Transport> transports) const {
    client::ClientOptions options;
    options.target = server_->target();
    client::EngineIdentity identity;
    identity.name = "nccl-engine";
    identity.gpu_index = gpu;
    client::AttachOptions attach;
    attach.transports = std::move(transports);
    return client::AttachedEngine::Attach(options, identity, attach);
  }

  std::unique_ptr<v1::DataPlane::Stub> Stub() const {
    return v1::DataPlane::NewStub(
        grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  }

  // An engine on GPU 1 attached over NCCL with raw RPCs: its session, its link and one
  // registered device buffer of `bytes`.
  struct RawEngine {
    uint64_t session = 0;
    uint64_t buffer = 0;
    void* device = nullptr;
    std::unique_ptr<transport::NcclLink> link;
    ~RawEngine() {
      link.reset();
      if (device != nullptr) cudaFree(device);
    }
  };
  void AttachRaw(v1::DataPlane::Stub& stub, size_t bytes, RawEngine* e) {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    absl::StatusOr<std::string> uuid = transport::CudaDeviceUuid(1);
    ASSERT_TRUE(uuid.ok()) << uuid.status();
    v1::AttachRequest q;
    q.mutable_identity()->set_name("raw-nccl-engine");
    q.mutable_identity()->set_pid(static_cast<uint32_t>(getpid()));
    q.mutable_identity()->set_gpu_uuid(*uuid);
    q.mutable_identity()->set_gpu_index(1);
    v1::TransportOffer* offer = q.add_offers();
    offer->set_kind(v1::TRANSPORT_KIND_NCCL);
    offer->set_cuda_memory(true);
    v1::AttachResponse r;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(stub.Attach(&c, q, &r).ok());
    ASSERT_EQ(r.transport(), v1::TRANSPORT_KIND_NCCL);
    e->session = r.session_id();
    absl::StatusOr<std::unique_ptr<transport::NcclLink>> link = transport::NcclLink::Start(
        r.connection_info(), transport::NcclLink::kEngineRank, 1, 0);
    ASSERT_TRUE(link.ok()) << link.status();
    ASSERT_TRUE((*link)->WaitReady(absl::Now() + absl::Seconds(60)).ok());
    e->link = std::move(link).value();
    ASSERT_EQ(cudaMalloc(&e->device, bytes), cudaSuccess);
    v1::RegisterBufferRequest rq;
    rq.set_session_id(e->session);
    rq.mutable_buffer()->set_transport(v1::TRANSPORT_KIND_NCCL);
    rq.mutable_buffer()->set_memory(v1::MEMORY_KIND_CUDA);
    rq.mutable_buffer()->set_address(reinterpret_cast<uint64_t>(e->device));
    rq.mutable_buffer()->set_bytes(bytes);
    v1::RegisterBufferResponse rr;
    grpc::ClientContext rc;
    rc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(stub.RegisterBuffer(&rc, rq, &rr).ok());
    e->buffer = rr.buffer_id();
  }
  // The session's status as Keepalive sees it, once the server has acted on a deadline that
  // passed at the same instant on both sides (bounded wait for NOT_FOUND).
  grpc::StatusCode SessionAfterDeadline(v1::DataPlane::Stub& stub, uint64_t session) const {
    grpc::StatusCode code = grpc::StatusCode::OK;
    for (int i = 0; i < 100; ++i) {
      v1::KeepaliveRequest q;
      q.set_session_id(session);
      v1::KeepaliveResponse r;
      grpc::ClientContext c;
      code = stub.Keepalive(&c, q, &r).error_code();
      if (code == grpc::StatusCode::NOT_FOUND) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return code;
  }
};

TEST_F(NcclSessionTest, NeverChosenForAnEngineOnTheServersGpu) {
  // NCCL cannot put both ranks on one GPU: an engine on GPU 0 gets CUDA IPC, or nothing.
  auto only_nccl = Attach(0, {Transport::kNccl});
  EXPECT_EQ(only_nccl.status().code(), absl::StatusCode::kFailedPrecondition)
      << only_nccl.status();
  auto either = Attach(0, {Transport::kNccl, Transport::kCudaIpc});
  ASSERT_TRUE(either.ok()) << either.status();
  EXPECT_EQ((*either)->transport(), Transport::kCudaIpc);
}

TEST_F(NcclSessionTest, ChosenFirstForAnEngineOnAnotherGpu) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  auto engine = Attach(1, {Transport::kUcx, Transport::kNccl, Transport::kInline});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->transport(), Transport::kNccl);
  std::vector<uint8_t> host(4096);
  EXPECT_EQ((*engine)->RegisterBuffer(host.data(), host.size(), client::MemoryKind::kHost)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // Device memory of another GPU than the link's is refused before the service hears of it.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* on_gpu0 = nullptr;
  ASSERT_EQ(cudaMalloc(&on_gpu0, 4096), cudaSuccess);
  EXPECT_EQ((*engine)->RegisterBuffer(on_gpu0, 4096, client::MemoryKind::kCuda).status().code(),
            absl::StatusCode::kInvalidArgument);
  cudaFree(on_gpu0);
}

TEST_F(NcclSessionTest, GetsTheEngineNeverReceivesEndTheSessionOnceNcclCannotBufferThem) {
  // A send completes once its bytes sit in the receiver's NCCL buffers, so the first gets an
  // engine skips may settle without it; the one that finds those buffers full cannot, and the
  // next call's settle then ends the session at its deadline instead of blocking the service.
  // A real-sized checkpoint (32 x 32 heads of 128 x 128, about 20 MB compact).
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs";
  const client::NamespaceSpec spec = SmallNamespace("tenant-nccl", 32, 32, 128);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 3));
  ASSERT_TRUE(client_->PutCompact({ns.id, TestHash(1), {16, 1}, {}, absl::ZeroDuration()}, blobs)
                  .ok());
  auto stub = Stub();
  RawEngine e;
  ASSERT_NO_FATAL_FAILURE(AttachRaw(*stub, blobs.size(), &e));

  v1::TransferGetRequest q;
  q.set_session_id(e.session);
  q.set_namespace_id(ns.id);
  const auto hash = TestHash(1);  // one array: begin and end of two temporaries never meet
  q.set_hash(std::string(hash.begin(), hash.end()));
  q.mutable_compact();
  q.set_buffer_id(e.buffer);
  constexpr int kMaxGets = 32;  // 640 MB: far more than NCCL buffers between two ranks
  grpc::StatusCode last = grpc::StatusCode::OK;
  int answered = 0;
  for (; answered < kMaxGets; ++answered) {
    v1::TransferGetResponse r;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    last = stub->TransferGet(&c, q, &r).error_code();  // posted, never received
    if (last != grpc::StatusCode::OK) break;
    EXPECT_EQ(r.header().total_bytes(), blobs.size());
    EXPECT_EQ(Stats().leases, 0u) << "the lease ends once the bytes are staged";
  }
  EXPECT_GE(answered, 1) << "the first get is posted and answered";
  EXPECT_EQ(last, grpc::StatusCode::DEADLINE_EXCEEDED) << "after " << answered << " gets";
  EXPECT_EQ(SessionAfterDeadline(*stub, e.session), grpc::StatusCode::NOT_FOUND) << "the session ended";
  EXPECT_EQ(Stats().leases, 0u);
}

TEST_F(NcclSessionTest, PutTheEngineNeverSendsTimesOutAndStoresNothing) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs";
  const client::NamespaceSpec spec = SmallNamespace("tenant-nccl", 2, 4, 64);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 4));
  auto stub = Stub();
  RawEngine e;
  ASSERT_NO_FATAL_FAILURE(AttachRaw(*stub, blobs.size(), &e));
  v1::TransferPutRequest q;
  q.set_session_id(e.session);
  q.set_namespace_id(ns.id);
  const auto hash = TestHash(2);  // one array: begin and end of two temporaries never meet
  q.set_hash(std::string(hash.begin(), hash.end()));
  q.mutable_position()->set_tokens(16);
  q.mutable_position()->set_blocks(1);
  q.mutable_compact();
  q.set_buffer_id(e.buffer);
  q.set_length(blobs.size());
  q.set_crc32c(client::Crc32c(blobs));
  v1::TransferPutResponse r;
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  const grpc::Status st = stub->TransferPut(&c, q, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_EQ(SessionAfterDeadline(*stub, e.session), grpc::StatusCode::NOT_FOUND) << "the session ended";
  const client::ServerStats stats = Stats();
  EXPECT_EQ(stats.pending_puts, 0u);
  EXPECT_EQ(client_->Get({ns.id, TestHash(2), {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace leapcache::testing
