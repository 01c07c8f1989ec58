// The fixture of the service's integration tests: a real leapcache-server process on 127.0.0.1
// port 0 and a connected client. Tests pick the server's settings through ServerArgs().
// TearDown stops the server with SIGTERM and expects a clean exit (0): a graceful drain, and in
// sanitizer builds no leak or error report from the server process.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "leapcache/client.h"
#include "tests/integration/service/process.h"

namespace leapcache::testing {

// A client of `server` acting for `token`'s tenant over plaintext (the server's listener is on
// loopback, where a tokens file without TLS is accepted); null, with a test failure, if it
// cannot be made.
inline std::unique_ptr<client::Client> ConnectWithToken(const ServerProcess& server,
                                                        const std::string& token) {
  client::ClientOptions o;
  o.target = server.target();
  o.token = token;
  o.allow_token_without_tls = true;
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

class ServiceTest : public ::testing::Test {
 protected:
  // Settings for the server, as flags.
  virtual std::vector<std::string> ServerArgs() const {
    return {"--memory-budget=64MiB", "--page-bytes=64KiB"};
  }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(ServerArgs());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
  }

  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) {
      absl::StatusOr<int> code = server_->Stop();
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0) << "leapcache-server did not exit cleanly";
    }
  }

  std::unique_ptr<client::Client> Connect(client::ClientOptions options = {}) const {
    options.target = server_->target();
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  client::NamespaceInfo Register(const client::NamespaceSpec& spec) {
    absl::StatusOr<client::NamespaceInfo> info = client_->RegisterNamespace(spec);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : client::NamespaceInfo{};
  }

  client::ServerStats Stats() {
    absl::StatusOr<client::ServerStats> s = client_->Stats();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : client::ServerStats{};
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::Client> client_;
};

}  // namespace leapcache::testing
