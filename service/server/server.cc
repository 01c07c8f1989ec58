#include "service/server/server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <chrono>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/core/clock.h"
#include "service/core/host_tier.h"
#ifdef LEAPCACHE_WITH_CUDA
#include "service/cuda/device_tier.h"
#include "service/cuda/host_tier_mapping.h"
#endif
#include "base/status_macros.h"
#include "service/admin/admin_http_server.h"
#include "service/admin/store_metrics.h"
#include "service/admin/tenant_metrics.h"
#include "service/config/auth_tokens.h"
#include "service/config/host_port.h"
#include "service/config/tls_credentials.h"
#include "service/server/tls_reloader.h"
#include "service/facade/put_pipeline.h"
#include "service/grpc/authorizer.h"
#include "service/grpc/data_plane_service.h"
#include "service/grpc/rpc_metrics.h"
#include "service/grpc/state_cache_service.h"
#include "service/grpc/stream_watchdog.h"
#include "service/server/serving_probe.h"
#include "service/metrics/registry.h"
#include "service/metrics/text_format.h"

namespace leapcache::server {
namespace {

constexpr char kServiceName[] = "leapcache.v1.StateCache";

absl::StatusOr<std::unique_ptr<core::CheckpointStore>> BuildStore(const ServerConfig& c) {
  std::vector<std::unique_ptr<core::MemoryTier>> tiers;
#ifdef LEAPCACHE_WITH_CUDA
  if (c.gpu_memory_budget > 0) {
    LC_ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceTier> gpu,
                        cuda::DeviceTier::Create("gpu", static_cast<int>(c.gpu_device),
                                                 c.gpu_memory_budget, c.page_bytes));
    tiers.push_back(std::move(gpu));
  }
#endif
  LC_ASSIGN_OR_RETURN(std::unique_ptr<core::HostTier> primary,
                      core::HostTier::Create("host", c.memory_budget, c.page_bytes));
  std::unique_ptr<core::HostTier> spill;
  if (c.spill_budget > 0) {
    LC_ASSIGN_OR_RETURN(spill, core::HostTier::Create("spill", c.spill_budget, c.page_bytes));
  }
#ifdef LEAPCACHE_WITH_CUDA
  const int device = static_cast<int>(c.gpu_device);
  if (c.host_tier_mapping == "on" || (c.host_tier_mapping == "auto" && cuda::HaveDevice(device))) {
    for (core::HostTier* tier : {primary.get(), spill.get()}) {
      if (tier == nullptr) continue;
      if (absl::Status st = cuda::MapHostTier(*tier, device); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat("host_tier_mapping: ", st.message()));
      }
    }
  }
#endif
  tiers.push_back(std::move(primary));
  if (spill != nullptr) tiers.push_back(std::move(spill));
  return core::CheckpointStore::Create(ToStoreOptions(c), std::move(tiers));
}

int Ms(absl::Duration d) {
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(d), INT32_MAX));
}

}  // namespace

