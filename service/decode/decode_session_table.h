// DecodeSessionTable: the attached-decode sessions of a server, their admission against a
// memory budget for live states, and the reaping of sessions whose engine went away.
//
// A session is opened for (namespace, head range, slots); its live states take
// compute::LiveStateBytes / the live states' pool bytes from `memory_budget`, returned on Close
// or reap. The live states are the compute backend's (service/compute: the CPU reference or the
// kernels, as the server's compute_backend chose).
// A session idle for longer than `idle_timeout` (no call at all) is closed by Reap(), which the
// table's reaper thread runs periodically: an engine that dies never holds memory for longer than
// that. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "service/compute/compute.h"
#include "service/core/checkpoint_store.h"
#include "service/decode/decode_session.h"

namespace leapcache::decode {

struct DecodeOptions {
  size_t memory_budget = size_t{1} << 30;  // live-state bytes of all sessions together
  int max_sessions = 1024;
  // Sessions one tenant (of the namespace) may hold open; 0: no limit but max_sessions.
  int max_sessions_per_tenant = 0;
  int max_slots = 4096;  // per session
  absl::Duration idle_timeout = absl::Minutes(5);
};

struct OpenRequest {
  core::NamespaceId ns = 0;
  core::HeadRange heads;  // empty: all heads
  int slots = 0;
  bool l2norm_qk = false;
  float scale = 0.0f;  // multiplies q after the norm; 0: dk^-1/2 (FLA's default)
};

struct TableStats {
  size_t sessions = 0;
  size_t state_bytes = 0;
  // refused: opens turned down for memory, the session limit or the backend (not bad input).
  uint64_t opened = 0, closed = 0, reaped = 0, refused = 0;
  // Layer steps run, and the non-padding requests they advanced, over all sessions ever.
  uint64_t steps = 0, request_steps = 0;
};

class DecodeSessionTable {
 public:
  // Starts the idle reaper (every second, or idle_timeout / 4 if shorter). `store` and `compute`
  // must outlive the table; the CPU reference when `compute` is null.
  DecodeSessionTable(const DecodeOptions& options, core::CheckpointStore* store,
                     compute::Compute* compute = nullptr);
  ~DecodeSessionTable();
  DecodeSessionTable(const DecodeSessionTable&) = delete;
  DecodeSessionTable& operator=(const DecodeSessionTable&) = delete;

  // NOT_FOUND: unknown namespace. INVALID_ARGUMENT: heads outside the namespace, slots outside
  // 1..max_slots, a negative or non-finite scale. RESOURCE_EXHAUSTED: over the memory budget,
  // max_sessions or the tenant's max_sessions_per_tenant. UNIMPLEMENTED: compute_backend=cuda and no kernels for the format.
  absl::StatusOr<SessionInfo> Open(const OpenRequest& request);
  // NOT_FOUND for an unknown (closed, reaped) session.
  absl::StatusOr<std::shared_ptr<DecodeSession>> Find(SessionId id) const;
  absl::Status Close(SessionId id);
  // Closes sessions idle since before now - idle_timeout; returns how many.
  size_t Reap(absl::Time now);
  TableStats Stats() const;

 private:
  const DecodeOptions options_;
  core::CheckpointStore* const store_;
  compute::Compute* const compute_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SessionId, std::shared_ptr<DecodeSession>> sessions_ ABSL_GUARDED_BY(mu_);
  SessionId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  size_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  TableStats stats_ ABSL_GUARDED_BY(mu_);
  // Sessions open or opening per tenant, and each session's tenant.
  absl::flat_hash_map<std::string, int> per_tenant_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SessionId, std::string> tenant_of_ ABSL_GUARDED_BY(mu_);
  // Takes a closed or reaped session's tenant count back.
  void ForgetTenantLocked(SessionId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Notification stop_reaper_;
  std::thread reaper_;
};

}  // namespace leapcache::decode
