#include "client/channel_security.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace leapcache::client {
namespace {

absl::StatusOr<std::string> ReadFile(const char* option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " (", path, "): cannot read: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(option, " (", path, "): file is empty"));
  }
  return text.str();
}

// Adds the bearer token to the initial metadata of every call on the channel.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;  // owned by the factory, which outlives the channel's calls
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

}  // namespace

bool IsLoopbackTarget(absl::string_view target) {
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) return true;
  for (absl::string_view scheme : {"dns:///", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) target.remove_prefix(scheme.size());
  }
  absl::string_view host;
  if (absl::StartsWith(target, "[")) {
    const size_t close = target.find(']');
    if (close == absl::string_view::npos) return false;
    host = target.substr(1, close - 1);
  } else {
    host = target.substr(0, target.rfind(':'));
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status CheckSecurityOptions(const ClientOptions& o) {
  if (o.tls_client_cert_file.empty() != o.tls_client_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_client_cert_file and tls_client_key_file must be set together");
  }
  if (!o.tls && (!o.tls_root_ca_file.empty() || !o.tls_client_cert_file.empty() ||
                 !o.tls_server_name.empty())) {
    return absl::InvalidArgumentError(
        "tls_root_ca_file, tls_client_cert_file and tls_server_name need tls = true");
  }
  if (!o.token.empty()) {
    for (char c : o.token) {
      if (c <= ' ' || c >= 0x7f) {
        return absl::InvalidArgumentError("token must be printable ASCII without spaces");
      }
    }
    if (!o.tls && !(o.allow_token_without_tls && IsLoopbackTarget(o.target))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token: refusing to send a bearer token without TLS to ", o.target,
          " (set tls; allow_token_without_tls is honoured for loopback targets only)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& options, grpc::ChannelArguments* args) {
  if (!options.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_root_ca_file.empty()) {
    absl::StatusOr<std::string> roots = ReadFile("tls_root_ca_file", options.tls_root_ca_file);
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *std::move(roots);
  }
  if (!options.tls_client_cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadFile("tls_client_cert_file", options.tls_client_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile("tls_client_key_file", options.tls_client_key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  if (!options.tls_server_name.empty()) args->SetSslTargetNameOverride(options.tls_server_name);
  return grpc::SslCredentials(ssl);
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
CallInterceptorsFor(const ClientOptions& options) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  if (!options.token.empty()) {
    out.push_back(std::make_unique<BearerTokenInterceptorFactory>(options.token));
  }
  return out;
}

}  // namespace leapcache::client
