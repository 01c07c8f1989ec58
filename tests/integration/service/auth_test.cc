// Bearer-token authentication and per-tenant authorization on the real server (over TLS, with a
// CA made at test time): a call without a token or with an unknown one is UNAUTHENTICATED, a
// token may only register its own tenant's namespaces and use its own puts (PERMISSION_DENIED
// otherwise) and namespaces (another tenant's is NOT_FOUND, word for word as an unknown one, so
// that a tenant cannot tell another's namespaces exist), health checks need no token, and after every refusal the store is unchanged and
// the owner's checkpoint reads back byte-exact. The client refuses to send a token in the clear.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/process.h"
#include "tests/integration/service/tls_test_pki.h"

namespace leapcache::testing {
namespace {

using absl::StatusCode;

constexpr char kAliceToken[] = "alice-token-0123456789abcdef";
constexpr char kAliceSecondToken[] = "alice-rotated-token-fedcba9876543210";
constexpr char kBobToken[] = "bob-token-0123456789abcdef0123";

class AuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<TestPki> pki = MakeTestPki("auth-pki");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = new TestPki(*std::move(pki));
    tokens_file_ = new std::string(pki_->dir + "/tokens");
    std::ofstream(*tokens_file_) << "# token tenant\n"
                                 << kAliceToken << " alice\n"
                                 << kAliceSecondToken << " alice\n\n"
                                 << kBobToken << " bob\n";
  }
  static void TearDownTestSuite() {
    if (pki_ != nullptr) std::filesystem::remove_all(pki_->dir);
    delete pki_;
    delete tokens_file_;
    pki_ = nullptr;
    tokens_file_ = nullptr;
  }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(
        {"--memory-budget=16MiB", "--page-bytes=64KiB", "--tls-cert-file=" + pki_->server_cert,
         "--tls-key-file=" + pki_->server_key, "--tokens-file=" + *tokens_file_,
         // The unchanged-store checks below read store-wide numbers.
         "--stats-scope=store"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    alice_ = Connect(kAliceToken);
    bob_ = Connect(kBobToken);
    ASSERT_NE(alice_, nullptr);
    ASSERT_NE(bob_, nullptr);

    spec_ = SmallNamespace("alice");
    absl::StatusOr<client::NamespaceInfo> ns = alice_->RegisterNamespace(spec_);
    ASSERT_TRUE(ns.ok()) << ns.status();
    ns_ = *ns;
    blobs_ = EncodeBlobs(spec_, MakeStates(spec_, 5));
    ASSERT_TRUE(alice_->PutCompact(Target(TestHash(1)), blobs_).ok());
    before_ = AliceStats();
  }

  void TearDown() override {
    alice_.reset();
    bob_.reset();
    if (server_ != nullptr) {
      absl::StatusOr<int> code = server_->Stop();
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0) << "leapcache-server did not exit cleanly";
    }
  }

  std::unique_ptr<client::Client> Connect(const std::string& token) {
    client::ClientOptions o;
    o.target = server_->target();
    o.tls = true;
    o.tls_root_ca_file = pki_->ca_cert;
    o.token = token;
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  client::PutTarget Target(const client::BlockHash& h) const {
    return {ns_.id, h, {16, 1}, {}, absl::ZeroDuration()};
  }

  client::ServerStats AliceStats() {
    absl::StatusOr<client::ServerStats> s = alice_->Stats();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : client::ServerStats{};
  }

  // The store is as SetUp left it: same namespaces and checkpoints, nothing pending or pinned,
  // same memory, and alice's checkpoint still reads back byte-exact.
  void ExpectUnchanged() {
    const client::ServerStats s = AliceStats();
    EXPECT_EQ(s.namespaces, before_.namespaces);
    EXPECT_EQ(s.checkpoints, before_.checkpoints);
    EXPECT_EQ(s.pending_puts, 0u);
    EXPECT_EQ(s.pinned, 0u);
    EXPECT_EQ(s.puts_committed, before_.puts_committed);
    EXPECT_EQ(s.deletes, before_.deletes);
    ASSERT_EQ(s.tiers.size(), 1u);
    EXPECT_EQ(s.tiers[0].used_bytes, before_.tiers[0].used_bytes);
    absl::StatusOr<client::Checkpoint> got = alice_->Get({ns_.id, TestHash(1), {}, std::nullopt});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->bytes == blobs_);
  }

