// The data plane behind the server's bearer tokens (tokens_file, loopback without TLS): calls
// without a token are refused, a session belongs to the tenant that attached it, and transfers
// reach only that tenant's namespaces (another tenant's is NOT_FOUND, as an unknown one);
// refusals change nothing.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "leapcache/client.h"
#include "leapcache/data_plane.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/process.h"

namespace leapcache::testing {
namespace {

constexpr char kAliceToken[] = "alice-token-0123456789abcdef";
constexpr char kBobToken[] = "bob-token-0123456789abcdef";

class DataPlaneAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("data-plane-auth");
    const std::string tokens = dir_ + "/tokens";
    std::ofstream(tokens) << kAliceToken << " alice\n" << kBobToken << " bob\n";
    auto server = ServerProcess::Start(
        {"--memory-budget=32MiB", "--page-bytes=64KiB", "--tokens-file=" + tokens,
         "--stats-scope=store"});  // the end checks store-wide leases and puts
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }
  void TearDown() override {
    if (server_ != nullptr) {
      absl::StatusOr<int> code = server_->Stop();
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  client::ClientOptions Options(const std::string& token) const {
    client::ClientOptions o;
    o.target = server_->target();
    o.token = token;
    o.allow_token_without_tls = !token.empty();
    return o;
  }
  absl::StatusOr<std::unique_ptr<client::AttachedEngine>> Attach(const std::string& token) const {
    client::EngineIdentity identity;
    identity.name = "engine";
    client::AttachOptions attach;
    attach.transports = {client::Transport::kUcx};
    attach.ucx_transports = "tcp";
    return client::AttachedEngine::Attach(Options(token), identity, attach);
  }

  // Keepalive of `session` as the holder of `token` ("" for none), over a raw stub.
  grpc::StatusCode KeepaliveAs(const std::string& token, uint64_t session) const {
    auto stub = v1::DataPlane::NewStub(
        grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext c;
    if (!token.empty()) c.AddMetadata("authorization", "Bearer " + token);
    v1::KeepaliveRequest q;
    q.set_session_id(session);
    v1::KeepaliveResponse r;
    return stub->Keepalive(&c, q, &r).error_code();
  }

  std::string dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(DataPlaneAuthTest, ASessionAnswersOnlyToItsTenantsTokens) {
  auto alice = Attach(kAliceToken);
  ASSERT_TRUE(alice.ok()) << alice.status();
  const uint64_t session = (*alice)->session_id();
  EXPECT_EQ(KeepaliveAs(kAliceToken, session), grpc::StatusCode::OK);
  EXPECT_EQ(KeepaliveAs(kBobToken, session), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(KeepaliveAs("", session), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(KeepaliveAs("not-a-known-token-0123456789", session),
            grpc::StatusCode::UNAUTHENTICATED);
  // The refusals left the session alone.
  EXPECT_EQ(KeepaliveAs(kAliceToken, session), grpc::StatusCode::OK);
}

TEST_F(DataPlaneAuthTest, SessionsAndTransfersStayWithinTheCallersTenant) {
  EXPECT_EQ(Attach("").status().code(), absl::StatusCode::kUnauthenticated);

  auto alice = Attach(kAliceToken);
  ASSERT_TRUE(alice.ok()) << alice.status();
  auto bob = Attach(kBobToken);
  ASSERT_TRUE(bob.ok()) << bob.status();
  const client::NamespaceSpec alice_spec = SmallNamespace("alice", 1, 2, 16);
  auto ns = (*alice)->client().RegisterNamespace(alice_spec);
  ASSERT_TRUE(ns.ok()) << ns.status();
  const std::vector<uint8_t> blobs = EncodeBlobs(alice_spec, MakeStates(alice_spec, 1));

  std::vector<uint8_t> alice_buf(blobs), bob_buf(blobs.size(), 0);
  auto a = (*alice)->RegisterBuffer(alice_buf.data(), alice_buf.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = (*bob)->RegisterBuffer(bob_buf.data(), bob_buf.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(b.ok()) << b.status();

  client::PutTarget target{ns->id, TestHash(1), {16, 1}, {}, absl::ZeroDuration()};
  // Bob may neither put into nor read alice's namespace through his own session: to him it
  // does not exist.
  EXPECT_EQ((*bob)->PutFrom(target, std::nullopt, *b, 0, blobs.size()).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE((*alice)->PutFrom(target, std::nullopt, *a, 0, blobs.size()).ok());
  EXPECT_EQ((*bob)->GetInto({ns->id, TestHash(1), {}, std::nullopt}, *b, 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(bob_buf, std::vector<uint8_t>(blobs.size(), 0));
  auto got = (*alice)->GetInto({ns->id, TestHash(1), {}, std::nullopt}, *a, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(alice_buf, blobs);

  auto stats = (*alice)->client().Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->checkpoints, 1u);
  EXPECT_EQ(stats->pending_puts, 0u);
  EXPECT_EQ(stats->leases, 0u);
}

}  // namespace
}  // namespace leapcache::testing
