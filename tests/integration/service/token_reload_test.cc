// Tokens are added and revoked without a restart (the hardening issue: rotating a token needed
// one, and a restart empties the cache): the real server rereads its tokens file when the file
// changes and on SIGHUP; a file that does not load leaves the tokens in force, and the cache
// keeps what it holds throughout.
#include <signal.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/process.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr char kOld[] = "alice-old-token-0123456789abcdef";
constexpr char kNew[] = "alice-new-token-fedcba9876543210";

class TokenReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("token-reload");
    tokens_ = dir_ + "/tokens";
    Write(std::string(kOld) + " alice\n");
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(
        {"--memory-budget=16MiB", "--page-bytes=64KiB", "--tokens-file=" + tokens_});
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
  // Replaces the file at once, as a Secret update or an editor's save does.
  void Write(const std::string& text) {
    const std::string tmp = tokens_ + ".tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, tokens_);
  }
  std::unique_ptr<client::Client> Connect(const std::string& token) {
    return ConnectWithToken(*server_, token);
  }
  static absl::StatusCode StatsCode(client::Client& c) { return c.Stats().status().code(); }
  // Polls until `done` or 5 s.
  static bool Eventually(const std::function<bool()>& done) {
    for (const absl::Time end = absl::Now() + absl::Seconds(5); absl::Now() < end;) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return done();
  }

  std::string dir_, tokens_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(TokenReloadTest, ATokenAddedOrRevokedInTheFileTakesEffectWithoutARestart) {
  std::unique_ptr<client::Client> old_client = Connect(kOld);
  std::unique_ptr<client::Client> new_client = Connect(kNew);
  ASSERT_NE(old_client, nullptr);
  ASSERT_NE(new_client, nullptr);
  const client::NamespaceSpec spec = SmallNamespace("alice");
  absl::StatusOr<client::NamespaceInfo> ns = old_client->RegisterNamespace(spec);
  ASSERT_TRUE(ns.ok()) << ns.status();
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 3));
  ASSERT_TRUE(
      old_client->PutCompact({ns->id, TestHash(1), {16, 1}, {}, absl::ZeroDuration()}, blobs).ok());
  EXPECT_EQ(StatsCode(*new_client), absl::StatusCode::kUnauthenticated);

  // Added to the file: accepted once the server sees the change, with no signal.
  Write(std::string(kOld) + " alice\n" + kNew + " alice\n");
  EXPECT_TRUE(Eventually([&] { return StatsCode(*new_client) == absl::StatusCode::kOk; }));
  EXPECT_EQ(StatsCode(*old_client), absl::StatusCode::kOk);

  // Revoked, then SIGHUP: refused at once.
  Write(std::string(kNew) + " alice\n");
  server_->child().Signal(SIGHUP);
  EXPECT_TRUE(
      Eventually([&] { return StatsCode(*old_client) == absl::StatusCode::kUnauthenticated; }));
  EXPECT_EQ(StatsCode(*new_client), absl::StatusCode::kOk);

  // A file that does not load changes nothing: the tokens in force stay.
  Write("this line has no tenant\n");
  server_->child().Signal(SIGHUP);
  absl::SleepFor(absl::Seconds(2));  // past a change check and the signal
  EXPECT_EQ(StatsCode(*new_client), absl::StatusCode::kOk);
  EXPECT_EQ(StatsCode(*old_client), absl::StatusCode::kUnauthenticated);

  // The cache kept its checkpoint through every reload.
  absl::StatusOr<client::Checkpoint> got = new_client->Get({ns->id, TestHash(1), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);
}

}  // namespace
}  // namespace leapcache::testing
