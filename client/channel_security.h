// Transport security of the client's channels: TLS credentials from ClientOptions' tls_* files
// and the bearer token attached to every call. channel.h applies both to every channel it
// opens, so every client-side class authenticates the same way.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "leapcache/client.h"

namespace leapcache::client {

// INVALID_ARGUMENT naming the option: a client certificate without its key (or the reverse),
// TLS files without `tls`, a token with characters metadata cannot carry, a token without TLS
// (unless allow_token_without_tls and a loopback target).
absl::Status CheckSecurityOptions(const ClientOptions& options);

// Whether `target` ("host:port", "dns:///host:port", "ipv4:...", "[::1]:port", "unix:...")
// names this machine only.
bool IsLoopbackTarget(absl::string_view target);

// SSL credentials from the tls_* files (read now; INVALID_ARGUMENT naming an unreadable one),
// or insecure credentials without `tls`. Sets the server-name override in `args` if given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& options, grpc::ChannelArguments* args);

// The interceptors every channel gets: one adding `authorization: Bearer TOKEN` when a token is
// set, none otherwise.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
CallInterceptorsFor(const ClientOptions& options);

}  // namespace leapcache::client
