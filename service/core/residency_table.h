// The residency table: where every checkpoint's bytes live, who holds them, and what goes when
// memory runs out. It owns the memory tiers, one eviction policy per tier, read-lease and pin
// counts, and the pages of puts in flight. The index (checkpoint_index.h) refers to its entries
// by id; this table is authoritative about whether an entry still lives.
//
// Memory scheme (a page allocator, chosen over per-size slab classes): every tier is a pool of
// equal pages; a placement (one put's units, later one committed part of a checkpoint) owns whole
// pages and packs its units (blob and side state) into them at a fixed slot size (unit rounded up
// to 64 bytes), never across a page boundary. Pages are the only allocation unit, so
//  - there is no external fragmentation: any free page serves any namespace, and freeing an entry
//    returns whole pages (slab classes would strand free slots in another size's slabs and make
//    "will this put fit after eviction?" depend on which slabs empty out);
//  - whether a put fits after eviction is exact arithmetic over page counts, checked before
//    anything is evicted, so a put that cannot fit fails with RESOURCE_EXHAUSTED and changes
//    nothing;
//  - usage can never exceed the budget: the pool is allocated once and pages are all there is.
// The cost is internal waste: the tail of each page (< one slot) and the unused part of each
// placement's last page. With 1 MiB pages and 8-bit 128x128 blobs (19,520 B) that is < 2% per page
// and < one page per placement (a TP rank's 48-layer x 4-head put is ~3.7 MiB).
//
// Eviction: for a tier that must free P pages, victims are taken in the tier policy's order,
// skipping leased, pinned and busy entries, until P pages are free. With spill enabled a victim
// of tier i moves to tier i + 1 (making room there the same way) and is dropped only if that
// fails; a victim of the last tier is dropped, all tiers at once. Dropped entries are returned to
// the caller for unlinking from the index. A hit in a slower tier is promoted to tier 0 when no
// lease holds it.
//
// Tenant quotas (options.h, TenantQuota): the table counts every tenant's pages (reservations
// and committed parts, all tiers) and pinned bytes. A reservation that would pass the tenant's
// byte quota first drops the tenant's own evictable checkpoints (slowest tier first, each tier in
// its policy's order; dropped, not spilled, since a spill keeps the bytes); a pin that would pass
// its pinned-byte quota is refused.
//
// Copies made by spill and promotion run under the table's lock (host memcpy here); a GPU tier
// would make them asynchronous. Thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/core/eviction_policy.h"
#include "service/core/memory_tier.h"
#include "service/core/namespace_registry.h"
#include "service/core/options.h"
#include "service/core/stats.h"
#include "service/core/types.h"

namespace leapcache::core {

// One set of units (a (layer, head)'s blob and side state, namespace_registry.h) packed into
// whole pages of one tier.
struct Placement {
  int tier = -1;
  size_t units = 0;
  size_t unit_bytes = 0;
  size_t slot_bytes = 0;
  size_t units_per_page = 0;
  std::vector<PageId> pages;
  PageId PageOf(size_t unit) const { return pages[unit / units_per_page]; }
  size_t OffsetOf(size_t unit) const { return (unit % units_per_page) * slot_bytes; }
  // How many of the placement's bytes from byte `pos` (in unit order, padding excluded) lie
  // contiguously in one page: to the end of the unit, or of the page's run of units when slots
  // have no padding. One copy each, instead of one per unit, for tiers where a copy has a fixed
  // cost (device memory). REQUIRES: pos < units * unit_bytes.
  size_t ContiguousFrom(size_t pos) const {
    const size_t unit = pos / unit_bytes;
    const size_t run_end = slot_bytes == unit_bytes
                               ? std::min(units, (unit / units_per_page + 1) * units_per_page)
                               : unit + 1;
    return run_end * unit_bytes - pos;
  }
};

// Pages that `units` slots of `slot_bytes` need. REQUIRES: 0 < slot_bytes <= page_bytes.
size_t PagesFor(size_t units, size_t slot_bytes, size_t page_bytes);

// Where one unit of a lease lives.
struct UnitLocation {
  const MemoryTier* tier = nullptr;
  PageId page = 0;
  size_t offset = 0;
  const uint8_t* host = nullptr;  // nullptr if the tier is not host-addressable
  uint32_t crc32c = 0;             // of the unit's bytes, recorded at commit
};

// An entry dropped from the cache, to be unlinked from the index.
struct EvictedEntry {
  CheckpointKey key;
  uint64_t entry_id = 0;
};

class ResidencyTable {
 public:
  static constexpr int kMaxTiers = 4;

  // REQUIRES: 1 <= tiers.size() <= kMaxTiers, none null; counters outlives the table.
  ResidencyTable(std::vector<std::unique_ptr<MemoryTier>> tiers, const EvictionOptions& options,
                 StoreCounters* counters, const TenantQuota& quota = {});
  ResidencyTable(const ResidencyTable&) = delete;
  ResidencyTable& operator=(const ResidencyTable&) = delete;

  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  const MemoryTier& tier(int i) const { return *tiers_[i]; }
  MemoryTier& mutable_tier(int i) { return *tiers_[i]; }
  size_t min_page_bytes() const;

  // Pages for `units` units of `ns`, in the first tier where they fit, evicting (and spilling)
  // there as needed. RESOURCE_EXHAUSTED, with nothing changed, if no tier can fit them even
  // after evicting everything evictable, or if the tenant's own evictable checkpoints cannot
  // make room within its byte quota. Entries dropped are appended to *evicted.
  absl::StatusOr<Placement> Reserve(const NamespaceInfo& ns, size_t units,
                                    std::vector<EvictedEntry>* evicted);
  // Frees a reservation of `ns` that will not be committed.
  void ReleaseReservation(const NamespaceInfo& ns, const Placement& placement);

