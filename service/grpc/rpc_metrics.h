// RpcMetrics: per-RPC counts and latencies, recorded by a gRPC server interceptor so the
// handlers carry no instrumentation:
//   leapcache_rpcs_total{method,code}            calls finished, by status code
//   leapcache_rpc_duration_seconds{method}       histogram, from the call's start on the server
//                                                 to its status being sent (streams included)
// `method` is "<Service>/<Rpc>" for every method of StateCache, DataPlane and Decode (read from
// their descriptors, so a new RPC is labelled without a list to keep) and Health; calls to any
// other path count as "unknown", so clients cannot create series at will. Calls over the
// server's in-process channel (its serving probe, service/server/serving_probe.h) are not
// counted.
//
// Recording is on every call's path, so it takes no lock and allocates nothing: each method's
// series are found once, when the table is built, and a call's interceptor finds its method's
// entry by path in a table that never changes after that.
#pragma once

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status_code_enum.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "service/metrics/registry.h"

namespace leapcache::server {

class RpcMetrics {
 public:
  // Registers the families. `registry` must outlive this object.
  explicit RpcMetrics(metrics::Registry* registry);
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  // One method's series: the histogram and, per status code, its counter (made on first use).
  class Method {
   public:
    Method(RpcMetrics* owner, std::string label);
    const std::string& label() const { return label_; }
    // Whether the server's serving probe calls it (Health/Check): only its calls are asked
    // whether they came over the in-process channel.
    bool probed() const { return probed_; }
    void Record(grpc::StatusCode code, double seconds);
    // The calls counter of `code` (a code outside the enum counts as UNKNOWN).
    metrics::Counter& Calls(grpc::StatusCode code);

   private:
    RpcMetrics* const owner_;
    const std::string label_;
    const bool probed_;
    metrics::Histogram& duration_;
    std::array<std::atomic<metrics::Counter*>, 17> calls_{};
  };

  // The entry of a gRPC path ("/leapcache.v1.StateCache/Lookup"), or the "unknown" one.
  Method& ForPath(absl::string_view method_path);

  // `method_path`: the gRPC path, "/leapcache.v1.StateCache/Lookup".
  void Record(absl::string_view method_path, grpc::StatusCode code, double seconds) {
    ForPath(method_path).Record(code, seconds);
  }

  // The interceptor factory for ServerBuilder::experimental().SetInterceptorCreators. This
  // object must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  // The label of a method path ("StateCache/Lookup", or "unknown").
  static std::string MethodLabel(absl::string_view method_path);

 private:
  metrics::Family<metrics::Counter>& calls_;
  metrics::Family<metrics::Histogram>& duration_;
  // Built in the constructor, read-only after it: by gRPC path.
  absl::flat_hash_map<std::string, std::unique_ptr<Method>> methods_;
  std::unique_ptr<Method> unknown_;
};

// Whether a call's peer (ServerContext::peer()) is the server's in-process channel: gRPC names it
// "unknown" (1.51) or "inproc..."; a network client is "ipv4:...", "ipv6:..." or "unix:...".
bool IsInProcessPeer(absl::string_view peer);

// "OK", "NOT_FOUND", ...: the canonical names of status codes, as label values.
const char* StatusCodeLabel(grpc::StatusCode code);

}  // namespace leapcache::server