Server::Server(const ServerConfig& config) : config_(config) {}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerConfig& config) {
  LC_RETURN_IF_ERROR(ValidateConfig(config));
  std::unique_ptr<Server> s(new Server(config));
  LC_ASSIGN_OR_RETURN(s->store_, BuildStore(config));
  s->registry_ = std::make_unique<metrics::Registry>();
  s->store_metrics_ = std::make_unique<StoreMetrics>(s->registry_.get());
  if (!config.tokens_file.empty()) {
    s->tenant_metrics_ = std::make_unique<TenantMetrics>(s->registry_.get());
  }
  s->rpc_metrics_ = std::make_unique<RpcMetrics>(s->registry_.get());
  s->registry_
      ->AddGauge("leapcache_memory_bound_bytes",
                 "What the server's resident memory stays below: ServerMemoryBound of its "
                 "settings (compare leapcache_resident_memory_bytes).")
      .Add({})
      .Set(static_cast<double>(
          ServerMemoryBound(config, static_cast<int>(std::thread::hardware_concurrency()))));
  s->resident_ = &s->registry_
                      ->AddGauge("leapcache_resident_memory_bytes",
                                 "The server process's resident memory (VmRSS) at the scrape.")
                      .Add({});
  LC_ASSIGN_OR_RETURN(const compute::Choice choice, compute::ParseChoice(config.compute_backend));
  LC_ASSIGN_OR_RETURN(s->compute_,
                      compute::MakeCompute(choice, static_cast<int>(config.gpu_device)));
  // The store was built on the monotonic clock (BuildStore passes none).
  s->puts_ =
      std::make_unique<PutPipeline>(s->store_.get(), core::MonotonicClock(), s->compute_.get());
  // TLS and tokens are read again here (LoadConfig checked them): the files may have changed.
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!config.tls_cert_file.empty()) {
    LC_ASSIGN_OR_RETURN(s->tls_, ServerTlsReloader::Create(config));
    credentials = s->tls_->credentials();
    metrics::Family<metrics::Counter>& reloads = s->registry_->AddCounter(
        "leapcache_tls_reloads_total",
        "Reloads of the listener's certificate, key and client CA (SIGHUP or a file change), by "
        "result; a failed one leaves the material in force.");
    s->tls_reloads_ = &reloads.Add({{"result", "ok"}});
    s->tls_reload_failures_ = &reloads.Add({{"result", "error"}});
    s->tls_not_after_ = &s->registry_
                             ->AddGauge("leapcache_tls_certificate_not_after_seconds",
                                        "notAfter of the certificate the listener presents, "
                                        "seconds since the epoch (alert before it passes).")
                             .Add({});
    s->tls_not_after_->Set(static_cast<double>(s->tls_->not_after()));
  }
  // One read of the tokens file and one authorizer for every service, so they all check against
  // the same table.
  std::optional<TokenTable> tokens;
  if (!config.tokens_file.empty()) {
    LC_ASSIGN_OR_RETURN(TokenTable table, TokenTable::Load(config.tokens_file));
    tokens.emplace(std::move(table));
  }
  s->auth_ =
      std::make_unique<Authorizer>(std::move(tokens), s->store_.get(), core::MonotonicClock());
  s->watchdog_ = std::make_unique<StreamWatchdog>(
      StreamLimits{config.stream_idle_timeout, config.stream_max_age}, core::MonotonicClock(),
      s->registry_.get());
  s->service_ = std::make_unique<StateCacheService>(s->store_.get(), s->puts_.get(),
                                                    s->auth_.get(), s->watchdog_.get(),
                                                    ServiceLimits{config.chunk_bytes,
                                                                  config.stats_scope == "store"},
                                                    s->compute_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config.listen, credentials, &port);
  DataPlaneOptions data_plane;
  data_plane.cuda_device = static_cast<int>(config.gpu_device);
  data_plane.compute = s->compute_.get();
  s->data_plane_ = std::make_unique<DataPlane>(s->store_.get(), s->puts_.get(), data_plane);
  s->data_plane_metrics_ = std::make_unique<DataPlaneMetrics>(s->registry_.get());
  TransferChannelOptions transfer_channels;
  transfer_channels.enabled = config.data_plane_transfer_channels;
  transfer_channels.mailbox.spin = config.data_plane_transfer_channel_spin;
  s->data_plane_service_ =
      std::make_unique<DataPlaneService>(s->data_plane_.get(), s->store_.get(), s->auth_.get(),
                                         s->data_plane_metrics_.get(), transfer_channels);
  builder.RegisterService(s->data_plane_service_.get());
  s->decode_sessions_ =
      std::make_unique<decode::DecodeSessionTable>(ToDecodeOptions(config), s->store_.get(),
                                                   s->compute_.get());
  StepChannelOptions channels;
  channels.enabled = config.decode_step_channels;
  channels.mailbox.spin = config.decode_step_channel_spin;
  s->decode_service_ = std::make_unique<DecodeService>(
      s->decode_sessions_.get(), s->store_.get(), s->auth_.get(), s->data_plane_.get(), channels);
  s->decode_metrics_ =
      std::make_unique<DecodeMetrics>(s->registry_.get(), config.decode_memory_budget);
  builder.RegisterService(s->decode_service_.get());
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(config.max_concurrent_streams));
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                             static_cast<int>(config.max_metadata_bytes));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Ms(config.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Ms(config.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Ms(config.min_client_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, Ms(config.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, Ms(config.handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  grpc::ResourceQuota quota("leapcache-server");
  quota.SetMaxThreads(static_cast<int>(config.max_threads));
  quota.Resize(config.grpc_memory_budget);
  builder.SetResourceQuota(quota);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(s->rpc_metrics_->InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));

  s->grpc_server_ = builder.BuildAndStart();
  if (s->grpc_server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", config.listen,
                                               " (address in use, or not an address here)"));
  }
  s->grpc_port_ = port;
  LC_ASSIGN_OR_RETURN(const HostPort listen, ParseHostPort(config.listen));
  s->grpc_address_ = FormatHostPort(listen.host, port);
  if (grpc::HealthCheckServiceInterface* health = s->grpc_server_->GetHealthCheckService()) {
    health->SetServingStatus(kServiceName, true);
  }
  s->housekeeping_ = std::thread([self = s.get()] { self->Housekeep(); });

  if (!config.metrics_listen.empty()) {
    Server* self = s.get();
    AdminHandlers handlers{[self] { return self->RenderMetrics(); },
                           [self] { return self->ready(); }};
    absl::StatusOr<std::unique_ptr<AdminHttpServer>> admin =
        AdminHttpServer::Start(config.metrics_listen, std::move(handlers));
    if (!admin.ok()) return admin.status();  // ~Server stops the gRPC server
    s->admin_ = std::move(admin).value();
    LC_ASSIGN_OR_RETURN(const HostPort metrics, ParseHostPort(config.metrics_listen));
    s->metrics_port_ = s->admin_->port();
    s->metrics_address_ = FormatHostPort(metrics.host, s->metrics_port_);
  }
  s->ready_ = true;
  return s;
}

namespace {

// What changes when the file does: its modification time, size and inode ("" if absent).
std::string FileIdentity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "/", st.st_size, "/",
                      st.st_ino);
}

}  // namespace

