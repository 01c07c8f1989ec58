// CheckpointStore: the cache core. It stores compressed recurrent-state checkpoints of
// linear-attention layers keyed by (namespace, prefix block hash), one unit per (layer, head)
// (its blob and, where the model has them, its conv state and extra bytes: NamespaceInfo), and
// serves "the deepest checkpoint along this chain" to serving engines. It knows neither gRPC
// nor CUDA: transports call this API, and a GPU pool plugs in as a MemoryTier.
//
// Engine flow:
//   ns    = RegisterNamespace({tenant, model, format})            // idempotent
//   chain = ChainHashes(prompt tokens, block size)                // block_hash.h
//   hit   = Lookup({ns, chain, my heads, max depth, block size})  // deepest committed checkpoint
//   lease = Get(ns, chain[hit.index], my heads)                   // bytes pinned while held
//   ... later, at a block boundary i:
//   r = Reserve({ns, chain[i], position, my heads});  write r.units or Upload(r.id, ...);
//   Commit(r.id, CRC-32C of the units in (layer, head) order)    // visible atomically
//
// Contracts:
//  - A head range becomes visible only when its Commit succeeds, all of it at once, after every
//    blob passed ParseBlob with the namespace's exact BlobSpec. A put that fails, is aborted or
//    passes its deadline is never visible, and its memory returns to the pool.
//  - Puts and gets address head ranges [h0, h1) of all layers. Ranks of any tensor-parallel
//    degree put their own ranges into one checkpoint; a get hits when its range is covered by
//    committed ranges (TP=2 halves serve a TP=1 read).
//  - Lookup returns the deepest chain position whose checkpoint holds every requested head; a
//    state hit is exact-position only. Lookup is advisory: a Get right after may miss (eviction).
//  - Memory never exceeds the tiers' budgets (pools allocated once); a put that cannot fit even
//    after evicting everything evictable fails with RESOURCE_EXHAUSTED and changes nothing.
//  - Leased and pinned checkpoints are never evicted; Delete frees when the last lease drops.
//  - Bad input gets a precise status and changes nothing: unknown namespace or put (NOT_FOUND),
//    head range out of bounds, empty or over-long chain, bad position or TTL
//    (INVALID_ARGUMENT), conflicting puts (ALREADY_EXISTS / FAILED_PRECONDITION), bad checksum
//    or damaged blob (DATA_LOSS), wrong blob spec (INVALID_ARGUMENT), no memory
//    (RESOURCE_EXHAUSTED), put past its deadline (DEADLINE_EXCEEDED).
// All methods are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "service/core/checkpoint_index.h"
#include "service/core/clock.h"
#include "service/core/memory_tier.h"
#include "service/core/namespace_registry.h"
#include "service/core/options.h"
#include "service/core/read_lease.h"
#include "service/core/residency_table.h"
#include "service/core/stats.h"
#include "service/core/types.h"

