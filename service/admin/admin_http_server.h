// AdminHttpServer: the server's HTTP admin surface, on its own port (metrics_listen):
//   GET /metrics   Prometheus text exposition 0.0.4 (text_format.h), rendered per scrape
//   GET /healthz   200 "ok" while the process runs (liveness)
//   GET /readyz    200 "ready" while the gRPC service accepts calls, 503 "draining" otherwise
// Served by civetweb with a small fixed thread pool; anything else is 404, methods other than
// GET/HEAD 405. The host must be an IP literal or "localhost" (civetweb binds addresses, it does
// not resolve names). Destruction stops the server, waiting for requests in progress.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct mg_context;

namespace leapcache::server {

struct AdminHandlers {
  std::function<std::string()> metrics;  // the /metrics body
  std::function<bool()> ready;           // /readyz
};

class AdminHttpServer {
 public:
  // UNAVAILABLE with civetweb's reason if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<AdminHttpServer>> Start(const std::string& address,
                                                                AdminHandlers handlers);
  ~AdminHttpServer();
  AdminHttpServer(const AdminHttpServer&) = delete;
  AdminHttpServer& operator=(const AdminHttpServer&) = delete;

  int port() const { return port_; }
  const AdminHandlers& handlers() const { return handlers_; }

 private:
  explicit AdminHttpServer(AdminHandlers handlers) : handlers_(std::move(handlers)) {}

  const AdminHandlers handlers_;
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::string wake_host_;  // an address of the listener, for stopping
};

}  // namespace leapcache::server
