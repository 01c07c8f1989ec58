// Attached decode behind bearer tokens on the real server (TLS with a CA made at test time):
// without a valid token every Decode call is UNAUTHENTICATED; a tenant can open sessions only on
// its own namespaces (another tenant's is NOT_FOUND, as an unknown one) and use only sessions on
// them (PERMISSION_DENIED otherwise), and the owner's
// session keeps working after every refusal.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "client/channel.h"
#include "leapcache/decode_session.h"
#include "leapcache/v1/decode.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/process.h"
#include "tests/integration/service/tls_test_pki.h"

namespace leapcache::testing {
namespace {

constexpr char kAliceToken[] = "alice-decode-token-0123456789ab";
constexpr char kBobToken[] = "bob-decode-token-0123456789abcd";

class DecodeAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TestPki> pki = MakeTestPki("decode-auth-pki");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    const std::string tokens = pki_.dir + "/tokens";
    std::ofstream(tokens) << kAliceToken << " alice\n" << kBobToken << " bob\n";
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({"--memory-budget=16MiB", "--page-bytes=64KiB", "--compute-backend=cpu",
                              "--tls-cert-file=" + pki_.server_cert,
                              "--tls-key-file=" + pki_.server_key, "--tokens-file=" + tokens});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    auto alice = client::Client::Create(Options(kAliceToken));
    ASSERT_TRUE(alice.ok()) << alice.status();
    absl::StatusOr<client::NamespaceInfo> ns =
        (*alice)->RegisterNamespace(SmallNamespace("alice", 1, 2, 16));
    ASSERT_TRUE(ns.ok()) << ns.status();
    ns_ = ns->id;
  }

  void TearDown() override {
    if (server_ != nullptr) {
      absl::StatusOr<int> code = server_->Stop();
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0);
    }
    std::filesystem::remove_all(pki_.dir);
  }

  client::ClientOptions Options(const std::string& token) const {
    client::ClientOptions o;
    o.target = server_->target();
    o.tls = true;
    o.tls_root_ca_file = pki_.ca_cert;
    o.token = token;
    return o;
  }

  // A raw Decode stub with `token`, to address sessions by id.
  std::unique_ptr<v1::Decode::Stub> Stub(const std::string& token) const {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::ConnectChannel(Options(token));
    EXPECT_TRUE(channel.ok()) << channel.status();
    return v1::Decode::NewStub(*channel);
  }

  TestPki pki_;
  std::unique_ptr<ServerProcess> server_;
  uint32_t ns_ = 0;
};

TEST_F(DecodeAuthTest, OnlyTheNamespacesTenantMayDecode) {
  auto alice = client::DecodeSession::Open(Options(kAliceToken), {ns_, {}, 2});
  ASSERT_TRUE(alice.ok()) << alice.status();
  ASSERT_TRUE((*alice)->Reset(0).ok());

  EXPECT_EQ(client::DecodeSession::Open(Options(""), {ns_, {}, 2}).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(client::DecodeSession::Open(Options(kBobToken), {ns_, {}, 2}).status().code(),
            absl::StatusCode::kNotFound);

  // Bob and an anonymous caller address Alice's session by id.
  for (const auto& [token, code] : {std::pair{std::string(kBobToken), grpc::PERMISSION_DENIED},
                                    std::pair{std::string(), grpc::UNAUTHENTICATED}}) {
    auto stub = Stub(token);
    v1::ResetSlotRequest reset;
    reset.set_session_id((*alice)->info().id);
    v1::ResetSlotResponse reset_response;
    grpc::ClientContext c1;
    EXPECT_EQ(stub->ResetSlot(&c1, reset, &reset_response).error_code(), code);
    v1::CloseDecodeSessionRequest close;
    close.set_session_id((*alice)->info().id);
    v1::CloseDecodeSessionResponse close_response;
    grpc::ClientContext c2;
    EXPECT_EQ(stub->CloseSession(&c2, close, &close_response).error_code(), code);
    grpc::ClientContext c3;
    auto stream = stub->Step(&c3);
    v1::StepRequest step;
    step.set_session_id((*alice)->info().id);
    stream->Write(step);
    stream->WritesDone();
    v1::StepResponse ignored;
    EXPECT_FALSE(stream->Read(&ignored));
    EXPECT_EQ(stream->Finish().error_code(), code);
  }
  // Alice's session is intact.
  EXPECT_TRUE((*alice)->Reset(1).ok());
  EXPECT_TRUE((*alice)->Close().ok());
}

}  // namespace
}  // namespace leapcache::testing
