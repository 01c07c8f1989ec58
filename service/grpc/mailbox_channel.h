// The service's side of a channel: the requests of one engine served from a shared-memory
// mailbox (base/shm_mailbox.h) on the thread of the long-lived gRPC call that opened it
// (Decode.OpenStepChannel, DataPlane.OpenTransferChannel). What every channel does alike lives
// here: at most one channel per session (each holds a server thread for as long as it is open),
// the receive and reply loop, and looking at the call and the session between requests instead
// of per request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/shm_mailbox.h"
#include "grpcpp/server_context.h"

namespace leapcache::server {

struct MailboxChannelOptions {
  // The most bytes of a request or a reply.
  size_t capacity = 64 << 10;
  // How long the serving thread polls for the next request before it sleeps on the futex.
  // Requests that follow one another faster than this pay no wake-up; a channel costs a core
  // while it polls.
  absl::Duration spin = absl::Milliseconds(1);
  // How often a sleeping channel looks at its call and its session.
  absl::Duration check_interval = absl::Milliseconds(50);
};

// The sessions that have a channel open now: one each, so that an engine (or a caller holding
// one session) cannot tie up more of the server's threads than it has sessions. Thread-safe.
class OpenChannels {
 public:
  // Holds a session's place until destroyed.
  class Claim {
   public:
    Claim(Claim&& other) noexcept : open_(other.open_), session_(other.session_) {
      other.open_ = nullptr;
    }
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    Claim& operator=(Claim&&) = delete;
    ~Claim();

   private:
    friend class OpenChannels;
    Claim(OpenChannels* open, uint64_t session) : open_(open), session_(session) {}
    OpenChannels* open_;
    uint64_t session_;
  };

  // A claim on `session`'s channel; FAILED_PRECONDITION if the session has one open (`what`
  // names the channel in the message).
  absl::StatusOr<Claim> Open(uint64_t session, const char* what);
  int count() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_set<uint64_t> sessions_ ABSL_GUARDED_BY(mu_);
};

// Serves `mailbox` until the channel ends and returns how it ended: OK when the engine closed the
// mailbox, CANCELLED when the call was cancelled (the engine cancelled it or its connection
// dropped), the status of `still_valid` when that fails (the session ended), the mailbox's
// FAILED_PRECONDITION for a garbled request or a reply over the capacity. `serve` turns each
// request's bytes into its reply's; it is called with no lock held, one request at a time.
absl::Status ServeMailbox(
    base::ShmMailbox& mailbox, const grpc::ServerContext& context,
    const MailboxChannelOptions& options, absl::FunctionRef<absl::Status()> still_valid,
    absl::FunctionRef<void(std::span<const uint8_t> request, std::string* reply)> serve);

}  // namespace leapcache::server
