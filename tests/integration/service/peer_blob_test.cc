// Peer-supplied blobs through the real server: an Attach whose UCX worker address is garbage (a
// 1-byte 0xff and 0x02 followed by 31 zeros aborted the server in ucp_address_unpack) and a
// RegisterBuffer whose UCX remote key is cut short are INVALID_ARGUMENT, and the server lives on:
// it still answers, its checkpoint still reads back, and it drains cleanly at the end.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "leapcache/v1/data_plane.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

#ifdef LEAPCACHE_TEST_UCX
#include "transport/ucx/ucx_context.h"
#include "transport/ucx/ucx_target_worker.h"
#endif

namespace leapcache::testing {
namespace {

class PeerBlobTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    spec_ = SmallNamespace("tenant-peer");
    ns_ = Register(spec_);
    blobs_ = EncodeBlobs(spec_, MakeStates(spec_, 1));
    ASSERT_TRUE(client_->PutCompact({ns_.id, TestHash(1), {16, 1}, {}, absl::ZeroDuration()},
                                    blobs_)
                    .ok());
    stub_ = v1::DataPlane::NewStub(
        grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Attach(const std::string& connection_info, v1::AttachResponse* response) {
    v1::AttachRequest req;
    req.mutable_identity()->set_name("peer-blob-engine");
    req.mutable_identity()->set_pid(1);
    v1::TransportOffer* offer = req.add_offers();
    offer->set_kind(v1::TRANSPORT_KIND_UCX);
    offer->set_connection_info(connection_info);
    grpc::ClientContext ctx;
    return stub_->Attach(&ctx, req, response);
  }

  // The server answers and still holds the checkpoint, byte for byte.
  void ExpectServing() {
    absl::StatusOr<client::Checkpoint> got = client_->Get({ns_.id, TestHash(1), {}, std::nullopt});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->bytes == blobs_);
  }

  client::NamespaceSpec spec_;
  client::NamespaceInfo ns_;
  std::vector<uint8_t> blobs_;
  std::unique_ptr<v1::DataPlane::Stub> stub_;
};

TEST_F(PeerBlobTest, GarbageWorkerAddressesAreRefusedAndTheServerLives) {
  const std::vector<std::string> garbage = {
      std::string("\xff"), std::string("\x02") + std::string(31, '\0'), std::string(32, '\0'),
      std::string("\x01\x00\x00", 3), std::string(70000, '\x01')};
  for (const std::string& address : garbage) {
    v1::AttachResponse response;
    const grpc::Status st = Attach(address, &response);
#ifdef LEAPCACHE_TEST_UCX
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << address.size() << " bytes: " << st.error_message();
    EXPECT_NE(st.error_message().find("UCX worker address"), std::string::npos)
        << st.error_message();
#else
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
#endif
    ExpectServing();
  }
}

#ifdef LEAPCACHE_TEST_UCX
TEST_F(PeerBlobTest, CutRemoteKeysAreRefusedAndTheServerLives) {
  auto context = transport::UcxContext::Create({"tcp", false});
  ASSERT_TRUE(context.ok()) << context.status();
  auto target = transport::UcxTargetWorker::Create(context->get());
  ASSERT_TRUE(target.ok()) << target.status();
  v1::AttachResponse attached;
  ASSERT_TRUE(Attach((*target)->address(), &attached).ok());

  std::vector<uint8_t> buffer(1 << 16);
  auto reg = (*context)->Register(buffer.data(), buffer.size(), transport::MemoryKind::kHost);
  ASSERT_TRUE(reg.ok()) << reg.status();
  const std::string key = (*reg)->descriptor().key;
  auto request = [&](std::string k) {
    v1::RegisterBufferRequest req;
    req.set_session_id(attached.session_id());
    v1::BufferDescriptor* b = req.mutable_buffer();
    b->set_transport(v1::TRANSPORT_KIND_UCX);
    b->set_memory(v1::MEMORY_KIND_HOST);
    b->set_address(reinterpret_cast<uint64_t>(buffer.data()));
    b->set_bytes(buffer.size());
    b->set_remote_key(std::move(k));
    return req;
  };
  for (size_t n : {size_t{1}, size_t{8}, size_t{9}, key.size() - 1}) {
    grpc::ClientContext ctx;
    v1::RegisterBufferResponse response;
    const grpc::Status st = stub_->RegisterBuffer(&ctx, request(key.substr(0, n)), &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << n << ": "
                                                                   << st.error_message();
    ExpectServing();
  }
  grpc::ClientContext ctx;
  v1::RegisterBufferResponse response;
  EXPECT_TRUE(stub_->RegisterBuffer(&ctx, request(key), &response).ok());
}
#endif

}  // namespace
}  // namespace leapcache::testing
