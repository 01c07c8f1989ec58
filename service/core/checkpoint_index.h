// The index: which (namespace, block hash) keys have committed head ranges, at which position,
// under which entry id, and which head ranges have a put in flight. It holds no bytes; the
// residency table (residency_table.h) owns memory, leases and eviction, keyed by entry id.
//
// Sharded: a key lives in shard (hash(key) >> 32) % kNumShards behind that shard's mutex, so
// lookups of different keys rarely contend. A thread holds at most one shard lock at a time.
// Entry ids in the index may briefly name an entry the residency table has already evicted
// (evictions unlink after releasing the memory lock); readers resolve ids in the residency table,
// which is authoritative, and treat a dead id as a miss. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "service/core/head_range.h"
#include "service/core/types.h"

namespace leapcache::core {

struct IndexHit {
  uint64_t entry_id = 0;
  Position position;
};

class CheckpointIndex {
 public:
  // 16 shards: the server runs O(10) request threads (cores of one node); with 16 shards two
  // concurrent requests share a shard with probability ~1/16, while Stats() and tests that walk
  // all shards stay cheap. Lookup walks a chain one key (one shard) at a time.
  static constexpr int kNumShards = 16;

  // Registers a put of `heads` for `key` at `position`. Fails, changing nothing, with
  //  ALREADY_EXISTS      if `heads` is already committed (by a live entry),
  //  FAILED_PRECONDITION if `heads` overlaps committed heads or a put in flight,
  //  INVALID_ARGUMENT    if the key is stored or being put at another position.
  // `is_live(entry_id)` is asked, under the shard lock, whether the committed entry still lives.
  absl::Status BeginPut(const CheckpointKey& key, const Position& position, HeadRange heads,
                        absl::FunctionRef<bool(uint64_t)> is_live);
  // Forgets an in-flight put (abort, expiry, failed reservation). No-op if absent.
  void EndPut(const CheckpointKey& key, HeadRange heads);
  // Makes an in-flight put's heads committed. `publish(current_entry_id)` runs under the shard
  // lock (current is 0 if none) and returns the entry id that now holds the heads; if it differs
  // from the current one the old entry is gone and its committed heads are forgotten.
  // REQUIRES: BeginPut(key, _, heads) succeeded and was not ended.
  void CommitPut(const CheckpointKey& key, HeadRange heads,
                 absl::FunctionRef<uint64_t(uint64_t current_entry_id)> publish);

  // The entry holding `key` if every head of `heads` is committed.
  std::optional<IndexHit> Find(const CheckpointKey& key, HeadRange heads) const;
  // The entry holding `key` if any head is committed.
  std::optional<uint64_t> FindEntry(const CheckpointKey& key) const;
  // Removes the committed entry of `key` (puts in flight stay) and returns its id.
  std::optional<uint64_t> Remove(const CheckpointKey& key);
  // Removes `key`'s committed entry if it is still `entry_id` (after an eviction).
  void Unlink(const CheckpointKey& key, uint64_t entry_id);

  // Keys with committed heads, summed over shards.
  size_t committed_keys() const;

 private:
  struct Slot {
    uint64_t entry_id = 0;  // 0: nothing committed
    Position position;
    HeadRangeSet committed;
    std::vector<HeadRange> pending;  // exact ranges of puts in flight
    bool unused() const { return entry_id == 0 && pending.empty(); }
  };
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<CheckpointKey, Slot> slots ABSL_GUARDED_BY(mu);
  };

  Shard& ShardOf(const CheckpointKey& key) const;

  mutable std::array<Shard, kNumShards> shards_;
};

}  // namespace leapcache::core
