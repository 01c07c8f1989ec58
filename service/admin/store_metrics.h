// StoreMetrics: the cache core's Stats() snapshot as leapcache_* Prometheus families, refreshed
// at scrape time (the core keeps plain counters; nothing is pushed from its hot paths).
//
// Exported (labels in braces):
//   gauges   leapcache_tier_capacity_bytes{tier}, leapcache_tier_used_bytes{tier},
//            leapcache_tier_reserved_bytes{tier}, leapcache_tier_checkpoints{tier},
//            leapcache_memory_physical_bytes{tier,format}, leapcache_memory_stored_bytes{...},
//            leapcache_memory_fp32_equivalent_bytes{...}, leapcache_memory_blobs{...},
//            leapcache_namespaces, leapcache_checkpoints, leapcache_pending_puts,
//            leapcache_read_leases, leapcache_pinned_checkpoints
//   counters leapcache_lookups_total, leapcache_lookup_hits_total, leapcache_lookup_misses_total,
//            leapcache_lookup_hit_tokens_total, leapcache_lookup_miss_tokens_total,
//            leapcache_put_reservations_total, leapcache_put_reservations_refused_total,
//            leapcache_puts_committed_total, leapcache_puts_rejected_total,
//            leapcache_puts_aborted_total, leapcache_puts_expired_total, leapcache_gets_total,
//            leapcache_get_hits_total, leapcache_get_misses_total, leapcache_deletes_total,
//            leapcache_evictions_total, leapcache_spills_total, leapcache_promotions_total,
//            leapcache_put_bytes_total, leapcache_get_bytes_total
// A (tier, format) pair that once held memory stays exported (at 0 when empty), so series do
// not vanish between scrapes.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "service/core/stats.h"
#include "service/metrics/registry.h"

namespace leapcache::server {

class StoreMetrics {
 public:
  // Registers the families. `registry` must outlive this object.
  explicit StoreMetrics(metrics::Registry* registry);
  StoreMetrics(const StoreMetrics&) = delete;
  StoreMetrics& operator=(const StoreMetrics&) = delete;

  // Brings every series up to `stats`. Counters advance by the snapshot's increase since the
  // last update. Thread-safe (scrapes may overlap).
  void Update(const core::StoreStats& stats);

 private:
  struct CounterMirror {
    metrics::Counter* counter = nullptr;
    uint64_t last = 0;
  };
  void Advance(CounterMirror& c, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  metrics::Family<metrics::Gauge>& tier_capacity_;
  metrics::Family<metrics::Gauge>& tier_used_;
  metrics::Family<metrics::Gauge>& tier_reserved_;
  metrics::Family<metrics::Gauge>& tier_checkpoints_;
  metrics::Family<metrics::Gauge>& memory_physical_;
  metrics::Family<metrics::Gauge>& memory_stored_;
  metrics::Family<metrics::Gauge>& memory_fp32_;
  metrics::Family<metrics::Gauge>& memory_blobs_;
  metrics::Gauge& namespaces_;
  metrics::Gauge& checkpoints_;
  metrics::Gauge& pending_puts_;
  metrics::Gauge& leases_;
  metrics::Gauge& pinned_;

  absl::Mutex mu_;
  std::map<std::string, CounterMirror> counters_ ABSL_GUARDED_BY(mu_);
  // (tier, format) pairs seen so far, zeroed when absent from a snapshot.
  std::set<std::pair<std::string, std::string>> formats_seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::server
