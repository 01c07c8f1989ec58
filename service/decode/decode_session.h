// DecodeSession: one engine's attached-decode session: the live states of `slots` requests for
// a head range of every linear layer of a namespace, and the operations an engine runs on them.
//
//   Step    one layer's token for a batch of requests (q, k, v, gate, beta) -> the layer's output
//   Reset   a slot starts from the zero state (a request with no prefix hit)
//   Load    a slot starts from a cached checkpoint (a prefix hit), exactly at its position
//   Commit  a slot's live state becomes a cached checkpoint under a block hash, in the store,
//           without leaving the service (the live state is unchanged)
//
// Contracts: every call checks its input first (sizes, slot range, duplicate slots in a batch,
// non-finite values, hash and position) and on a bad one returns INVALID_ARGUMENT naming it and
// changes nothing. Calls on one session are serialised; sessions run concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/core/checkpoint_store.h"
#include "service/compute/live_states.h"

namespace leapcache::decode {

using SessionId = uint64_t;

struct SessionInfo {
  SessionId id = 0;
  core::NamespaceId ns = 0;
  core::HeadRange heads;  // of every layer
  compute::DecodeShape shape;
  const char* backend = "";
  size_t state_bytes = 0;
  // Of each stored unit of the namespace (its conv state and extra bytes), which the engine keeps.
  size_t side_bytes = 0;
};

class DecodeSession {
 public:
  DecodeSession(const SessionInfo& info, std::unique_ptr<compute::LiveStates> backend,
                core::CheckpointStore* store);
  const SessionInfo& info() const { return info_; }

  // Whether Step takes vectors in device memory (of the server's GPU): the CUDA backend's
  // sessions, which check them finite on the device. False once ended.
  bool takes_device_memory() const;

  // out.o must hold batch x heads x dv elements of out.dtype.
  absl::Status Step(const compute::LayerStep& in, const compute::LayerOutput& out);
  absl::Status Reset(int slot);
  // NOT_FOUND if the store holds no checkpoint of the session's heads at `hash`.
  // Returns the checkpoint's position.
  absl::StatusOr<core::Position> Load(int slot, const core::BlockHash& hash);
  // The store's Reserve/Commit errors (ALREADY_EXISTS, RESOURCE_EXHAUSTED, ...) pass through.
  absl::Status Commit(int slot, const core::BlockHash& hash, const core::Position& position);

  // Frees the live states now and makes every later call NOT_FOUND. The table calls it when it
  // closes or reaps the session: a Step stream may still hold the session, and neither its
  // memory (which the table no longer counts) nor its use may outlive the close. Waits for a
  // call in progress.
  void End();

  // For the session table's idle reaping and stats.
  absl::Time last_used() const;
  uint64_t steps() const;          // layer steps run
  uint64_t request_steps() const;  // non-padding requests those steps advanced

 private:
  absl::Status CheckSlot(int slot) const;
  absl::Status CheckStep(const compute::LayerStep& in, const compute::LayerOutput& out) const;
  void Touch();
  // NOT_FOUND once End() ran.
  absl::Status CheckOpen() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const SessionInfo info_;
  core::CheckpointStore* const store_;
  mutable absl::Mutex mu_;
  std::unique_ptr<compute::LiveStates> backend_ ABSL_GUARDED_BY(mu_);  // null once ended
  // Atomic, not under mu_: the reaper reads it while a long step holds mu_.
  std::atomic<int64_t> last_used_ns_;
  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> request_steps_{0};
};

}  // namespace leapcache::decode