namespace leapcache::core {

struct PutRequest {
  NamespaceId ns = 0;
  BlockHash hash{};
  // REQUIRES: 1 <= blocks <= kMaxChainBlocks, blocks <= tokens <= blocks * kMaxBlockTokens.
  Position position;
  // REQUIRES: 0 <= begin < end <= total_heads of the namespace.
  HeadRange heads;
  // Time to commit. ZeroDuration(): StoreOptions::default_put_ttl; at most max_put_ttl.
  absl::Duration ttl = absl::ZeroDuration();
};

// Where a reserved put's bytes go: unit u = layer * heads.size() + (head - heads.begin), each
// unit_bytes long (the blob, then the side state: NamespaceInfo). Writing through `units` and
// calling Upload are equivalent.
// REQUIRES (writers through `units`): stop writing before the deadline and before Commit or
// Abort; after that the memory may belong to someone else.
struct Reservation {
  PutId id = 0;
  absl::Time deadline;  // on the store's clock
  HeadRange heads;
  int layers = 0;
  size_t unit_bytes = 0;
  size_t side_bytes = 0;  // the last side_bytes of each unit; 0 without a side state
  // Empty if the reservation is in memory that is not host-addressable (use Upload).
  std::vector<std::span<uint8_t>> units;
  size_t num_units() const { return static_cast<size_t>(layers) * heads.size(); }
  size_t total_bytes() const { return num_units() * unit_bytes; }
  std::span<uint8_t> unit(int layer, int head) const {
    return units[static_cast<size_t>(layer) * heads.size() + (head - heads.begin)];
  }
};

struct LookupRequest {
  NamespaceId ns = 0;
  // chain[i] is the hash of the prompt's block i + 1 (chain[0]: the first block).
  // REQUIRES: 1 <= chain.size() <= kMaxChainBlocks.
  std::span<const BlockHash> chain;
  HeadRange heads;
  // Deepest block to consider (e.g. the engine's attention-KV hit); 0: the whole chain.
  int max_depth = 0;
  // The engine's block size, for the token counters. REQUIRES: 1..kMaxBlockTokens.
  int64_t block_tokens = 0;
};

struct LookupResult {
  bool hit = false;
  int index = -1;     // chain index of the hit (position.blocks == index + 1)
  Position position;  // where the engine resumes
};

class CheckpointStore {
  // Lock order (take in this order, never the reverse):
  //   0. reap_mu_                   held by ReapExpiredPuts across its reclaims
  //   1. registry_'s mutex          leaf: never held while calling out
  //   2. puts_mu_                   leaf: never held while calling out
  //   3. one CheckpointIndex shard  at most one at a time
  //   4. residency_'s mutex
  //   5. a MemoryTier's mutex       leaf
  //   (a Clock's mutex, FakeClock only, is a leaf read before taking any of these)
  // Nesting happens only as 3 -> 4 (BeginPut asks liveness, CommitPut publishes) and 4 -> 5.
  // Evictions run under 4 and unlink from the index after releasing it, which is why index
  // readers treat a dead entry id as a miss.
 public:
  // `tiers`: fastest first, 1..ResidencyTable::kMaxTiers. `clock`: nullptr for the monotonic
  // clock; otherwise it must outlive the store. INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> Create(
      const StoreOptions& options, std::vector<std::unique_ptr<MemoryTier>> tiers,
      const Clock* clock = nullptr);
  // REQUIRES: every ReadLease of this store has been released.
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // namespace_registry.h. Blobs must also fit in the smallest page of any tier.
  absl::StatusOr<NamespaceId> RegisterNamespace(const NamespaceSpec& spec);
  absl::StatusOr<NamespaceInfo> GetNamespace(NamespaceId id) const;
  // NOT_FOUND for an unknown id; FAILED_PRECONDITION when `tag` (what the caller got with the id)
  // is not 0 and not the namespace's: the id came to name another namespace.
  absl::Status CheckNamespaceTag(NamespaceId id, uint64_t tag) const;

  // Two-phase put. Reserve checks the request, claims the heads (ALREADY_EXISTS if they are
  // committed; FAILED_PRECONDITION if they overlap committed heads or another put in flight;
  // INVALID_ARGUMENT if the hash is held at another position) and the memory, evicting as
  // needed (RESOURCE_EXHAUSTED if it cannot fit).
  absl::StatusOr<Reservation> Reserve(const PutRequest& request);
  // Writes `bytes` at `offset` of the put's (layer, head)-ordered blobs. May be called in any
  // order, in chunks. OUT_OF_RANGE if the range leaves the put; NOT_FOUND for an unknown put;
  // FAILED_PRECONDITION while it is being committed; DEADLINE_EXCEEDED past its deadline.
  absl::Status Upload(PutId id, size_t offset, std::span<const uint8_t> bytes);
  // Where a put's units lie, for writers that copy into them themselves (a device copy into a
  // GPU tier's pages): each unit's first byte in (layer, head) order, in host memory
  // (cuda_device -1) or in device memory of `cuda_device`.
  struct UnitAddresses {
    int cuda_device = -1;
    std::vector<uint8_t*> units;
  };
  // Runs `write` with the put's unit addresses while the put's pages are held as an Upload holds
  // them: an Abort or the reaper meanwhile reclaims them only once `write` returned. Upload's
  // errors (NOT_FOUND, FAILED_PRECONDITION, DEADLINE_EXCEEDED), else what `write` returns.
  absl::Status WriteInPlace(PutId id, absl::FunctionRef<absl::Status(const UnitAddresses&)> write);
  // Validates (blob_check.h) and publishes the put atomically. On a validation error the put
  // stays open, unchanged, for a retry or an Abort; DEADLINE_EXCEEDED (put reclaimed) past its
  // deadline; FAILED_PRECONDITION while an Upload is running or another Commit is.
  absl::Status Commit(PutId id, uint32_t crc32c);
  // Frees an uncommitted put. NOT_FOUND if unknown; FAILED_PRECONDITION while being committed.
  absl::Status Abort(PutId id);
  // Reclaims every uncommitted put past its deadline; returns how many it found. The
  // background reaper (StoreOptions::reaper_interval) calls this. Reaps run one at a time, so on
  // return every put expired by the call has given its memory back, whichever reap took it
  // (except a put an Upload is still copying into: that Upload reclaims it on return).
  size_t ReapExpiredPuts();

