// host:port addresses of the server's listeners: "127.0.0.1:7470", "localhost:0", "[::]:7470".
// Port 0 means "any free port"; the listener reports the port it bound.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace leapcache::server {

struct HostPort {
  std::string host;  // without brackets ("::" for "[::]:7470")
  int port = 0;      // 0..65535
};

// INVALID_ARGUMENT naming what is wrong: no ':', an empty host, a port that is not a decimal
// number in 0..65535, unbalanced brackets.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

// "host:port", or "[host]:port" when the host is an IPv6 literal.
std::string FormatHostPort(const std::string& host, int port);

}  // namespace leapcache::server
