// A certificate is rotated without a restart (the hardening issue: rotating one needed a
// restart, and a restart empties the cache): the real server rereads its certificate and key
// when the files change and on SIGHUP. New connections then present the new certificate (a
// client trusting only the old CA is refused, one trusting the new CA is served), the cache keeps
// what it holds, and files that fail the checks (a key that does not match its certificate)
// leave the certificate in force, counted in leapcache_tls_reloads_total{result="error"}.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/loopback_http.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/process.h"
#include "tests/integration/service/tls_test_pki.h"

namespace leapcache::testing {
namespace {

class TlsReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TestPki> a = MakeTestPki("tls-reload-a");
    absl::StatusOr<TestPki> b = MakeTestPki("tls-reload-b");
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = *std::move(a);
    b_ = *std::move(b);
    dir_ = MakeTempDir("tls-reload");
    cert_ = dir_ + "/server.pem";
    key_ = dir_ + "/server.key";
    Install(a_.server_cert, a_.server_key);
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start({"--memory-budget=16MiB", "--page-bytes=64KiB",
                              "--tls-cert-file=" + cert_, "--tls-key-file=" + key_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }
  void TearDown() override {
    if (server_ != nullptr) {
      absl::StatusOr<int> code = server_->Stop();
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0);
    }
    for (const std::string& d : {dir_, a_.dir, b_.dir}) {
      if (!d.empty()) std::filesystem::remove_all(d);
    }
  }

  // Replaces the key, then the certificate, each at once (a Secret update or a renewal tool):
  // in between the pair does not match, which the server must survive.
  void Install(const std::string& cert, const std::string& key) {
    std::filesystem::copy_file(key, key_ + ".tmp", std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(key_ + ".tmp", key_);
    std::filesystem::copy_file(cert, cert_ + ".tmp",
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(cert_ + ".tmp", cert_);
  }

  // A fresh client trusting `ca` only; its first call tells whether the server's certificate
  // passed (a refused handshake is UNAVAILABLE).
  std::unique_ptr<client::Client> Trusting(const std::string& ca) const {
    client::ClientOptions o;
    o.target = server_->target();
    o.tls = true;
    o.tls_root_ca_file = ca;
    o.connect_timeout = absl::Seconds(2);
    o.rpc_timeout = absl::Seconds(2);
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(o);
    return c.ok() ? std::move(c).value() : nullptr;
  }
  bool Served(const std::string& ca) const {
    std::unique_ptr<client::Client> c = Trusting(ca);
    return c != nullptr && c->Stats().ok();
  }
  static bool Eventually(const std::function<bool()>& done) {
    for (const absl::Time end = absl::Now() + absl::Seconds(10); absl::Now() < end;) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return done();
  }
  double Reloads(const std::string& result) const {
    absl::StatusOr<base::HttpResponse> r = base::HttpGet(server_->metrics_port(), "/metrics");
    if (!r.ok()) return -1;
    const std::string prefix = absl::StrCat("leapcache_tls_reloads_total{result=\"", result, "\"} ");
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      double v = 0;
      if (absl::ConsumePrefix(&line, prefix) && absl::SimpleAtod(line, &v)) return v;
    }
    return -1;
  }

  TestPki a_, b_;
  std::string dir_, cert_, key_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(TlsReloadTest, ANewCertificateInTheFilesIsServedWithoutARestartAndTheCacheStays) {
  ASSERT_TRUE(Served(a_.ca_cert));
  EXPECT_FALSE(Served(b_.ca_cert));
  std::unique_ptr<client::Client> before = Trusting(a_.ca_cert);
  ASSERT_NE(before, nullptr);
  const client::NamespaceSpec spec = SmallNamespace("tenant-tls");
  absl::StatusOr<client::NamespaceInfo> ns = before->RegisterNamespace(spec);
  ASSERT_TRUE(ns.ok()) << ns.status();
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 4));
  ASSERT_TRUE(before->PutCompact({ns->id, TestHash(1), {16, 1}, {}, absl::ZeroDuration()}, blobs)
                  .ok());

  // The file change alone: within a probe interval or two, new connections get B's certificate.
  Install(b_.server_cert, b_.server_key);
  ASSERT_TRUE(Eventually([&] { return Served(b_.ca_cert); })) << "B's certificate never served";
  EXPECT_FALSE(Served(a_.ca_cert));
  EXPECT_GE(Reloads("ok"), 1);
  // The connection made before the rotation keeps its session; the cache kept its checkpoint.
  absl::StatusOr<client::Checkpoint> got = before->Get({ns->id, TestHash(1), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);
  std::unique_ptr<client::Client> after = Trusting(b_.ca_cert);
  ASSERT_NE(after, nullptr);
  got = after->Get({ns->id, TestHash(1), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);

  // Back to A, by SIGHUP this time (the file watch would also see it).
  Install(a_.server_cert, a_.server_key);
  server_->child().Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return Served(a_.ca_cert); })) << "A's certificate never served";
  EXPECT_FALSE(Served(b_.ca_cert));
}

TEST_F(TlsReloadTest, FilesThatFailTheChecksLeaveTheCertificateInForce) {
  ASSERT_TRUE(Served(a_.ca_cert));
  const double errors = Reloads("error");
  ASSERT_GE(errors, 0);
  // B's certificate with A's key: a pair that does not match; then a certificate file that is
  // not PEM at all.
  std::filesystem::copy_file(b_.server_cert, cert_ + ".tmp",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(cert_ + ".tmp", cert_);
  server_->child().Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return Reloads("error") > errors; }));
  EXPECT_TRUE(Served(a_.ca_cert));
  EXPECT_FALSE(Served(b_.ca_cert));
  {
    std::ofstream(cert_ + ".tmp") << "not a certificate\n";
    std::filesystem::rename(cert_ + ".tmp", cert_);
  }
  server_->child().Signal(SIGHUP);
  ASSERT_TRUE(Eventually([&] { return Reloads("error") > errors + 1; }));
  EXPECT_TRUE(Served(a_.ca_cert));
  // The server answers throughout and drains cleanly (TearDown).
}

}  // namespace
}  // namespace leapcache::testing
