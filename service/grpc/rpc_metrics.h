// RpcMetrics: per-RPC counts and latencies, recorded by a gRPC server interceptor so the
// handlers carry no instrumentation:
//   leapcache_rpcs_total{method,code}            calls finished, by status code
//   leapcache_rpc_duration_seconds{method}       histogram, from the call's start on the server
//                                                 to its status being sent (streams included)
// `method` is "<Service>/<Rpc>" for StateCache, DataPlane, Decode and Health; calls to any
// other path count as "unknown", so clients cannot create series at will. Calls over the
// server's in-process channel (its serving probe, service/server/serving_probe.h) are not
// counted.
#pragma once

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status_code_enum.h>

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "service/metrics/registry.h"

namespace leapcache::server {

class RpcMetrics {
 public:
  // Registers the families. `registry` must outlive this object.
  explicit RpcMetrics(metrics::Registry* registry);
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  // `method_path`: the gRPC path, "/leapcache.v1.StateCache/Lookup".
  void Record(absl::string_view method_path, grpc::StatusCode code, double seconds);

  // The interceptor factory for ServerBuilder::experimental().SetInterceptorCreators. This
  // object must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  // The label of a method path ("StateCache/Lookup", or "unknown").
  static std::string MethodLabel(absl::string_view method_path);

 private:
  metrics::Family<metrics::Counter>& calls_;
  metrics::Family<metrics::Histogram>& duration_;
};

// Whether a call's peer (ServerContext::peer()) is the server's in-process channel: gRPC names it
// "unknown" (1.51) or "inproc..."; a network client is "ipv4:...", "ipv6:..." or "unix:...".
bool IsInProcessPeer(absl::string_view peer);

// "OK", "NOT_FOUND", ...: the canonical names of status codes, as label values.
const char* StatusCodeLabel(grpc::StatusCode code);

}  // namespace leapcache::server
