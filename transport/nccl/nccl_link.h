// NcclLink: one two-rank NCCL communicator between the service (rank 0) and one engine process
// (rank 1), with a CUDA stream of its own, for point-to-point send and receive of device memory.
//
// NCCL is two-sided: every send must meet a receive of the same size posted by the peer, and
// neither can be recalled once posted. The data-plane protocol over a link keeps both sides in
// step without any extra messages (data_plane.proto says it from the engine's side):
//  - a get: the service stages the checkpoint, posts one send of all its bytes and answers the
//    RPC; the engine posts the matching receive only once it has that answer (OK, with the
//    size), so nothing is posted for a get that fails;
//  - a put: the engine posts its send before calling; the service posts the matching receive as
//    soon as the session, buffer and range resolve, before any other check, and drains the bytes
//    even when the put then fails.
// Anything that cannot be matched (a peer that died, a protocol slip) ends in a deadline, after
// which the link aborts its communicator (NCCL's kernels give up their waits) and stays dead.
//
// Creation never blocks on the peer: Start begins joining the communicator (NCCL's non-blocking
// mode) and WaitReady waits for both ranks with a deadline, so a service can answer the Attach
// RPC that hands the unique id to the engine before the engine has joined.
// A communicator is aborted, never destroyed (ncclCommDestroy can wait for operations the peer
// will never match), and on a thread of its own, so no caller waits on a broken peer.
// Built only with NCCL (LEAPCACHE_TRANSPORT_NCCL). Not thread-safe: one caller at a time
// (Cancel excepted).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/device/copy_batch_kernel.h"

namespace leapcache::transport {

class NcclLink {
 public:
  static constexpr int kServiceRank = 0;
  static constexpr int kEngineRank = 1;

  // A fresh communicator id (ncclGetUniqueId) as bytes, to hand to the peer.
  static absl::StatusOr<std::string> NewUniqueId();

  // Starts joining the communicator `unique_id` as `rank` on CUDA device `device`. `peer_pid`,
  // if not 0, is the peer's process on this host: a link whose peer process is gone fails at
  // once instead of at its deadline. INVALID_ARGUMENT for a malformed id, rank or device;
  // UNAVAILABLE if NCCL refuses to start.
  static absl::StatusOr<std::unique_ptr<NcclLink>> Start(const std::string& unique_id, int rank,
                                                         int device, pid_t peer_pid);
  // Aborts the communicator (a local operation: nothing waits for the peer).
  ~NcclLink();
  NcclLink(const NcclLink&) = delete;
  NcclLink& operator=(const NcclLink&) = delete;

  int device() const { return device_; }

  // Waits until both ranks have joined and exchanged a handshake (which connects the pair, see
  // the .cc). The peer must call it too, at about the same time. DEADLINE_EXCEEDED (the link is
  // then dead) or UNAVAILABLE if NCCL reports an error or the peer process is gone.
  absl::Status WaitReady(absl::Time deadline);

  // Makes a wait running on another thread give up (CANCELLED; the link is then dead). The only
  // member that may be called concurrently with the others.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

  // Post one send / receive of `bytes` bytes of device memory (on this link's device) to / from
  // the peer, behind everything posted before. Waits for the communicator to be ready first.
  absl::Status PostSend(const void* device_ptr, size_t bytes, absl::Time deadline);
  absl::Status PostRecv(void* device_ptr, size_t bytes, absl::Time deadline);
  // One send and one receive posted together (one NCCL group), for a peer that posts the
  // matching receive and send in that order.
  absl::Status PostSendRecv(const void* send_ptr, size_t send_bytes, void* recv_ptr,
                            size_t recv_bytes, absl::Time deadline);
  // A post returns without waiting for NCCL to enqueue it (that may need the peer's matching
  // post, which may come only after this side's next RPC); Wait and the copies wait for it. So
  // post, then let the peer hear of it, then Wait: never two posts without a Wait between them
  // (use PostSendRecv).

  // Copies between host and device memory on the link's stream once everything posted has
  // completed (as Wait, so a peer that never matches costs the deadline, not a blocked thread),
  // and waits for the copy. The link's stream does not synchronize with other streams.
  absl::Status CopyToDevice(void* device_ptr, const void* host, size_t bytes, absl::Time deadline);
  absl::Status CopyToHost(void* host, const void* device_ptr, size_t bytes, absl::Time deadline);
  // Device-to-device copies on the link's device as one kernel launch (copy_batch_kernel.h) on
  // the link's stream, after everything posted (as the copies above), waited for.
  absl::Status CopyOnDevice(std::span<const DeviceCopy> copies, absl::Time deadline);

  // Device memory on the link's device of at least `bytes` (contents unspecified), valid until
  // the next call of Scratch or the link's end. It is allocated and freed in the link's stream
  // order (cudaMallocAsync / cudaFreeAsync), so that releasing it never waits on the device: an
  // aborted NCCL kernel may still be running, and a cudaFree would block on it.
  absl::StatusOr<void*> Scratch(size_t bytes);

  // Whether posted operations may still be running.
  bool pending() const { return pending_; }
  // Waits until everything posted has completed. On DEADLINE_EXCEEDED, an NCCL error or a peer
  // process that is gone, the communicator is aborted and every later call is UNAVAILABLE.
  absl::Status Wait(absl::Time deadline);

  // OK while the link is usable as far as this side knows.
  absl::Status health() const;

 private:
  struct State;
  NcclLink(std::unique_ptr<State> state, int device, int peer_rank, pid_t peer_pid);
  // Polls `done` (true: complete) until it says complete or fails, the deadline passes, NCCL
  // reports an error or the peer process is gone; kills the link on any failure.
  template <typename Done>
  absl::Status Poll(Done done, absl::Time deadline, const char* what);
  absl::Status Kill(absl::Status why);
  absl::Status PeerAlive() const;
  struct Op {
    bool send = false;
    void* device_ptr = nullptr;
    size_t bytes = 0;
  };
  absl::Status Post(std::span<const Op> ops, absl::Time deadline);
  // Whether NCCL has enqueued everything posted (its non-blocking mode's ncclInProgress).
  absl::StatusOr<bool> Enqueued() const;
  absl::Status WaitEnqueued(absl::Time deadline);
  absl::Status Copy(void* dst, const void* src, size_t bytes, bool to_device, absl::Time deadline);

  std::unique_ptr<State> state_;
  const int device_;
  const int peer_rank_;
  const pid_t peer_pid_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  DeviceCopy* copy_list_ = nullptr;  // CopyOnDevice's list on the device, stream-ordered too
  size_t copy_list_bytes_ = 0;
  bool ready_ = false;
  std::atomic<bool> cancelled_{false};
  bool pending_ = false;
  absl::Status dead_;
};

}  // namespace leapcache::transport
