// leapcache-cli's transport-security options, common to every command:
//   --tls true|false        TLS with gRPC's default roots (implied by --tls-ca)
//   --tls-ca FILE           PEM CA that signed the server's certificate
//   --tls-cert FILE --tls-key FILE   client certificate for mutual TLS
//   --tls-server-name NAME  name to verify in the server's certificate
//   --token-file FILE       bearer token (first line); else $LEAPCACHE_TOKEN
// The token is read from a file or the environment, never from the command line, where other
// users of the machine could see it in the process list.
#pragma once

#include <set>
#include <string>

#include "absl/status/status.h"
#include "client/cli/cli_args.h"
#include "leapcache/client.h"

namespace leapcache::cli {

// The option names above, without dashes.
const std::set<std::string>& SecurityOptionNames();

// Sets the TLS and token fields of `options` from `args` and $LEAPCACHE_TOKEN;
// INVALID_ARGUMENT naming the option on a bad value or an unreadable file.
absl::Status ApplySecurityOptions(const Args& args, client::ClientOptions* options);

}  // namespace leapcache::cli
