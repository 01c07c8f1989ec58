// TLS on the gRPC port of the real server, with a CA made at test time: a client trusting the CA
// gets a working connection (and the CLI too); a plaintext client, a client trusting another CA,
// and, under mutual TLS, a client without a certificate or with one from an untrusted CA are
// refused and change nothing; bad certificate files fail start-up with a message naming them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/process.h"
#include "tests/integration/service/tls_test_pki.h"

namespace leapcache::testing {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<TestPki> pki = MakeTestPki("tls-pki");
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = new TestPki(*std::move(pki));
  }
  static void TearDownTestSuite() {
    if (pki_ != nullptr) std::filesystem::remove_all(pki_->dir);
    delete pki_;
    pki_ = nullptr;
  }

  void TearDown() override {
    if (server_ != nullptr) {
      absl::StatusOr<int> code = server_->Stop();
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0) << "leapcache-server did not exit cleanly";
    }
  }

  void StartServer(bool mutual) {
    std::vector<std::string> args = {"--memory-budget=16MiB", "--page-bytes=64KiB",
                                     "--tls-cert-file=" + pki_->server_cert,
                                     "--tls-key-file=" + pki_->server_key};
    if (mutual) args.push_back("--tls-client-ca-file=" + pki_->ca_cert);
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(args);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  client::ClientOptions TlsOptions() const {
    client::ClientOptions o;
    o.target = server_->target();
    o.tls = true;
    o.tls_root_ca_file = pki_->ca_cert;
    o.connect_timeout = absl::Seconds(5);
    return o;
  }

  // A refused connection shows as Create() failing, or (TLS 1.3 lets a client finish its side of
  // the handshake before the server checks the client's certificate) as the first call failing.
  // Either way UNAVAILABLE, and nothing reaches the store.
  static void ExpectRefused(const client::ClientOptions& options) {
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
      return;
    }
    absl::StatusOr<client::NamespaceInfo> ns =
        (*c)->RegisterNamespace(SmallNamespace("tenant-refused"));
    ASSERT_FALSE(ns.ok());
    EXPECT_EQ(ns.status().code(), absl::StatusCode::kUnavailable) << ns.status();
  }

  std::unique_ptr<client::Client> Connect(const client::ClientOptions& options) {
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Checkpoints and namespaces in the store, through a trusted connection.
  client::ServerStats Stats(const client::ClientOptions& options) {
    std::unique_ptr<client::Client> c = Connect(options);
    if (c == nullptr) return {};
    absl::StatusOr<client::ServerStats> s = c->Stats();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : client::ServerStats{};
  }

  static TestPki* pki_;
  std::unique_ptr<ServerProcess> server_;
};

TestPki* TlsTest::pki_ = nullptr;

TEST_F(TlsTest, TrustedClientRoundTripsOverTls) {
  StartServer(/*mutual=*/false);
  std::unique_ptr<client::Client> c = Connect(TlsOptions());
  ASSERT_NE(c, nullptr);
  const client::NamespaceSpec spec = SmallNamespace("tenant-tls");
  absl::StatusOr<client::NamespaceInfo> ns = c->RegisterNamespace(spec);
  ASSERT_TRUE(ns.ok()) << ns.status();
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 3));
  ASSERT_TRUE(c->PutCompact({ns->id, TestHash(1), {16, 1}, {}, absl::ZeroDuration()}, blobs).ok());
  absl::StatusOr<client::Checkpoint> got = c->Get({ns->id, TestHash(1), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);
  absl::StatusOr<bool> serving = c->CheckHealth();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);

  // The certificate also names localhost, for clients that connect by IP and verify a name.
  client::ClientOptions by_name = TlsOptions();
  by_name.tls_server_name = "localhost";
  std::unique_ptr<client::Client> named = Connect(by_name);
  ASSERT_NE(named, nullptr);
  EXPECT_TRUE(named->Stats().ok());
}

TEST_F(TlsTest, PlaintextClientAndUntrustingClientAreRefused) {
  StartServer(/*mutual=*/false);
  client::ClientOptions plaintext;
  plaintext.target = server_->target();
  plaintext.connect_timeout = absl::Seconds(2);
  ExpectRefused(plaintext);

  client::ClientOptions other_ca = TlsOptions();
  other_ca.tls_root_ca_file = pki_->rogue_ca_cert;
  other_ca.connect_timeout = absl::Seconds(2);
  ExpectRefused(other_ca);

  client::ClientOptions wrong_name = TlsOptions();
  wrong_name.tls_server_name = "not-the-server.example";
  wrong_name.connect_timeout = absl::Seconds(2);
  ExpectRefused(wrong_name);

  // The server is unharmed and nothing was stored.
  const client::ServerStats s = Stats(TlsOptions());
  EXPECT_EQ(s.namespaces, 0u);
  EXPECT_EQ(s.checkpoints, 0u);
}

