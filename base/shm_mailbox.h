// ShmMailbox: one request and its reply at a time between two processes of one host, through a
// shared-memory segment: a call costs two cache-line handoffs while both sides poll, and a futex
// wake where one side went to sleep, instead of a loopback RPC's syscalls and thread wake-ups.
//
//   server:  auto box = ShmMailbox::Create(64 << 10);        // tell the peer box->name()
//            while (...) { auto got = box->Receive(&request, spin, absl::Milliseconds(20));
//                          if (*got) box->Reply(answer); }
//   peer:    auto box = ShmMailbox::Open(name);              // unlinks the name
//            box->Call(request, &reply, spin, deadline, alive);
//
// The creating side (the server) owns the segment: a POSIX shared-memory object under a random
// 128-bit name, mode 0600 (so the peer runs as the same user), unlinked by the peer once it has
// mapped it and by the owner when it goes, so nothing else can map it later and nothing is left
// in /dev/shm. A process on another host (or in another IPC namespace) cannot open the name:
// Open's NOT_FOUND is how a caller learns that the mailbox is not for it.
//
// Neither side trusts the other's writes: every length is bounded by the capacity the reader
// knows from its own side, and the receiver copies a request out before looking at it (the peer
// may keep writing the shared bytes). A sequence number that does not follow the last one is a
// protocol error (FAILED_PRECONDITION) and closes the mailbox.
//
// Waiting: a side polls its word for `spin`, then sleeps on a futex (the other side wakes it
// only when it said it sleeps, so a polled call makes no syscall at all). Close() (or the
// destructor) marks the mailbox closed and wakes the peer, whose waits then end with
// UNAVAILABLE. One caller and one receiver: the calls of each side must not run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace leapcache::base {

class ShmMailbox {
 public:
  // The largest request or reply the mailbox carries; Create refuses more (INVALID_ARGUMENT).
  static constexpr size_t kMaxCapacity = size_t{16} << 20;

  // A new segment with room for a request and a reply of `capacity` bytes each. INTERNAL
  // (with the errno's text) if the system refuses it.
  static absl::StatusOr<std::unique_ptr<ShmMailbox>> Create(size_t capacity);
  // Maps the segment `name` (as the creator's name() gave it) and unlinks the name. NOT_FOUND
  // if no such segment is visible here; FAILED_PRECONDITION if it is not a mailbox of this
  // version; PERMISSION_DENIED if another user's.
  static absl::StatusOr<std::unique_ptr<ShmMailbox>> Open(std::string_view name);

  // Closes (waking the peer), unmaps, and unlinks the name if the owner still has it linked.
  ~ShmMailbox();
  ShmMailbox(const ShmMailbox&) = delete;
  ShmMailbox& operator=(const ShmMailbox&) = delete;

  const std::string& name() const { return name_; }
  size_t capacity() const { return capacity_; }

  // Peer side: writes `request`, wakes the receiver, and waits for its reply, which replaces
  // `reply`'s contents. Polls for `spin`, then sleeps in slices of at most 10 ms, calling
  // `alive` (if given) after each: a false answer ends the wait with UNAVAILABLE (the owner is
  // gone). INVALID_ARGUMENT for a request over the capacity; DEADLINE_EXCEEDED at `deadline`
  // (the mailbox is then closed: a late reply must not be taken for the next call's);
  // UNAVAILABLE once closed.
  absl::Status Call(std::span<const uint8_t> request, std::vector<uint8_t>* reply,
                    absl::Duration spin, absl::Time deadline,
                    const std::function<bool()>& alive = nullptr);

  // Owner side: waits up to `spin` polling and then up to `wait` sleeping for the next request.
  // True with the request copied into `request`; false if none came (the caller checks its own
  // reasons to stop and calls again). UNAVAILABLE once closed; FAILED_PRECONDITION (and the
  // mailbox closed) for a request whose length or sequence number the peer garbled.
  absl::StatusOr<bool> Receive(std::vector<uint8_t>* request, absl::Duration spin,
                               absl::Duration wait);
  // Owner side: answers the request Receive returned. INVALID_ARGUMENT over the capacity;
  // FAILED_PRECONDITION with no request to answer.
  absl::Status Reply(std::span<const uint8_t> reply);

  // Marks the mailbox closed and wakes the peer. Idempotent.
  void Close();
  bool closed() const;

 private:
  struct Shared;
  ShmMailbox(std::string name, bool owner, void* base, size_t map_bytes, size_t capacity);

  const std::string name_;
  bool owner_linked_;  // the owner has not unlinked the name yet
  void* const base_;
  const size_t map_bytes_;
  const size_t capacity_;
  Shared* const shared_;
  uint8_t* const request_area_;
  uint8_t* const reply_area_;
  uint32_t last_request_ = 0;  // owner: the last request's sequence number
  bool pending_ = false;       // owner: a request awaits its reply
  uint32_t next_call_ = 0;     // peer: the last call's sequence number
};

}  // namespace leapcache::base
