#include "service/grpc/rpc_metrics.h"

#include <grpcpp/server_context.h>

#include <chrono>
#include <initializer_list>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace leapcache::server {
namespace {

// Each service's path prefix, its label prefix and its methods: the only label values.
struct ServiceMethods {
  absl::string_view path;
  absl::string_view label;
  std::initializer_list<absl::string_view> methods;
};
const ServiceMethods kServices[] = {
    {"/leapcache.v1.StateCache/",
     "StateCache/",
     {"RegisterNamespace", "Lookup", "ReservePut", "UploadPut", "CommitPut", "AbortPut", "Get",
      "Delete", "Pin", "Unpin", "Stats"}},
    {"/leapcache.v1.DataPlane/",
     "DataPlane/",
     {"Attach", "Keepalive", "Detach", "RegisterBuffer", "ReleaseBuffer", "TransferGet",
      "TransferPut"}},
    {"/leapcache.v1.Decode/",
     "Decode/",
     {"OpenSession", "CloseSession", "ResetSlot", "LoadSlot", "CommitSlot", "Step"}},
    {"/grpc.health.v1.Health/", "Health/", {"Check", "Watch"}},
};

class Interceptor final : public grpc::experimental::Interceptor {
 public:
  Interceptor(RpcMetrics* metrics, grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics),
        info_(info),
        method_(info->method() != nullptr ? info->method() : ""),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // The server's own serving probe comes over its in-process channel: not a client's call.
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS) &&
        !IsInProcessPeer(info_->server_context()->peer())) {
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
      metrics_->Record(method_, methods->GetSendStatus().error_code(), elapsed.count());
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* const metrics_;
  grpc::experimental::ServerRpcInfo* const info_;
  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
};

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Interceptor(metrics_, info);
  }

 private:
  RpcMetrics* const metrics_;
};

}  // namespace

RpcMetrics::RpcMetrics(metrics::Registry* registry)
    : calls_(registry->AddCounter("leapcache_rpcs_total", "RPCs finished, by method and code.")),
      duration_(registry->AddHistogram("leapcache_rpc_duration_seconds",
                                       "RPC latency on the server, by method.",
                                       metrics::LatencySecondsBuckets())) {
  // Series exist from the start, so rates and quantiles are defined before the first call.
  for (const ServiceMethods& service : kServices) {
    for (absl::string_view m : service.methods) {
      const std::string label = absl::StrCat(service.label, m);
      duration_.Add({{"method", label}});
      calls_.Add({{"method", label}, {"code", "OK"}});
    }
  }
}

std::string RpcMetrics::MethodLabel(absl::string_view path) {
  for (const ServiceMethods& service : kServices) {
    if (!absl::StartsWith(path, service.path)) continue;
    const absl::string_view method = path.substr(service.path.size());
    for (absl::string_view m : service.methods) {
      if (m == method) return absl::StrCat(service.label, m);
    }
  }
  return "unknown";
}

void RpcMetrics::Record(absl::string_view method_path, grpc::StatusCode code, double seconds) {
  const std::string method = MethodLabel(method_path);
  calls_.Add({{"method", method}, {"code", StatusCodeLabel(code)}}).Increment();
  duration_.Add({{"method", method}}).Observe(seconds);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::InterceptorFactory() {
  return std::make_unique<Factory>(this);
}

bool IsInProcessPeer(absl::string_view peer) {
  return peer == "unknown" || absl::StartsWith(peer, "inproc");
}

const char* StatusCodeLabel(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace leapcache::server
