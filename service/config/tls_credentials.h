// TLS of the gRPC listener: the PEM files named by the config (tls_cert_file, tls_key_file,
// tls_client_ca_file), read and checked with OpenSSL before gRPC sees them. The server's
// credentials are built from them in service/server/tls_reloader.h, which also reloads them.
//
// gRPC only reports a bad certificate or key when the first client connects (and then only in
// its log), so everything that can be checked up front is: each file is readable and holds PEM
// of the right kind, the key belongs to the first certificate of the chain, and that certificate
// is within its validity period. Errors are INVALID_ARGUMENT naming the setting and the file.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "service/config/config.h"

namespace leapcache::server {

struct ServerTlsMaterial {
  std::string cert_chain_pem;
  std::string private_key_pem;
  // Empty: clients are not asked for certificates. Otherwise they must present one signed by
  // a CA in this bundle (mutual TLS).
  std::string client_ca_pem;
  bool operator==(const ServerTlsMaterial&) const = default;
};

// nullopt when TLS is off (no tls_cert_file). REQUIRES: ValidateConfig(config).ok().
absl::StatusOr<std::optional<ServerTlsMaterial>> LoadServerTls(const ServerConfig& config);

}  // namespace leapcache::server
