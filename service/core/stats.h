// Counters and the Stats() snapshot of the cache core. Plain atomics here; the metrics exporter
// (elsewhere) renders them as leapcache_* Prometheus series.
//
// Request counters are monotonic and updated with relaxed atomics; a snapshot reads each once, so
// fields are individually exact but not mutually atomic. The memory fields come from one
// consistent view taken under the store's memory lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace leapcache::core {

class Counter {
 public:
  void Add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// The live counters, shared by the store's parts.
struct StoreCounters {
  Counter lookups, lookup_hits, lookup_misses, lookup_hit_tokens, lookup_miss_tokens;
  Counter puts_reserved, puts_refused, puts_committed, puts_rejected, puts_aborted, puts_expired;
  Counter gets, get_hits, get_misses;
  Counter deletes, evictions, spills, promotions;
  Counter bytes_in, bytes_out;
};

struct TierStats {
  std::string name;
  uint64_t page_bytes = 0;
  uint64_t capacity_bytes = 0;  // the tier's whole pool
  uint64_t used_bytes = 0;      // pages handed out: checkpoints + reservations
  uint64_t reserved_bytes = 0;  // pages held by uncommitted puts
  uint64_t checkpoints = 0;     // checkpoints with bytes in this tier
};

// Memory of one (tier, format): what the bytes cost and what they stand for.
struct FormatMemoryStats {
  std::string tier;
  std::string format;  // NamespaceInfo::format_label
  uint64_t blobs = 0;
  uint64_t physical_bytes = 0;         // pages held, including slot padding and page tails
  uint64_t stored_bytes = 0;           // blob bytes (header + payload)
  uint64_t fp32_equivalent_bytes = 0;  // what the same states take in FP32 (dk x dv x 4 each)
};

// What one tenant holds, against its quota (options.h), and how often a quota refused it.
struct TenantStats {
  std::string tenant;
  uint64_t namespaces = 0;
  uint64_t bytes = 0;         // pages of checkpoints and reservations, every tier
  uint64_t pinned_bytes = 0;  // of which pinned
  uint64_t pending_puts = 0;
  // Refusals by quota (RESOURCE_EXHAUSTED), monotonic.
  uint64_t refused_bytes = 0, refused_pinned_bytes = 0, refused_pending_puts = 0,
           refused_namespaces = 0;
};

struct StoreStats {
  std::vector<TierStats> tiers;
  std::vector<TenantStats> tenants;  // sorted by tenant; every tenant that registered
  std::vector<FormatMemoryStats> memory;  // sorted by (tier index, format)

  // Gauges.
  uint64_t namespaces = 0;
  uint64_t checkpoints = 0;  // live checkpoints (deleted ones still leased not counted)
  uint64_t pending_puts = 0;
  uint64_t leases = 0;  // read leases held
  uint64_t pinned = 0;  // checkpoints pinned at least once

  // Monotonic counters (see StoreCounters; copied field by field).
  uint64_t lookups = 0, lookup_hits = 0, lookup_misses = 0;
  uint64_t lookup_hit_tokens = 0;   // tokens served by hits (the hit's position)
  uint64_t lookup_miss_tokens = 0;  // queried tokens not served: depth x block_tokens - hit
  uint64_t puts_reserved = 0;
  uint64_t puts_refused = 0;  // Reserve failed (bad input, conflict, no memory)
  uint64_t puts_committed = 0;
  uint64_t puts_rejected = 0;  // Commit failed validation (checksum, blob, spec)
  uint64_t puts_aborted = 0;
  uint64_t puts_expired = 0;
  uint64_t gets = 0, get_hits = 0, get_misses = 0;
  uint64_t deletes = 0;
  uint64_t evictions = 0;   // checkpoints dropped from the cache to make room
  uint64_t spills = 0;      // checkpoints moved to the next tier to make room
  uint64_t promotions = 0;  // checkpoints moved to tier 0 on a hit
  uint64_t bytes_in = 0;    // blob bytes committed
  uint64_t bytes_out = 0;   // blob bytes handed out under read leases
};

// Copies the counters into `out`'s counter fields.
void CopyCounters(const StoreCounters& c, StoreStats* out);

}  // namespace leapcache::core