  // The deepest checkpoint along the chain holding every head of `heads`. A miss is OK with
  // hit == false.
  absl::StatusOr<LookupResult> Lookup(const LookupRequest& request);
  // A read lease on `heads` of the checkpoint at `hash`; NOT_FOUND if not every head is
  // committed (or it was just evicted).
  absl::StatusOr<ReadLease> Get(NamespaceId ns, const BlockHash& hash, HeadRange heads);
  // Removes the checkpoint from the index now (puts in flight for it still commit later);
  // its memory is freed when the last lease drops. NOT_FOUND if absent.
  absl::Status Delete(NamespaceId ns, const BlockHash& hash);
  // Pinned checkpoints are never evicted nor spilled. Pins nest. NOT_FOUND if absent; Unpin:
  // FAILED_PRECONDITION if not pinned.
  absl::Status Pin(NamespaceId ns, const BlockHash& hash);
  absl::Status Unpin(NamespaceId ns, const BlockHash& hash);

  // Tiers holding the checkpoint's bytes (ascending), for tests and the admin surface.
  absl::StatusOr<std::vector<int>> ResidentTiers(NamespaceId ns, const BlockHash& hash) const;
  StoreStats Stats() const;
  const TenantQuota& tenant_quota() const { return options_.tenant_quota; }
  int num_tiers() const { return residency_.num_tiers(); }
  const MemoryTier& tier(int i) const { return residency_.tier(i); }

 private:
  // An uncommitted put. `state` and `uploads` are guarded by puts_mu_; the rest is fixed at
  // Reserve, except `placement`, which Commit hands over to the residency table.
  struct PendingPut {
    enum class State { kOpen, kCommitting, kDead };
    PutId id = 0;
    CheckpointKey key;
    const NamespaceInfo* ns = nullptr;
    Position position;
    HeadRange heads;
    Placement placement;
    absl::Time deadline;
    State state = State::kOpen;
    int uploads = 0;  // writers (Upload, WriteInPlace) copying into the placement right now
  };

  CheckpointStore(const StoreOptions& options, std::vector<std::unique_ptr<MemoryTier>> tiers,
                  const Clock& clock);
  absl::StatusOr<Reservation> ReserveImpl(const PutRequest& request);
  absl::StatusOr<const NamespaceInfo*> CheckHeads(NamespaceId ns, HeadRange heads) const;
  // Marks a put dead and removes it from puts_; true if the caller must Reclaim it now.
  bool KillLocked(PendingPut& put) ABSL_EXCLUSIVE_LOCKS_REQUIRED(puts_mu_);
  // Takes a put out of puts_ (its tenant's pending count with it).
  void ErasePutLocked(const PendingPut& put) ABSL_EXCLUSIVE_LOCKS_REQUIRED(puts_mu_);
  // RESOURCE_EXHAUSTED if another put would pass the store's or the tenant's pending bound.
  absl::Status CheckPendingLocked(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(puts_mu_);
  void Reclaim(PendingPut& put);
  // A write of [offset, offset + bytes) into an open put begins: its pages are held (uploads)
  // until EndWrite. Upload's errors; a put found past its deadline is reclaimed.
  absl::StatusOr<std::shared_ptr<PendingPut>> BeginWrite(PutId id, size_t offset, size_t bytes);
  void EndWrite(PendingPut& put);
  void Unlink(const std::vector<EvictedEntry>& evicted);
  void ReaperLoop();

  const StoreOptions options_;
  const Clock& clock_;
  StoreCounters counters_;
  ResidencyTable residency_;
  NamespaceRegistry registry_;
  CheckpointIndex index_;

  // Serialises ReapExpiredPuts (see its contract).
  absl::Mutex reap_mu_ ABSL_ACQUIRED_BEFORE(puts_mu_);
  // Puts reclaimed so far: Reserve retries when one gave memory back during its first try.
  std::atomic<uint64_t> reclaimed_puts_{0};
  mutable absl::Mutex puts_mu_;
  absl::flat_hash_map<PutId, std::shared_ptr<PendingPut>> puts_ ABSL_GUARDED_BY(puts_mu_);
  PutId next_put_id_ ABSL_GUARDED_BY(puts_mu_) = 1;
  struct TenantPuts {
    size_t pending = 0;
    uint64_t refused = 0;
  };
  // Per tenant: puts in puts_, and refusals by the pending-put quota.
  absl::flat_hash_map<std::string, TenantPuts> tenant_puts_ ABSL_GUARDED_BY(puts_mu_);

  absl::Notification stop_reaper_;
  std::thread reaper_;
};

}  // namespace leapcache::core
