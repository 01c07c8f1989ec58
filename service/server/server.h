// Server: leapcache-server's parts wired together and run: the cache core on its memory tiers,
// the gRPC service (StateCache and the standard grpc.health.v1 health service) and the admin
// HTTP endpoint (/metrics, /healthz, /readyz).
//
// Start() allocates the pools, binds both listeners (port 0: a free port, reported by the
// accessors) and serves until Shutdown(). A housekeeping thread ends the streams of clients that
// stopped taking part (stream_watchdog.h) and probes whether calls are still served
// (serving_probe.h): while they are not, health says NOT_SERVING and /readyz 503. Shutdown drains: readiness and health go to
// NOT_SERVING, new calls are refused, calls in flight get `grace` to finish and are cancelled
// after it; then the admin endpoint stops. The destructor shuts down with no grace if needed.
// Thread-safe: Shutdown may be called from any thread, once or more.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/core/checkpoint_store.h"
#include "service/config/config.h"
#include "service/server/tls_reloader.h"
#include "service/admin/decode_metrics.h"
#include "service/grpc/data_plane_service.h"
#include "service/grpc/decode_service.h"
#include "service/compute/compute.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace leapcache::metrics {
class Gauge;
class Registry;
}  // namespace leapcache::metrics

namespace leapcache::server {

class AdminHttpServer;
class Authorizer;
class DataPlaneService;
class PutPipeline;
class RpcMetrics;
class StateCacheService;
class StreamWatchdog;
class StoreMetrics;
class TenantMetrics;

// How often the housekeeping thread sweeps the streams (stream limits are at least twice this),
// and how often, and with what deadline, it probes serving; kProbeFailures failed probes in a
// row make the server not serving.
inline constexpr absl::Duration kStreamSweepInterval = absl::Milliseconds(250);
inline constexpr absl::Duration kProbeInterval = absl::Seconds(1);
inline constexpr absl::Duration kProbeDeadline = absl::Seconds(1);
inline constexpr int kProbeFailures = 3;

class Server {
 public:
  // REQUIRES: ValidateConfig(config).ok(). RESOURCE_EXHAUSTED if the pools cannot be
  // allocated, UNAVAILABLE if an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerConfig& config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound gRPC address with its real port ("127.0.0.1:41237").
  const std::string& grpc_address() const { return grpc_address_; }
  int grpc_port() const { return grpc_port_; }
  // The bound admin HTTP address and port; empty / 0 when disabled.
  const std::string& metrics_address() const { return metrics_address_; }
  int metrics_port() const { return metrics_port_; }

  void Shutdown(absl::Duration grace);
  // Reads tokens_file again and, if it loads, checks calls against it from now on; if it does
  // not (unreadable, malformed), the tokens in force stay and the error is returned.
  // FAILED_PRECONDITION for a server started without a tokens file. The housekeeping thread
  // calls this when the file changes (new contents, or a Kubernetes Secret's symlink swap).
  absl::Status ReloadTokens();
  // Reads tls_cert_file, tls_key_file and tls_client_ca_file again and, if they pass every
  // check LoadServerTls makes, new connections get the new certificate (connections already up
  // keep theirs); otherwise the material in force stays and the error is returned.
  // FAILED_PRECONDITION for a server without TLS. The housekeeping thread calls this when a file
  // changes; SIGHUP reloads both tokens and TLS.
  absl::Status ReloadTls();
  // Started, not draining, and serving calls as the last probes found.
  bool ready() const { return ready_.load() && serving_.load(); }

  core::CheckpointStore& store() { return *store_; }
  // The /metrics body as of now.
  std::string RenderMetrics() const;

 private:
  explicit Server(const ServerConfig& config);
  // The housekeeping thread's loop: sweeps streams, probes serving, until stop_housekeeping_.
  void Housekeep();
  void StopHousekeeping();

  const ServerConfig config_;
  std::unique_ptr<core::CheckpointStore> store_;
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<StoreMetrics> store_metrics_;
  std::unique_ptr<TenantMetrics> tenant_metrics_;  // with a tokens file only
  metrics::Gauge* resident_ = nullptr;             // leapcache_resident_memory_bytes
  std::unique_ptr<RpcMetrics> rpc_metrics_;
  // Dense puts' and gets' codec and attached decode's live states (compute_backend).
  std::unique_ptr<compute::Compute> compute_;
  std::unique_ptr<PutPipeline> puts_;
  // Every service's token and tenant checks (authorizer.h); declared before the services.
  std::unique_ptr<Authorizer> auth_;
  std::unique_ptr<StreamWatchdog> watchdog_;  // the streams' idle and age limits
  std::unique_ptr<StateCacheService> service_;
  // Checkpoint transfers into engines' own buffers (data_plane.proto): the sessions and the
  // movement (facade), their metrics and their gRPC service. The facade also carries the vectors
  // of data-plane decode steps, so it outlives the decode service.
  std::unique_ptr<DataPlane> data_plane_;
  std::unique_ptr<DataPlaneMetrics> data_plane_metrics_;
  std::unique_ptr<DataPlaneService> data_plane_service_;
  // Attached decode (decode.proto): live-state sessions and their gRPC service.
  std::unique_ptr<decode::DecodeSessionTable> decode_sessions_;
  std::unique_ptr<DecodeService> decode_service_;
  std::unique_ptr<DecodeMetrics> decode_metrics_;
  // The listener's TLS material (null without TLS); outlives grpc_server_, whose handshakes
  // fetch from it.
  std::unique_ptr<ServerTlsReloader> tls_;
  metrics::Counter* tls_reloads_ = nullptr;        // leapcache_tls_reloads_total{result}
  metrics::Counter* tls_reload_failures_ = nullptr;
  metrics::Gauge* tls_not_after_ = nullptr;        // leapcache_tls_certificate_not_after_seconds
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<AdminHttpServer> admin_;
  std::string grpc_address_;
  int grpc_port_ = 0;
  std::string metrics_address_;
  int metrics_port_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> serving_{true};  // the serving probe's verdict
  // The tokens file as last loaded (modification time, size, inode), to notice a change.
  std::string tokens_file_identity_ ABSL_GUARDED_BY(housekeeping_mu_);
  std::string tls_files_identity_ ABSL_GUARDED_BY(housekeeping_mu_);  // the same, of TLS files
  absl::Mutex reload_mu_;  // one reload at a time
  absl::Mutex housekeeping_mu_;
  bool stop_housekeeping_ ABSL_GUARDED_BY(housekeeping_mu_) = false;
  std::thread housekeeping_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace leapcache::server
