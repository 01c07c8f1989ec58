#include "client/mailbox_channel.h"

#include <utility>

namespace leapcache::client {

MailboxChannel::~MailboxChannel() { (void)End(); }

absl::Status MailboxChannel::Call(std::span<const uint8_t> request, std::vector<uint8_t>* reply,
                                  absl::Duration spin, absl::Time deadline,
                                  const std::function<bool()>& alive) {
  if (mailbox_ == nullptr) return absl::FailedPreconditionError("the channel has ended");
  const absl::Status st = mailbox_->Call(request, reply, spin, deadline, alive);
  if (st.ok()) return st;
  // The channel is gone; say why the service ended it where it did.
  const absl::Status ended = End();
  return ended.ok() || ended.code() == absl::StatusCode::kCancelled ? st : ended;
}

absl::Status MailboxChannel::End() {
  if (mailbox_ != nullptr) mailbox_->Close();
  mailbox_.reset();
  if (!finish_) return absl::OkStatus();
  context_->TryCancel();
  const grpc::Status st = std::exchange(finish_, nullptr)();
  return FromGrpcStatus(st);
}

std::optional<absl::Status> ReplyStatus(int32_t code, const std::string& message) {
  if (code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return std::nullopt;
  }
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

}  // namespace leapcache::client
