#include "service/server/tls_reloader.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace leapcache::server {

// gRPC asks at every new connection's handshake; it takes a config only when it changed.
struct TlsFetcher {
  static grpc_ssl_certificate_config_reload_status Fetch(
      void* user_data, grpc_ssl_server_certificate_config** config) {
    auto* self = static_cast<ServerTlsReloader*>(user_data);
    absl::MutexLock lock(&self->mu_);
    if (self->fetched_ == self->generation_) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    const ServerTlsMaterial& m = self->material_;
    grpc_ssl_pem_key_cert_pair pair{m.private_key_pem.c_str(), m.cert_chain_pem.c_str()};
    // Copies the strings. gRPC 1.51 asserts a root bundle on this path even when clients are
    // not asked for certificates; then the server's own chain stands in, never used (no client
    // certificate is requested, so none is verified against it).
    *config = grpc_ssl_server_certificate_config_create(
        m.client_ca_pem.empty() ? m.cert_chain_pem.c_str() : m.client_ca_pem.c_str(), &pair, 1);
    if (*config == nullptr) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
    self->fetched_ = self->generation_;
    return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
  }
};

namespace {

// gRPC 1.51's C++ API has no public way to wrap C credentials, and its SSL credentials take
// fixed material; ServerCredentials' private virtuals are how its own SSL credentials bind a
// port. This binds the port with C credentials built on the fetcher.
class FetchingServerCredentials final : public grpc::ServerCredentials {
 public:
  FetchingServerCredentials(bool mutual, ServerTlsReloader* reloader) {
    grpc_ssl_server_credentials_options* options =
        grpc_ssl_server_credentials_create_options_using_config_fetcher(
            mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            &TlsFetcher::Fetch, reloader);
    creds_ = grpc_ssl_server_credentials_create_with_options(options);  // takes `options`
  }
  ~FetchingServerCredentials() override { grpc_server_credentials_release(creds_); }

  // The service authenticates calls itself (bearer tokens in the handlers); a metadata
  // processor silently dropped would be a hole, so asking for one is a programming error.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    std::fprintf(stderr, "FetchingServerCredentials: auth metadata processors are not supported\n");
    std::abort();
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  grpc_server_credentials* creds_ = nullptr;
};

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};

// notAfter of the chain's first certificate, seconds since the epoch (LoadServerTls parsed it).
int64_t NotAfter(const std::string& chain_pem) {
  std::unique_ptr<BIO, BioDeleter> bio(
      BIO_new_mem_buf(chain_pem.data(), static_cast<int>(chain_pem.size())));
  std::unique_ptr<X509, X509Deleter> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  struct tm tm {};
  if (cert == nullptr || ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

std::string FileIdentity(const std::string& path) {
  if (path.empty()) return "";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "-";
  return absl::StrCat(st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "/", st.st_size, "/",
                      st.st_ino);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerTlsReloader>> ServerTlsReloader::Create(
    const ServerConfig& config) {
  LC_ASSIGN_OR_RETURN(std::optional<ServerTlsMaterial> tls, LoadServerTls(config));
  if (!tls.has_value()) {
    return absl::FailedPreconditionError("TLS is off (no tls_cert_file): nothing to reload");
  }
  std::unique_ptr<ServerTlsReloader> r(new ServerTlsReloader(config));
  {
    absl::MutexLock lock(&r->mu_);
    LC_RETURN_IF_ERROR(r->Adopt(*std::move(tls)));
    r->generation_ = 1;
  }
  r->credentials_ =
      std::make_shared<FetchingServerCredentials>(!config.tls_client_ca_file.empty(), r.get());
  return r;
}

ServerTlsReloader::~ServerTlsReloader() = default;

std::shared_ptr<grpc::ServerCredentials> ServerTlsReloader::credentials() { return credentials_; }

absl::Status ServerTlsReloader::Adopt(ServerTlsMaterial material) {
  if (material.client_ca_pem.empty() != config_.tls_client_ca_file.empty()) {
    return absl::FailedPreconditionError(
        "tls_client_ca_file cannot be added or removed without a restart");
  }
  not_after_ = NotAfter(material.cert_chain_pem);
  material_ = std::move(material);
  return absl::OkStatus();
}

absl::Status ServerTlsReloader::Reload() {
  absl::StatusOr<std::optional<ServerTlsMaterial>> tls = LoadServerTls(config_);
  if (!tls.ok()) {
    return absl::Status(tls.status().code(),
                        absl::StrCat("TLS not reloaded, the certificate in force stays: ",
                                     tls.status().message()));
  }
  absl::MutexLock lock(&mu_);
  if (**tls == material_) return absl::OkStatus();  // nothing new: handshakes keep theirs
  LC_RETURN_IF_ERROR(Adopt(**std::move(tls)));
  ++generation_;
  return absl::OkStatus();
}

uint64_t ServerTlsReloader::reloads() const {
  absl::MutexLock lock(&mu_);
  return generation_ - 1;
}

int64_t ServerTlsReloader::not_after() const {
  absl::MutexLock lock(&mu_);
  return not_after_;
}

std::string ServerTlsReloader::FilesIdentity() const {
  return absl::StrCat(FileIdentity(config_.tls_cert_file), "|",
                      FileIdentity(config_.tls_key_file), "|",
                      FileIdentity(config_.tls_client_ca_file));
}

}  // namespace leapcache::server
