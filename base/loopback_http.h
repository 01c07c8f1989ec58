// A minimal HTTP/1.0 GET over a loopback TCP socket, for scraping the server's admin endpoint
// and querying Prometheus' API from tests and benchmarks without an HTTP client library.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace leapcache::base {

struct HttpResponse {
  int status = 0;
  std::string headers;
  std::string body;
};

// `path` includes any query string, already URL-encoded.
absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(10));

// A TCP port on 127.0.0.1 that was free a moment ago (for programs that cannot bind port 0).
int FreeTcpPort();

}  // namespace leapcache::base
