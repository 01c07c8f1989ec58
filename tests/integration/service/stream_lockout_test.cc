// Streams a client opens and then leaves idle must not lock other clients out of the server, nor
// keep what they hold past the stream limits (the hardening issue's lockout finding): against
// the real server with a small thread pool and a short idle limit.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "leapcache/v1/state_cache.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr int kThreads = 8;

class StreamLockoutTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=64MiB", "--page-bytes=64KiB",
            "--max-threads=" + std::to_string(kThreads), "--stream-idle-timeout=2s"};
  }

  // Polls the server's Stats until `done` holds or `limit` passed; the last Stats.
  client::ServerStats WaitFor(const std::function<bool(const client::ServerStats&)>& done,
                              absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    client::ServerStats s = Stats();
    while (!done(s) && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(50));
      s = Stats();
    }
    return s;
  }
};

uint64_t UsedBytes(const client::ServerStats& s) {
  uint64_t used = 0;
  for (const client::TierStats& t : s.tiers) used += t.used_bytes;
  return used;
}

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

TEST_F(StreamLockoutTest, UnreadGetsHoldNoThreadAndLoseTheirLeasesAtTheIdleLimit) {
  // A checkpoint of 1.2 MiB: far more than the 64 KiB a stream may have in flight below.
  const client::NamespaceSpec spec = SmallNamespace("tenant-lockout", 4, 16, 128);
  const client::NamespaceInfo ns = Register(spec);
  const client::BlockHash key = TestHash(7);
  const uint64_t empty = UsedBytes(Stats());
  ASSERT_TRUE(client_
                  ->PutCompact({ns.id, key, {16, 1}, {}, absl::ZeroDuration()},
                               EncodeBlobs(spec, MakeStates(spec, 5)))
                  .ok());
  // Three times the server's threads in Gets that are never read, from a client that grants no
  // flow-control window beyond HTTP/2's initial 64 KiB. Each once held a thread of the pool and
  // its read lease until the client went away.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
  auto channel =
      grpc::CreateCustomChannel(server_->target(), grpc::InsecureChannelCredentials(), args);
  std::unique_ptr<v1::StateCache::Stub> stub = v1::StateCache::NewStub(channel);
  v1::GetRequest request;
  request.set_namespace_id(ns.id);
  request.set_namespace_tag(ns.tag);
  request.set_hash(std::string(reinterpret_cast<const char*>(key.data()), key.size()));
  grpc::CompletionQueue cq;
  constexpr int kStreams = 3 * kThreads;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientAsyncReader<v1::GetResponse>>> streams;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(stub->PrepareAsyncGet(contexts.back().get(), request, &cq));
    streams.back()->StartCall(reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  }
  void* tag = nullptr;
  bool ok = false;
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_TRUE(ok);
  }
  const client::ServerStats leased =
      WaitFor([](const client::ServerStats& s) { return s.leases == kStreams; }, absl::Seconds(5));
  EXPECT_EQ(leased.leases, static_cast<uint64_t>(kStreams));

  // Other clients are served meanwhile.
  client::ClientOptions options;
  options.rpc_timeout = absl::Seconds(5);
  std::unique_ptr<client::Client> other = Connect(options);
  ASSERT_NE(other, nullptr);
  for (int i = 0; i < 2 * kThreads; ++i) {
    const std::vector<client::BlockHash> chain{key};
    absl::StatusOr<client::LookupResult> hit = other->Lookup({ns.id, chain, {}, 0, 16});
    ASSERT_TRUE(hit.ok()) << i << ": " << hit.status();
    EXPECT_TRUE(hit->hit);
  }
  // Deleted, the checkpoint keeps its memory while leased, and gets it back at the idle limit.
  ASSERT_TRUE(client_->Delete(ns.id, key).ok());
  const client::ServerStats released = WaitFor(
      [&](const client::ServerStats& s) { return s.leases == 0 && UsedBytes(s) == empty; },
      absl::Seconds(15));
  EXPECT_EQ(released.leases, 0u);
  EXPECT_EQ(UsedBytes(released), empty);

  // Every stream was ended by the server: reading what the client holds comes to an end before
  // the checkpoint's last byte, and the status is CANCELLED.
  const uint64_t total = 4 * 16 * ns.blob_bytes;
  for (size_t i = 0; i < streams.size(); ++i) {
    uint64_t received = 0;
    v1::GetResponse message;
    for (;;) {
      streams[i]->Read(&message, reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
      ASSERT_TRUE(cq.Next(&tag, &ok));
      if (!ok) break;
      received += message.data().size();
    }
    EXPECT_LT(received, total) << i;
    grpc::Status status;
    streams[i]->Finish(&status, reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << i << ": "
                                                                 << status.error_message();
  }
  streams.clear();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace leapcache::testing
