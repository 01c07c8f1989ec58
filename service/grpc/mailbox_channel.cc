#include "service/grpc/mailbox_channel.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace leapcache::server {

OpenChannels::Claim::~Claim() {
  if (open_ == nullptr) return;
  absl::MutexLock lock(&open_->mu_);
  open_->sessions_.erase(session_);
}

absl::StatusOr<OpenChannels::Claim> OpenChannels::Open(uint64_t session, const char* what) {
  absl::MutexLock lock(&mu_);
  if (!sessions_.insert(session).second) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", session, " already has a ", what, " open"));
  }
  return Claim(this, session);
}

int OpenChannels::count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

absl::Status ServeMailbox(
    base::ShmMailbox& mailbox, const grpc::ServerContext& context,
    const MailboxChannelOptions& options, absl::FunctionRef<absl::Status()> still_valid,
    absl::FunctionRef<void(std::span<const uint8_t> request, std::string* reply)> serve) {
  std::vector<uint8_t> request;
  std::string reply;
  absl::Time next_check = absl::Now() + options.check_interval;
  while (true) {
    absl::StatusOr<bool> got = mailbox.Receive(&request, options.spin, options.check_interval);
    if (!got.ok()) {
      // Closed by the engine: the channel's normal end. A garbled request: the mailbox's error.
      return got.status().code() == absl::StatusCode::kUnavailable ? absl::OkStatus()
                                                                   : got.status();
    }
    // The call and the session are looked at between requests, not per request: a cancelled
    // call or an ended session stops the channel within check_interval.
    if (!*got || absl::Now() >= next_check) {
      if (context.IsCancelled()) return absl::CancelledError("the channel's call was cancelled");
      if (absl::Status st = still_valid(); !st.ok()) return st;
      next_check = absl::Now() + options.check_interval;
      if (!*got) continue;
    }
    reply.clear();
    serve(request, &reply);
    if (absl::Status sent =
            mailbox.Reply({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()});
        !sent.ok()) {
      return sent;
    }
  }
}

}  // namespace leapcache::server
