// The engine's side of a service's channel (service/grpc/mailbox_channel.h: Decode's step
// channels, DataPlane's transfer channels): the long-lived gRPC call that keeps the channel open
// on the service, and the shared-memory mailbox its first message names, mapped here. A request
// then costs two cache-line handoffs instead of a loopback RPC.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/shm_mailbox.h"
#include "client/grpc_status_conversion.h"

namespace leapcache::client {

class MailboxChannel {
 public:
  // Starts the call with `start` (on the context given) and maps the mailbox that the call's first
  // message (Event: name, capacity) names. The service's status if it refused the channel; the
  // mailbox's NOT_FOUND if it is not visible here (an engine on another host).
  template <typename Event>
  static absl::StatusOr<std::unique_ptr<MailboxChannel>> Open(
      absl::FunctionRef<std::unique_ptr<grpc::ClientReader<Event>>(grpc::ClientContext*)> start) {
    auto channel = std::unique_ptr<MailboxChannel>(new MailboxChannel());
    channel->context_ = std::make_unique<grpc::ClientContext>();
    std::shared_ptr<grpc::ClientReader<Event>> call(start(channel->context_.get()));
    channel->finish_ = [call] { return call->Finish(); };
    Event event;
    if (!call->Read(&event)) {
      // The service refused it: its status, which a cancel would hide.
      const absl::Status st = FromGrpcStatus(std::exchange(channel->finish_, nullptr)());
      return st.ok() ? absl::UnavailableError("the channel ended before it opened") : st;
    }
    absl::StatusOr<std::unique_ptr<base::ShmMailbox>> box = base::ShmMailbox::Open(event.name());
    if (!box.ok()) {
      (void)channel->End();
      return box.status();
    }
    channel->mailbox_ = *std::move(box);
    return channel;
  }

  // Ends the channel (End) if it is open.
  ~MailboxChannel();
  MailboxChannel(const MailboxChannel&) = delete;
  MailboxChannel& operator=(const MailboxChannel&) = delete;

  bool open() const { return mailbox_ != nullptr; }
  // The most bytes a request (or a reply) may take. REQUIRES: open().
  size_t capacity() const { return mailbox_->capacity(); }

  // One request, its reply's bytes in `reply` (ShmMailbox::Call). On a failure the channel is
  // ended and the status is the service's reason where the service ended it, else the mailbox's.
  // FAILED_PRECONDITION once ended.
  absl::Status Call(std::span<const uint8_t> request, std::vector<uint8_t>* reply,
                    absl::Duration spin, absl::Time deadline, const std::function<bool()>& alive);

  // Closes the mailbox (the service's side then ends the call) and returns the call's status:
  // the service's reason where it ended the channel itself, else OK or CANCELLED.
  absl::Status End();

 private:
  MailboxChannel() = default;
  std::unique_ptr<grpc::ClientContext> context_;
  std::function<grpc::Status()> finish_;  // the call's Finish, once
  std::unique_ptr<base::ShmMailbox> mailbox_;
};

// The status a channel's reply carries as (code, message); nullopt for a code that is none.
std::optional<absl::Status> ReplyStatus(int32_t code, const std::string& message);

}  // namespace leapcache::client
