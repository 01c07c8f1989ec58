// The server's security settings in-process: the tokens file's syntax and lookup, the
// cross-field checks of the TLS and token settings, and the bearer-token header parsing.
#include <grpcpp/grpcpp.h>
#include <grpcpp/test/server_context_test_spouse.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "service/grpc/authorizer.h"
#include "service/config/auth_tokens.h"
#include "service/config/config.h"

namespace leapcache::server {
namespace {

constexpr char kAlice[] = "alice-0123456789abcdef";
constexpr char kBob[] = "bob-0123456789abcdef01";

void ExpectInvalid(const absl::Status& status, const std::string& text) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), text)) << status;
}

TEST(TokenTableTest, MapsTokensToTenants) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse(
      absl::StrCat("# comment\n\n  ", kAlice, "   team alice  \n", kBob, "\tbob\r\n"), "f");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 2u);
  EXPECT_EQ(t->TenantFor(kAlice), "team alice");
  EXPECT_EQ(t->TenantFor(kBob), "bob");
  // Only the whole token matches: no prefix, extension, other case or empty string.
  EXPECT_EQ(t->TenantFor(std::string(kAlice).substr(0, 16)), std::nullopt);
  EXPECT_EQ(t->TenantFor(absl::StrCat(kAlice, "x")), std::nullopt);
  EXPECT_EQ(t->TenantFor("ALICE-0123456789ABCDEF"), std::nullopt);
  EXPECT_EQ(t->TenantFor(""), std::nullopt);
}

TEST(TokenTableTest, RejectsBadFilesNamingTheLine) {
  ExpectInvalid(TokenTable::Parse("# only comments\n", "f").status(), "no tokens");
  ExpectInvalid(TokenTable::Parse(absl::StrCat("\n", kAlice, "\n"), "f").status(),
                "line 2: expected \"TOKEN TENANT\"");
  ExpectInvalid(TokenTable::Parse("short alice\n", "f").status(), "line 1: token must be 16");
  ExpectInvalid(TokenTable::Parse(absl::StrCat(std::string(4097, 'a'), " t\n"), "f").status(),
                "token must be 16..4096");
  ExpectInvalid(TokenTable::Parse(absl::StrCat("alice-0123456789\x01xyz t\n"), "f").status(),
                "printable ASCII");
  ExpectInvalid(
      TokenTable::Parse(absl::StrCat(kAlice, " a\n", kBob, " b\n", kAlice, " c\n"), "f").status(),
      "line 3: duplicate token");
  ExpectInvalid(TokenTable::Parse(absl::StrCat(kAlice, " ", std::string(257, 't')), "f").status(),
                "tenant must be at most 256");
  ExpectInvalid(TokenTable::Load("/nonexistent/tokens").status(), "cannot read");
  // A path to an endless or huge file fails instead of hanging start-up.
  ExpectInvalid(TokenTable::Load("/dev/zero").status(), "larger than");
  // Errors never quote a token.
  absl::Status st =
      TokenTable::Parse(absl::StrCat(kAlice, " a\n", kAlice, " b\n"), "f").status();
  EXPECT_FALSE(absl::StrContains(st.message(), kAlice)) << st;
}

// The caller's tenant from `authorization` metadata values (none for an empty list).
absl::StatusOr<std::string> Authenticate(const TokenTable& tokens,
                                         const std::vector<std::string>& values) {
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse(&context);
  for (const std::string& v : values) spouse.AddClientMetadata("authorization", v);
  return AuthenticateCall(context, tokens);
}

TEST(AuthenticateCallTest, AcceptsOnlyOneValidBearerToken) {
  absl::StatusOr<TokenTable> t =
      TokenTable::Parse(absl::StrCat(kAlice, " alice\n", kBob, " bob\n"), "f");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*Authenticate(*t, {absl::StrCat("Bearer ", kAlice)}), "alice");
  EXPECT_EQ(*Authenticate(*t, {absl::StrCat("bearer ", kBob)}), "bob");  // scheme: any case
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {},
           {kAlice},
           {absl::StrCat("Basic ", kAlice)},
           {"Bearer "},
           {absl::StrCat("Bearer  ", kAlice)},
           {absl::StrCat("Bearer ", kAlice, " ")},
           {"Bearer unknown-token-0123456789"},
           {absl::StrCat("Bearer ", kAlice), absl::StrCat("Bearer ", kBob)}}) {
    absl::StatusOr<std::string> tenant = Authenticate(*t, bad);
    ASSERT_FALSE(tenant.ok()) << (bad.empty() ? "" : bad[0]);
    EXPECT_EQ(tenant.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_FALSE(absl::StrContains(tenant.status().message(), kAlice)) << tenant.status();
  }
}

TEST(SecurityConfigTest, CrossFieldChecks) {
  ServerConfig c;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.tls_cert_file = "server.pem";
  ExpectInvalid(ValidateConfig(c), "tls_cert_file and tls_key_file must be set together");
  c.tls_cert_file.clear();
  c.tls_key_file = "server.key";
  ExpectInvalid(ValidateConfig(c), "(got only tls_key_file)");
  c.tls_key_file.clear();
  c.tls_client_ca_file = "ca.pem";
  ExpectInvalid(ValidateConfig(c), "tls_client_ca_file (mutual TLS) needs tls_cert_file");
  c.tls_client_ca_file.clear();

  // Tokens without TLS: loopback listeners only.
  c.tokens_file = "tokens";
  for (const char* loopback : {"127.0.0.1:7470", "localhost:7470", "[::1]:7470"}) {
    c.listen = loopback;
    EXPECT_TRUE(ValidateConfig(c).ok()) << loopback;
  }
  for (const char* exposed : {"0.0.0.0:7470", "[::]:7470", "10.1.2.3:7470"}) {
    c.listen = exposed;
    ExpectInvalid(ValidateConfig(c), "tokens_file without TLS");
  }
  c.tls_cert_file = "server.pem";
  c.tls_key_file = "server.key";
  EXPECT_TRUE(ValidateConfig(c).ok());

  c.handshake_timeout = absl::ZeroDuration();
  ExpectInvalid(ValidateConfig(c), "handshake_timeout");
}

TEST(SecurityConfigTest, FilesAreCheckedAndNamed) {
  ServerConfig c;
  EXPECT_TRUE(CheckConfigFiles(c).ok());  // TLS off, no tokens
  c.tls_cert_file = "/nonexistent/server.pem";
  c.tls_key_file = "/nonexistent/server.key";
  ExpectInvalid(CheckConfigFiles(c), "tls_cert_file (/nonexistent/server.pem): cannot read");
  c = ServerConfig();
  c.tokens_file = "/nonexistent/tokens";
  ExpectInvalid(CheckConfigFiles(c), "tokens_file (/nonexistent/tokens): cannot read");
}

}  // namespace
}  // namespace leapcache::server
