// Streams a client opens and then leaves idle must not lock other clients out of the server
// (the hardening issue's lockout finding): against the real server with a small thread pool.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr int kThreads = 8;

class StreamLockoutTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=64MiB", "--page-bytes=64KiB",
            "--max-threads=" + std::to_string(kThreads)};
  }
};

TEST_F(StreamLockoutTest, IdleUploadStreamsHoldNoThread) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-lockout");
  const client::NamespaceInfo ns = Register(spec);
  // Three times the server's threads in UploadPut streams that start and then send nothing.
  // Each once held a thread of the pool until the client went away.
  auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue cq;
  constexpr int kStreams = 3 * kThreads;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncReaderWriter>> streams;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(
        generic.PrepareCall(contexts.back().get(), "/leapcache.v1.StateCache/UploadPut", &cq));
    streams.back()->StartCall(reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  }
  void* tag = nullptr;
  bool ok = false;
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_TRUE(ok);
  }
  // Every other client is still served, on a fresh connection, within the deadline.
  client::ClientOptions options;
  options.rpc_timeout = absl::Seconds(5);
  std::unique_ptr<client::Client> other = Connect(options);
  ASSERT_NE(other, nullptr);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 3));
  for (int i = 0; i < 2 * kThreads; ++i) {
    const client::BlockHash key = TestHash(100 + i);
    ASSERT_TRUE(other->PutCompact({ns.id, key, {16, 1}, {}, absl::ZeroDuration()}, blobs).ok())
        << i;
    const std::vector<client::BlockHash> chain{key};
    absl::StatusOr<client::LookupResult> hit = other->Lookup({ns.id, chain, {}, 0, 16});
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_TRUE(hit->hit);
  }
  for (auto& c : contexts) c->TryCancel();
  std::vector<grpc::Status> statuses(streams.size());  // written by the queue below
  for (size_t i = 0; i < streams.size(); ++i) streams[i]->Finish(&statuses[i], nullptr);
  for (int i = 0; i < kStreams; ++i) ASSERT_TRUE(cq.Next(&tag, &ok));
  streams.clear();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace leapcache::testing
