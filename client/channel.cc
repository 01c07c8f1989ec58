#include "client/channel.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "client/channel_security.h"

namespace leapcache::client {
namespace {

int ClampToInt(int64_t v) {
  return static_cast<int>(std::clamp<int64_t>(v, 0, std::numeric_limits<int>::max()));
}

}  // namespace

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return std::chrono::system_clock::now() + std::chrono::microseconds(absl::ToInt64Microseconds(d));
}

absl::Status CheckOptions(const ClientOptions& o) {
  if (o.target.empty()) return absl::InvalidArgumentError("target is empty");
  if (o.max_message_bytes <= kMessageOverheadBytes ||
      o.max_message_bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("max_message_bytes must be in (",
                                                   kMessageOverheadBytes, ", 2^31) (got ",
                                                   o.max_message_bytes, ")"));
  }
  if (o.chunk_bytes == 0 || o.chunk_bytes > o.max_message_bytes - kMessageOverheadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes must be in [1, max_message_bytes - ", kMessageOverheadBytes,
                     "] (got ", o.chunk_bytes, ")"));
  }
  for (absl::Duration d : {o.connect_timeout, o.rpc_timeout, o.transfer_timeout, o.keepalive_time,
                           o.keepalive_timeout}) {
    if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError("timeouts and keepalive intervals must be positive");
    }
  }
  return CheckSecurityOptions(o);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectChannel(const ClientOptions& options) {
  if (absl::Status st = CheckOptions(options); !st.ok()) return st;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              ClampToInt(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              ClampToInt(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Keepalive pings may go out while no data flows (a stream waiting on the server).
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // One connection per channel, not one shared by every client of the process: clients model
  // independent engines, and one stalled transfer must not queue behind another's window.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_ENABLE_CHANNELZ, 0);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(options, &args);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel = grpc::experimental::CreateCustomChannelWithInterceptors(
      options.target, *credentials, args, CallInterceptorsFor(options));
  if (!channel->WaitForConnected(DeadlineAfter(options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", options.target, " within ",
                                               absl::FormatDuration(options.connect_timeout)));
  }
  return channel;
}

}  // namespace leapcache::client