  // Turns a reservation into the committed part `heads` of entry `entry_id`, or of a new entry
  // (for `key` at `position`) if entry_id is 0 or no longer lives, with its units' CRC-32Cs in
  // (layer, head) order. Returns the entry's id.
  uint64_t AddPart(uint64_t entry_id, const CheckpointKey& key, const Position& position,
                   const NamespaceInfo& ns, HeadRange heads, Placement placement,
                   std::vector<uint32_t> unit_crcs);
  bool IsLive(uint64_t entry_id) const;

  // Takes a read lease on `heads` of a live entry and returns its units in (layer, head) order;
  // promotes it to tier 0 first when configured and unleased. NOT_FOUND if the entry is gone or
  // does not hold every head of `heads`.
  absl::StatusOr<std::vector<UnitLocation>> AcquireLease(uint64_t entry_id, HeadRange heads,
                                                         std::vector<EvictedEntry>* evicted);
  // REQUIRES: a lease taken by AcquireLease and not yet released.
  void ReleaseLease(uint64_t entry_id);

  // Deletes a live entry: it stops being live now; its bytes are freed now, or when its last
  // lease is released. False if it was not live.
  bool Remove(uint64_t entry_id);
  // NOT_FOUND if the entry is not live; Unpin: FAILED_PRECONDITION if it is not pinned. Pin:
  // RESOURCE_EXHAUSTED if a first pin would take the tenant past its pinned-byte quota.
  absl::Status Pin(uint64_t entry_id);
  absl::Status Unpin(uint64_t entry_id);

  // Tiers holding a live entry's bytes, ascending; empty if not live.
  std::vector<int> TiersOf(uint64_t entry_id) const;
  // Fills tiers, memory, checkpoints, leases and pinned.
  void FillStats(StoreStats* out) const;
  // Adds each tenant's bytes, pinned bytes and byte-quota refusals to `tenants`.
  void FillTenants(std::map<std::string, TenantStats>* tenants) const;

 private:
  struct Part {
    HeadRange heads;
    Placement placement;
    std::vector<uint32_t> unit_crcs;  // recorded at commit; bytes never change, wherever moved
  };
  struct Resident {
    uint64_t id = 0;
    CheckpointKey key;
    Position position;
    const NamespaceInfo* ns = nullptr;
    double value = 0;  // compute saved per byte (eviction_policy.h)
    std::vector<Part> parts;
    std::array<size_t, kMaxTiers> pages{};  // pages held per tier
    uint64_t last_tick = 0;
    int leases = 0;
    int pins = 0;
    uint64_t pinned_charge = 0;  // bytes counted against the tenant's pinned quota
    int busy = 0;         // being moved or chosen as a victim: not evictable meanwhile
    bool doomed = false;  // deleted while leased: bytes stay until the last lease drops
  };
  struct Usage {
    uint64_t blobs = 0, physical = 0, stored = 0, fp32 = 0;
  };
  struct TenantUsage {
    uint64_t bytes = 0, pinned_bytes = 0;
    uint64_t refused_bytes = 0, refused_pinned_bytes = 0;
  };

  Resident* FindLive(uint64_t id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool Evictable(const Resident& r) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status MakeRoom(int tier, size_t pages, std::vector<EvictedEntry>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictFromTier(Resident* r, int tier, std::vector<EvictedEntry>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every part of `r` in tier `from` to tier `to`. False, with nothing moved, if `to`
  // cannot make room or a copy fails.
  bool MoveParts(Resident* r, int from, int to, std::vector<EvictedEntry>* evicted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Picks victims (in policy order, evictable only) that would leave `pages` free in `tier`.
  // False if even all of them would not. Changes nothing.
  bool PlanVictims(int tier, size_t pages, std::vector<uint64_t>* victims) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  size_t PagesToMove(const Resident& r, int from, int to) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Moves the entry's parts in slower tiers to tier 0 when room can be made (swapping with the
  // victims when tier 0 is full). False if the entry was lost (a copy failed midway) and dropped.
  bool Promote(Resident* r, std::vector<EvictedEntry>* evicted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(Resident* r, std::vector<EvictedEntry>* evicted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeParts(Resident* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(Resident* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SyncPolicies(Resident* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Account(int sign, const NamespaceInfo& ns, const Placement& p)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Placement Layout(int tier, const NamespaceInfo& ns, size_t units) const;
  uint64_t PlacementBytes(const Placement& p) const { return p.pages.size() * tiers_[p.tier]->page_bytes(); }
  uint64_t EntryBytes(const Resident& r) const;
  // Drops the tenant's own evictable entries until `need` more bytes fit in its byte quota.
  // RESOURCE_EXHAUSTED, with nothing dropped, if they cannot.
  absl::Status MakeTenantRoom(const std::string& tenant, uint64_t need,
                              std::vector<EvictedEntry>* evicted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnchargePin(Resident* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t FreePages(int tier) const;

  const std::vector<std::unique_ptr<MemoryTier>> tiers_;
  const EvictionOptions options_;
  StoreCounters* const counters_;
  const TenantQuota quota_;

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<EvictionPolicy>> policies_ ABSL_GUARDED_BY(mu_);  // per tier
  // unique_ptr: Resident* stays valid while the map rehashes during an eviction.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Resident>> residents_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<size_t, kMaxTiers> reserved_pages_ ABSL_GUARDED_BY(mu_){};
  std::map<std::pair<int, std::string>, Usage> usage_ ABSL_GUARDED_BY(mu_);  // (tier, format)
  uint64_t live_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t leases_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pinned_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, TenantUsage> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::core