TEST_F(TlsTest, MutualTlsRequiresATrustedClientCertificate) {
  StartServer(/*mutual=*/true);
  client::ClientOptions no_cert = TlsOptions();
  no_cert.connect_timeout = absl::Seconds(2);
  ExpectRefused(no_cert);

  client::ClientOptions rogue = TlsOptions();
  rogue.tls_client_cert_file = pki_->rogue_client_cert;
  rogue.tls_client_key_file = pki_->rogue_client_key;
  rogue.connect_timeout = absl::Seconds(2);
  ExpectRefused(rogue);

  client::ClientOptions trusted = TlsOptions();
  trusted.tls_client_cert_file = pki_->client_cert;
  trusted.tls_client_key_file = pki_->client_key;
  std::unique_ptr<client::Client> c = Connect(trusted);
  ASSERT_NE(c, nullptr);
  const client::ServerStats before = Stats(trusted);
  EXPECT_EQ(before.namespaces, 0u);  // the refused clients registered nothing
  absl::StatusOr<client::NamespaceInfo> ns = c->RegisterNamespace(SmallNamespace("tenant-mtls"));
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_EQ(Stats(trusted).namespaces, 1u);
}

TEST_F(TlsTest, CliConnectsWithTlsFlags) {
  StartServer(/*mutual=*/true);
  absl::StatusOr<RunResult> r = RunProgram(
      {LEAPCACHE_CLI_BIN, "--server", server_->target(), "--tls-ca", pki_->ca_cert, "--tls-cert",
       pki_->client_cert, "--tls-key", pki_->client_key, "register", "--tenant", "cli-tls",
       "--layers", "1", "--heads", "2", "--dk", "16", "--dv", "16"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  // Without the client certificate the same command fails (exit 1: a failed call).
  absl::StatusOr<RunResult> refused =
      RunProgram({LEAPCACHE_CLI_BIN, "--server", server_->target(), "--tls-ca", pki_->ca_cert,
                  "--timeout", "2s", "stats"});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->exit_code, 1) << refused->output;
}

// Start-up (and --check-config) with bad TLS files: exit 1 and a message naming the setting.
class TlsStartupTest : public TlsTest {
 protected:
  // The server's exit status and stderr for `args` (it must not start serving).
  std::pair<int, std::string> Run(const std::vector<std::string>& args, bool check_only) {
    std::string command = absl::StrCat("'", ServerBinary(), "' --listen=127.0.0.1:0 ",
                                       "--metrics-listen= --memory-budget=16MiB");
    if (check_only) absl::StrAppend(&command, " --check-config");
    for (const std::string& a : args) absl::StrAppend(&command, " '", a, "'");
    absl::StatusOr<RunResult> r = RunProgram({"/bin/sh", "-c", command + " 2>&1"});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::pair{r->exit_code, r->output} : std::pair{-1, std::string()};
  }

  void ExpectFails(const std::vector<std::string>& args, const std::string& message) {
    for (bool check_only : {true, false}) {
      auto [code, output] = Run(args, check_only);
      EXPECT_EQ(code, 1) << output;
      EXPECT_TRUE(absl::StrContains(output, message)) << output;
      EXPECT_FALSE(absl::StrContains(output, "listening on")) << output;
    }
  }
};

TEST_F(TlsStartupTest, BadCertificateFilesFailStartup) {
  ExpectFails({"--tls-cert-file=" + pki_->server_cert, "--tls-key-file=" + pki_->client_key},
              "tls_key_file (" + pki_->client_key + "): does not match the certificate");
  ExpectFails({"--tls-cert-file=" + pki_->dir + "/missing.pem", "--tls-key-file=" + pki_->server_key},
              "tls_cert_file (" + pki_->dir + "/missing.pem): cannot read");
  ExpectFails({"--tls-cert-file=" + pki_->server_key, "--tls-key-file=" + pki_->server_key},
              "tls_cert_file (" + pki_->server_key + "): not a PEM certificate");
  ExpectFails({"--tls-cert-file=" + pki_->server_cert, "--tls-key-file=" + pki_->server_cert},
              "tls_key_file (" + pki_->server_cert + "): not an unencrypted PEM private key");
  ExpectFails({"--tls-cert-file=" + pki_->server_cert}, "tls_cert_file and tls_key_file");
  ExpectFails({"--tls-cert-file=" + pki_->server_cert, "--tls-key-file=" + pki_->server_key,
               "--tls-client-ca-file=" + pki_->server_key},
              "tls_client_ca_file (" + pki_->server_key + "): not a PEM certificate");
  // And a good pair is accepted.
  auto [code, output] =
      Run({"--tls-cert-file=" + pki_->server_cert, "--tls-key-file=" + pki_->server_key}, true);
  EXPECT_EQ(code, 0) << output;
}

}  // namespace
}  // namespace leapcache::testing