absl::Status Server::ReloadTokens() {
  if (config_.tokens_file.empty()) {
    return absl::FailedPreconditionError("the server was started without a tokens_file");
  }
  absl::MutexLock lock(&reload_mu_);
  absl::StatusOr<TokenTable> table = TokenTable::Load(config_.tokens_file);
  if (!table.ok()) {
    return absl::Status(table.status().code(),
                        absl::StrCat("tokens_file not reloaded, the tokens in force stay: ",
                                     table.status().message()));
  }
  auth_->ReplaceTokens(*std::move(table));
  return absl::OkStatus();
}

absl::Status Server::ReloadTls() {
  if (tls_ == nullptr) {
    return absl::FailedPreconditionError("the server was started without TLS (no tls_cert_file)");
  }
  absl::MutexLock lock(&reload_mu_);
  const absl::Status st = tls_->Reload();
  (st.ok() ? tls_reloads_ : tls_reload_failures_)->Increment();
  tls_not_after_->Set(static_cast<double>(tls_->not_after()));
  return st;
}

void Server::Housekeep() {
  ServingProbe probe(grpc_server_->InProcessChannel(grpc::ChannelArguments()), kProbeDeadline,
                     kProbeFailures);
  absl::Time next_probe = absl::Now() + kProbeInterval;
  absl::MutexLock lock(&housekeeping_mu_);
  if (!config_.tokens_file.empty()) tokens_file_identity_ = FileIdentity(config_.tokens_file);
  if (tls_ != nullptr) tls_files_identity_ = tls_->FilesIdentity();
  while (!housekeeping_mu_.AwaitWithTimeout(absl::Condition(&stop_housekeeping_),
                                            kStreamSweepInterval)) {
    housekeeping_mu_.Unlock();  // streams' expiry and the probe take their own locks
    watchdog_->Sweep();
    if (absl::Now() >= next_probe) {
      const bool was = serving_.load();
      const bool now = probe.Probe();
      if (now != was) {
        serving_ = now;
        if (grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService()) {
          health->SetServingStatus(now);  // every service, the server's own ("") included
        }
      }
      next_probe = absl::Now() + kProbeInterval;
      if (!config_.tokens_file.empty()) {
        const std::string identity = FileIdentity(config_.tokens_file);
        housekeeping_mu_.Lock();
        const bool changed = identity != tokens_file_identity_ && !identity.empty();
        tokens_file_identity_ = identity;
        housekeeping_mu_.Unlock();
        if (changed) {
          const absl::Status st = ReloadTokens();
          std::fprintf(stderr, "leapcache-server: tokens_file changed: %s\n",
                       st.ok() ? "tokens reloaded" : std::string(st.message()).c_str());
        }
      }
      if (tls_ != nullptr) {
        // A certificate and its key are often replaced one after the other: a pair caught
        // halfway fails the key check, keeps the old material, and the next change retries.
        const std::string identity = tls_->FilesIdentity();
        housekeeping_mu_.Lock();
        const bool changed = identity != tls_files_identity_;
        tls_files_identity_ = identity;
        housekeeping_mu_.Unlock();
        if (changed) {
          const absl::Status st = ReloadTls();
          std::fprintf(stderr, "leapcache-server: TLS files changed: %s\n",
                       st.ok() ? "certificate reloaded" : std::string(st.message()).c_str());
        }
      }
    }
    housekeeping_mu_.Lock();
  }
}

void Server::StopHousekeeping() {
  {
    absl::MutexLock lock(&housekeeping_mu_);
    stop_housekeeping_ = true;
  }
  if (housekeeping_.joinable()) housekeeping_.join();
}

namespace {

// VmRSS of this process, from /proc/self/statm; 0 where unreadable.
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

std::string Server::RenderMetrics() const {
  resident_->Set(static_cast<double>(ResidentBytes()));
  const core::StoreStats stats = store_->Stats();
  store_metrics_->Update(stats);
  if (tenant_metrics_ != nullptr) tenant_metrics_->Update(stats.tenants);
  if (decode_metrics_ != nullptr)
    decode_metrics_->Update(decode_sessions_->Stats(), decode_service_->open_channels());
  return metrics::SerializeText(registry_->Collect());
}

void Server::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  ready_ = false;
  // First, so that the probe cannot report SERVING again while the server drains.
  StopHousekeeping();
  if (grpc_server_ != nullptr) {
    if (grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
    }
    // Refuses new calls at once; calls in flight run until the deadline, then are cancelled.
    // Returns when every handler has returned, so no read lease outlives this line.
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
    grpc_server_->Wait();
  }
  admin_.reset();
}

}  // namespace leapcache::server