  static TestPki* pki_;
  static std::string* tokens_file_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::Client> alice_;
  std::unique_ptr<client::Client> bob_;
  client::NamespaceSpec spec_;
  client::NamespaceInfo ns_;
  std::vector<uint8_t> blobs_;
  client::ServerStats before_;
};

TestPki* AuthTest::pki_ = nullptr;
std::string* AuthTest::tokens_file_ = nullptr;

void ExpectCode(const absl::Status& status, StatusCode code) {
  EXPECT_EQ(status.code(), code) << status;
}

TEST_F(AuthTest, CallsWithoutAValidTokenAreUnauthenticated) {
  for (const std::string token : {"", "not-a-token-of-this-server-000", "alice-token-0123456789abcdeF"}) {
    SCOPED_TRACE(token);
    std::unique_ptr<client::Client> c = Connect(token);
    ASSERT_NE(c, nullptr);
    ExpectCode(c->RegisterNamespace(SmallNamespace("alice")).status(), StatusCode::kUnauthenticated);
    const client::BlockHash hash = TestHash(1);
    ExpectCode(c->Lookup({ns_.id, std::span(&hash, 1), {}, 0, 16}).status(),
               StatusCode::kUnauthenticated);
    const client::LookupRequest lookup{ns_.id, std::span(&hash, 1), {}, 0, 16};
    ExpectCode(c->LookupBatch(std::span(&lookup, 1)).status(), StatusCode::kUnauthenticated);
    ExpectCode(c->Get({ns_.id, TestHash(1), {}, std::nullopt}).status(),
               StatusCode::kUnauthenticated);
    ExpectCode(c->PutCompact(Target(TestHash(2)), blobs_), StatusCode::kUnauthenticated);
    ExpectCode(c->Delete(ns_.id, TestHash(1)), StatusCode::kUnauthenticated);
    ExpectCode(c->Pin(ns_.id, TestHash(1)), StatusCode::kUnauthenticated);
    ExpectCode(c->CommitPut(1, 0), StatusCode::kUnauthenticated);
    ExpectCode(c->Stats().status(), StatusCode::kUnauthenticated);
    // Health checks stay open, for probes that hold no token.
    absl::StatusOr<bool> serving = c->CheckHealth();
    ASSERT_TRUE(serving.ok()) << serving.status();
    EXPECT_TRUE(*serving);
    ExpectUnchanged();
  }
}

TEST_F(AuthTest, TokenMayOnlyRegisterItsOwnTenant) {
  ExpectCode(bob_->RegisterNamespace(SmallNamespace("alice")).status(),
             StatusCode::kPermissionDenied);
  ExpectUnchanged();
  // Its own tenant works; a second token of alice's reaches the same namespace (idempotent).
  absl::StatusOr<client::NamespaceInfo> bobs = bob_->RegisterNamespace(SmallNamespace("bob"));
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_NE(bobs->id, ns_.id);
  std::unique_ptr<client::Client> alice2 = Connect(kAliceSecondToken);
  absl::StatusOr<client::NamespaceInfo> again = alice2->RegisterNamespace(spec_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id, ns_.id);
}

TEST_F(AuthTest, OtherTenantsNamespaceIsNotFoundAsAnUnknownOne) {
  const client::BlockHash hash = TestHash(1);
  ExpectCode(bob_->Lookup({ns_.id, std::span(&hash, 1), {}, 0, 16}).status(),
             StatusCode::kNotFound);
  ExpectCode(bob_->Get({ns_.id, hash, {}, std::nullopt}).status(), StatusCode::kNotFound);
  ExpectCode(bob_->Delete(ns_.id, hash), StatusCode::kNotFound);
  ExpectCode(bob_->Pin(ns_.id, hash), StatusCode::kNotFound);
  ExpectCode(bob_->Unpin(ns_.id, hash), StatusCode::kNotFound);
  ExpectCode(bob_->PutCompact(Target(TestHash(2)), blobs_), StatusCode::kNotFound);
  ExpectCode(bob_->ReservePut(Target(TestHash(3)), std::nullopt).status(),
             StatusCode::kNotFound);
  ExpectUnchanged();
  // The owner is unaffected: its lookup hits.
  absl::StatusOr<client::LookupResult> hit = alice_->Lookup({ns_.id, std::span(&hash, 1), {}, 0, 16});
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_TRUE(hit->hit);
  // In a batch beside bob's own namespace: alice's lookup alone is refused, in the same words.
  absl::StatusOr<client::NamespaceInfo> bobs = bob_->RegisterNamespace(SmallNamespace("bob"));
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  const std::vector<client::LookupRequest> mixed = {{bobs->id, std::span(&hash, 1), {}, 0, 16},
                                                    {ns_.id, std::span(&hash, 1), {}, 0, 16}};
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> answers =
      bob_->LookupBatch(mixed);
  ASSERT_TRUE(answers.ok()) << answers.status();
  ASSERT_EQ(answers->size(), 2u);
  ASSERT_TRUE((*answers)[0].ok()) << (*answers)[0].status();
  EXPECT_FALSE((*answers)[0]->hit);
  ExpectCode((*answers)[1].status(), StatusCode::kNotFound);
  EXPECT_EQ((*answers)[1].status().message(), absl::StrCat("unknown namespace ", ns_.id));
  // An unknown namespace is NOT_FOUND, as without authentication, and the same words.
  const uint32_t unknown = ns_.id + 100;
  ExpectCode(bob_->Get({unknown, hash, {}, std::nullopt}).status(), StatusCode::kNotFound);
  EXPECT_EQ(bob_->Get({ns_.id, hash, {}, std::nullopt}).status().message(),
            absl::StrCat("unknown namespace ", ns_.id));
  EXPECT_EQ(bob_->Get({unknown, hash, {}, std::nullopt}).status().message(),
            absl::StrCat("unknown namespace ", unknown));
}

