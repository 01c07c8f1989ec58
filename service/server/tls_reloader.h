// ServerTlsReloader: the listener's TLS material, replaceable while the server runs, so a
// rotated certificate or key takes effect without a restart (and without emptying the cache).
//
// The credentials it hands gRPC fetch their material from it at every new connection's
// handshake (gRPC's certificate-config fetcher): after Reload() new connections present the new
// chain and check clients against the new CA bundle, while connections already up keep theirs.
// Reload() reads the configured files again through LoadServerTls, with all of its checks (PEM of
// the right kind, the key matching the certificate, the certificate within its validity
// period); material that fails them is never handed to gRPC, and the material in force stays.
// Whether clients must present certificates (mutual TLS) is fixed at start: a reload that would
// add or drop tls_client_ca_file is refused. Thread-safe.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/config/config.h"
#include "service/config/tls_credentials.h"

namespace grpc {
class ServerCredentials;
}  // namespace grpc

namespace leapcache::server {

class ServerTlsReloader {
 public:
  // Loads and checks the material of `config` (LoadServerTls). REQUIRES: TLS is on
  // (tls_cert_file set) and ValidateConfig(config).ok().
  static absl::StatusOr<std::unique_ptr<ServerTlsReloader>> Create(const ServerConfig& config);
  ~ServerTlsReloader();
  ServerTlsReloader(const ServerTlsReloader&) = delete;
  ServerTlsReloader& operator=(const ServerTlsReloader&) = delete;

  // For the listening port. The reloader must outlive every server using them.
  std::shared_ptr<grpc::ServerCredentials> credentials();

  // Reads the files again; on success new handshakes use the new material. On failure nothing
  // changes and the error names the setting and the file.
  absl::Status Reload();

  // Successful reloads so far, and the notAfter of the certificate in force (seconds since
  // the epoch), for metrics and logs.
  uint64_t reloads() const;
  int64_t not_after() const;
  // The configured files' identities (modification time, size, inode), to notice a change.
  std::string FilesIdentity() const;

 private:
  explicit ServerTlsReloader(const ServerConfig& config) : config_(config) {}
  absl::Status Adopt(ServerTlsMaterial material) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  friend struct TlsFetcher;  // gRPC's fetcher (tls_reloader.cc) takes the material from here

  const ServerConfig config_;
  mutable absl::Mutex mu_;
  ServerTlsMaterial material_ ABSL_GUARDED_BY(mu_);
  int64_t not_after_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // of material_
  uint64_t fetched_ ABSL_GUARDED_BY(mu_) = 0;     // the generation gRPC holds (0: none yet)
  std::shared_ptr<grpc::ServerCredentials> credentials_;
};

}  // namespace leapcache::server
