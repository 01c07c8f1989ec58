#include "client/cli/cli_security.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace leapcache::cli {

const std::set<std::string>& SecurityOptionNames() {
  static const std::set<std::string>* names = new std::set<std::string>{
      "tls", "tls-ca", "tls-cert", "tls-key", "tls-server-name", "token-file"};
  return *names;
}

absl::Status ApplySecurityOptions(const Args& args, client::ClientOptions* options) {
  absl::StatusOr<bool> tls = args.Bool("tls", args.Has("tls-ca"));
  if (!tls.ok()) return tls.status();
  options->tls = *tls;
  options->tls_root_ca_file = args.Get("tls-ca", "");
  options->tls_client_cert_file = args.Get("tls-cert", "");
  options->tls_client_key_file = args.Get("tls-key", "");
  options->tls_server_name = args.Get("tls-server-name", "");
  if (args.Has("token-file")) {
    const std::string path = args.Get("token-file", "");
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file ", path, ": cannot read"));
    }
    options->token = std::string(absl::StripAsciiWhitespace(line));
    if (options->token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file ", path, ": first line empty"));
    }
  } else if (const char* env = std::getenv("LEAPCACHE_TOKEN"); env != nullptr) {
    options->token = std::string(absl::StripAsciiWhitespace(env));
  }
  return absl::OkStatus();
}

}  // namespace leapcache::cli