TEST_F(AuthTest, OtherTenantsPutIsPermissionDenied) {
  absl::StatusOr<client::Reservation> put = alice_->ReservePut(Target(TestHash(7)), std::nullopt);
  ASSERT_TRUE(put.ok()) << put.status();
  const std::vector<uint8_t> blobs = EncodeBlobs(spec_, MakeStates(spec_, 7));
  ASSERT_EQ(put->expected_bytes, blobs.size());
  const uint32_t crc = client::Crc32c(blobs);

  // Bob can neither write into, commit nor abort alice's put.
  ExpectCode(bob_->Upload(*put, 0, blobs), StatusCode::kPermissionDenied);
  ExpectCode(bob_->CommitPut(put->put_id, crc), StatusCode::kPermissionDenied);
  ExpectCode(bob_->AbortPut(put->put_id), StatusCode::kPermissionDenied);
  ExpectCode(bob_->CommitPut(put->put_id + 1000, crc), StatusCode::kNotFound);

  // Alice's put is intact: still pending, and completes.
  client::ServerStats s = AliceStats();
  EXPECT_EQ(s.pending_puts, 1u);
  EXPECT_EQ(s.checkpoints, before_.checkpoints);
  ASSERT_TRUE(alice_->Upload(*put, 0, blobs).ok());
  ASSERT_TRUE(alice_->CommitPut(put->put_id, crc).ok());
  absl::StatusOr<client::Checkpoint> got = alice_->Get({ns_.id, TestHash(7), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);
  // A committed put's id is gone for everyone.
  ExpectCode(alice_->AbortPut(put->put_id), StatusCode::kNotFound);
}

TEST_F(AuthTest, ClientRefusesToSendATokenWithoutTls) {
  client::ClientOptions o;
  o.target = "leapcache.example:7470";
  o.token = kAliceToken;
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
  // Allowing it is honoured for loopback targets only.
  o.allow_token_without_tls = true;
  c = client::Client::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
  // And this server speaks TLS only: a plaintext client (token allowed on loopback) is refused.
  o.target = server_->target();
  o.connect_timeout = absl::Seconds(2);
  c = client::Client::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status();
  ExpectUnchanged();
}

// Tokens without TLS on a loopback listener, for local deployments and tests.
TEST(AuthLoopbackTest, TokensWorkWithoutTlsOnLoopback) {
  const std::string dir = MakeTempDir("auth-loopback");
  const std::string tokens = dir + "/tokens";
  std::ofstream(tokens) << kBobToken << " bob\n";
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(
      {"--memory-budget=16MiB", "--page-bytes=64KiB", "--tokens-file=" + tokens});
  ASSERT_TRUE(server.ok()) << server.status();
  client::ClientOptions o;
  o.target = (*server)->target();
  o.token = kBobToken;
  o.allow_token_without_tls = true;
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->RegisterNamespace(SmallNamespace("bob")).ok());
  ExpectCode((*c)->RegisterNamespace(SmallNamespace("alice")).status(),
             StatusCode::kPermissionDenied);
  c->reset();
  absl::StatusOr<int> code = (*server)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace leapcache::testing
