#include "service/config/tls_credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "service/config/config_files.h"

namespace leapcache::server {
namespace {

absl::Status Invalid(const std::string& setting, const std::string& path,
                     const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(setting, " (", path, "): ", problem));
}

// The oldest error OpenSSL queued (and clears the queue), for messages.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no PEM data of the expected kind";
  char buffer[256];
  ERR_error_string_n(code, buffer, sizeof(buffer));
  return buffer;
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyDeleter>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in `pem` (at least one), the first returned.
absl::StatusOr<X509Ptr> ParseCertificates(const std::string& setting, const std::string& path,
                                          const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  X509Ptr first(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (first == nullptr) {
    return Invalid(setting, path, absl::StrCat("not a PEM certificate: ", OpenSslError()));
  }
  // The rest of the chain must parse too; stop at the clean end of the data.
  while (true) {
    X509Ptr next(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (next != nullptr) continue;
    const unsigned long code = ERR_peek_last_error();
    if (ERR_GET_LIB(code) == ERR_LIB_PEM && ERR_GET_REASON(code) == PEM_R_NO_START_LINE) {
      ERR_clear_error();
      break;
    }
    return Invalid(setting, path, absl::StrCat("bad certificate in the chain: ", OpenSslError()));
  }
  return first;
}

absl::Status CheckValidity(const std::string& path, X509* cert) {
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    return Invalid("tls_cert_file", path, "certificate is not valid yet (notBefore in the future)");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    return Invalid("tls_cert_file", path, "certificate has expired (notAfter in the past)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<ServerTlsMaterial>> LoadServerTls(const ServerConfig& config) {
  if (config.tls_cert_file.empty()) return std::nullopt;
  ERR_clear_error();
  ServerTlsMaterial tls;
  LC_ASSIGN_OR_RETURN(tls.cert_chain_pem, ReadConfigFile("tls_cert_file", config.tls_cert_file));
  LC_ASSIGN_OR_RETURN(tls.private_key_pem, ReadConfigFile("tls_key_file", config.tls_key_file));
  LC_ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificates("tls_cert_file", config.tls_cert_file,
                                                      tls.cert_chain_pem));
  LC_RETURN_IF_ERROR(CheckValidity(config.tls_cert_file, cert.get()));

  BioPtr key_bio = MemoryBio(tls.private_key_pem);
  // No passphrase callback: an encrypted key fails here instead of prompting on a terminal.
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr,
                                     [](char*, int, int, void*) { return 0; }, nullptr));
  if (key == nullptr) {
    return Invalid("tls_key_file", config.tls_key_file,
                   absl::StrCat("not an unencrypted PEM private key: ", OpenSslError()));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Invalid("tls_key_file", config.tls_key_file,
                   absl::StrCat("does not match the certificate in tls_cert_file (",
                                config.tls_cert_file, ")"));
  }
  if (!config.tls_client_ca_file.empty()) {
    LC_ASSIGN_OR_RETURN(tls.client_ca_pem,
                        ReadConfigFile("tls_client_ca_file", config.tls_client_ca_file));
    LC_RETURN_IF_ERROR(ParseCertificates("tls_client_ca_file", config.tls_client_ca_file,
                                         tls.client_ca_pem)
                           .status());
  }
  return tls;
}

}  // namespace leapcache::server
