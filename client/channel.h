// The one way the client library connects to a leapcache server: every client-side class
// (Client, DecodeSession, data-plane engines) opens its channel here, so message limits,
// keepalives and credentials are the same for all of them.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "leapcache/client.h"

namespace leapcache::client {

// Framing a message needs besides its data (tags, offsets, a Get header); the server uses the
// same margin.
inline constexpr size_t kMessageOverheadBytes = 64 << 10;

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d);

// INVALID_ARGUMENT naming the bad option.
absl::Status CheckOptions(const ClientOptions& options);

// Checks the options, then opens a channel of its own (not shared with other clients of the
// process) to options.target, connected within options.connect_timeout (UNAVAILABLE otherwise).
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectChannel(const ClientOptions& options);

}  // namespace leapcache::client
