#include "service/admin/admin_http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "service/metrics/text_format.h"
#include "service/config/host_port.h"

namespace leapcache::server {
namespace {

void Reply(mg_connection* conn, int code, const char* reason, const char* content_type,
           const std::string& body, bool head_only) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            code, reason, content_type, body.size());
  if (!head_only) mg_write(conn, body.data(), body.size());
}

// The handler of every path; returns the HTTP status sent (civetweb's contract: > 0 handled).
int Handle(mg_connection* conn, void* data) {
  const auto* server = static_cast<const AdminHttpServer*>(data);
  const mg_request_info* info = mg_get_request_info(conn);
  const std::string_view method = info->request_method ? info->request_method : "";
  const std::string_view uri = info->local_uri ? info->local_uri : "";
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    Reply(conn, 405, "Method Not Allowed", "text/plain", "GET only\n", false);
    return 405;
  }
  if (uri == "/metrics") {
    Reply(conn, 200, "OK", metrics::kTextContentType, server->handlers().metrics(), head);
    return 200;
  }
  if (uri == "/healthz") {
    Reply(conn, 200, "OK", "text/plain", "ok\n", head);
    return 200;
  }
  if (uri == "/readyz") {
    if (server->handlers().ready()) {
      Reply(conn, 200, "OK", "text/plain", "ready\n", head);
      return 200;
    }
    Reply(conn, 503, "Service Unavailable", "text/plain", "draining\n", head);
    return 503;
  }
  Reply(conn, 404, "Not Found", "text/plain", "not found: try /metrics, /healthz, /readyz\n", head);
  return 404;
}

// civetweb logs to stderr through this hook unless it returns nonzero; keep one line per event.
int LogMessage(const mg_connection*, const char* message) {
  std::fprintf(stderr, "leapcache-server: admin http: %s\n", message);
  return 1;
}

// Opens and closes one TCP connection to host:port (numeric IPv4 or IPv6), ignoring failures.
void Poke(const std::string& host, int port) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    return;
  }
  const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  close(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdminHttpServer>> AdminHttpServer::Start(const std::string& address,
                                                                        AdminHandlers handlers) {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return hp.status();
  const std::string host = hp->host == "localhost" ? "127.0.0.1" : hp->host;
  // Where Stop() can reach the listener: a wildcard address is reached through loopback.
  const std::string wake_host = host == "0.0.0.0" ? "127.0.0.1" : host == "::" ? "::1" : host;
  const std::string ports = FormatHostPort(host, hp->port);
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });

  std::unique_ptr<AdminHttpServer> server(new AdminHttpServer(std::move(handlers)));
  // A worker serves one connection at a time, and a connection that sends nothing holds its
  // worker until the request timeout: with 2 workers and 10 s, two idle connections reopened every
  // 9 s failed most 2 s probes. 16 workers and a 1.5 s timeout (a probe or scrape request arrives
  // in its first packet) keep probes answered unless 16 connections are held open at once.
  const char* options[] = {"listening_ports",    ports.c_str(), "num_threads", "16",
                           "request_timeout_ms", "1500",        nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = LogMessage;
  mg_init_data init_data{&callbacks, server.get(), options};
  char error_text[256] = "";
  mg_error_data error{nullptr, error_text, sizeof(error_text)};
  server->context_ = mg_start2(&init_data, &error);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", address, ": ", error_text));
  }
  mg_set_request_handler(server->context_, "/", Handle, server.get());
  mg_server_port bound[1];
  if (mg_get_server_ports(server->context_, 1, bound) < 1) {
    return absl::InternalError(absl::StrCat("HTTP server on ", address, " reports no port"));
  }
  server->port_ = bound[0].port;
  server->wake_host_ = wake_host;
  return server;
}

AdminHttpServer::~AdminHttpServer() {
  if (context_ == nullptr) return;
  // civetweb's accept loop notices mg_stop only when its poll() returns, which it does every
  // 2 s without traffic; connecting wakes it, so stopping takes milliseconds instead.
  std::atomic<bool> stopped{false};
  std::thread stopper([this, &stopped] {
    mg_stop(context_);
    stopped = true;
  });
  while (!stopped) {
    Poke(wake_host_, port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stopper.join();
}

}  // namespace leapcache::server
