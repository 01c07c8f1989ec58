#include "service/grpc/rpc_metrics.h"

#include <grpcpp/server_context.h>

#include <google/protobuf/descriptor.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "leapcache/v1/decode.grpc.pb.h"
#include "leapcache/v1/state_cache.grpc.pb.h"

namespace leapcache::server {
namespace {

// gRPC's health service has no descriptor in this binary: its two methods, by name.
const absl::string_view kHealthMethods[] = {"Check", "Watch"};

// The three services' files. state_cache.pb.cc holds no message, so nothing else makes the linker
// take it from the static proto library; without its descriptor the pool has no StateCache.
// Reading the address of each file's descriptor table (protobuf's generated symbol) links it in
// (volatile: so the compiler keeps the reference).
const void* volatile const kServiceFiles[] = {
    &descriptor_table_leapcache_2fv1_2fstate_5fcache_2eproto,
    &descriptor_table_leapcache_2fv1_2fdata_5fplane_2eproto,
    &descriptor_table_leapcache_2fv1_2fdecode_2eproto,
};

// Every method path of the labelled services, and its label.
std::vector<std::pair<std::string, std::string>> MethodPaths() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const void* volatile const& file : kServiceFiles) {
    LC_CHECK(file != nullptr, "the leapcache service files are linked in");
  }
  for (const char* name : {v1::StateCache::service_full_name(), v1::DataPlane::service_full_name(),
                           v1::Decode::service_full_name()}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    LC_CHECK(service != nullptr, "a leapcache service descriptor is linked in");
    const std::string path = absl::StrCat("/", service->full_name(), "/");
    for (int i = 0; i < service->method_count(); ++i) {
      out.emplace_back(absl::StrCat(path, service->method(i)->name()),
                       absl::StrCat(service->name(), "/", service->method(i)->name()));
    }
  }
  for (absl::string_view m : kHealthMethods) {
    out.emplace_back(absl::StrCat("/grpc.health.v1.Health/", m), absl::StrCat("Health/", m));
  }
  return out;
}

class Interceptor final : public grpc::experimental::Interceptor {
 public:
  Interceptor(RpcMetrics::Method* method, grpc::experimental::ServerRpcInfo* info)
      : method_(method), info_(info), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // The server's own serving probe comes over its in-process channel: not a client's call.
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS) &&
        !(method_->probed() && IsInProcessPeer(info_->server_context()->peer()))) {
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
      method_->Record(methods->GetSendStatus().error_code(), elapsed.count());
    }
    methods->Proceed();
  }

 private:
  RpcMetrics::Method* const method_;
  grpc::experimental::ServerRpcInfo* const info_;
  const std::chrono::steady_clock::time_point start_;
};

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Interceptor(&metrics_->ForPath(info->method() != nullptr ? info->method() : ""),
                           info);
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
  for (auto& [path, label] : MethodPaths()) {
    auto method = std::make_unique<Method>(this, label);
    method->Calls(grpc::StatusCode::OK);
    methods_.emplace(path, std::move(method));
  }
  unknown_ = std::make_unique<Method>(this, "unknown");
}

RpcMetrics::Method::Method(RpcMetrics* owner, std::string label)
    : owner_(owner),
      label_(std::move(label)),
      probed_(label_ == "Health/Check"),
      duration_(owner->duration_.Add({{"method", label_}})) {}

metrics::Counter& RpcMetrics::Method::Calls(grpc::StatusCode code) {
  const size_t c = static_cast<size_t>(code) < calls_.size()
                       ? static_cast<size_t>(code)
                       : static_cast<size_t>(grpc::StatusCode::UNKNOWN);
  metrics::Counter* counter = calls_[c].load(std::memory_order_acquire);
  if (counter == nullptr) {
    // First call with this code: the family makes (or finds) the series, once per code.
    counter = &owner_->calls_.Add({{"method", label_}, {"code", StatusCodeLabel(code)}});
    calls_[c].store(counter, std::memory_order_release);
  }
  return *counter;
}

void RpcMetrics::Method::Record(grpc::StatusCode code, double seconds) {
  Calls(code).Increment();
  duration_.Observe(seconds);
}

RpcMetrics::Method& RpcMetrics::ForPath(absl::string_view method_path) {
  auto it = methods_.find(method_path);
  return it != methods_.end() ? *it->second : *unknown_;
}

std::string RpcMetrics::MethodLabel(absl::string_view path) {
  static const auto* const labels = [] {
    auto* m = new absl::flat_hash_map<std::string, std::string>();
    for (auto& [p, label] : MethodPaths()) m->emplace(p, label);
    return m;
  }();
  auto it = labels->find(path);
  return it != labels->end() ? it->second : "unknown";
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
