#include "service/admin/store_metrics.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace leapcache::server {
namespace {

// Every counter of the snapshot: metric name, help, field.
struct CounterField {
  const char* name;
  const char* help;
  uint64_t core::StoreStats::*field;
};

constexpr CounterField kCounters[] = {
    {"leapcache_lookups_total", "Lookup requests.", &core::StoreStats::lookups},
    {"leapcache_lookup_hits_total", "Lookups that found a checkpoint.",
     &core::StoreStats::lookup_hits},
    {"leapcache_lookup_misses_total", "Lookups that found none.", &core::StoreStats::lookup_misses},
    {"leapcache_lookup_hit_tokens_total", "Prompt tokens served by lookup hits.",
     &core::StoreStats::lookup_hit_tokens},
    {"leapcache_lookup_miss_tokens_total",
     "Prompt tokens looked up but not served (queried depth x block size - hit).",
     &core::StoreStats::lookup_miss_tokens},
    {"leapcache_put_reservations_total", "Puts reserved.", &core::StoreStats::puts_reserved},
    {"leapcache_put_reservations_refused_total",
     "Reservations refused (bad input, conflict, no memory).", &core::StoreStats::puts_refused},
    {"leapcache_puts_committed_total", "Puts committed (made visible).",
     &core::StoreStats::puts_committed},
    {"leapcache_puts_rejected_total", "Commits that failed validation (checksum, blob, format).",
     &core::StoreStats::puts_rejected},
    {"leapcache_puts_aborted_total", "Puts aborted by their client.",
     &core::StoreStats::puts_aborted},
    {"leapcache_puts_expired_total", "Puts reclaimed uncommitted past their deadline.",
     &core::StoreStats::puts_expired},
    {"leapcache_gets_total", "Get requests.", &core::StoreStats::gets},
    {"leapcache_get_hits_total", "Gets that found the checkpoint.", &core::StoreStats::get_hits},
    {"leapcache_get_misses_total", "Gets that did not.", &core::StoreStats::get_misses},
    {"leapcache_deletes_total", "Checkpoints deleted.", &core::StoreStats::deletes},
    {"leapcache_evictions_total", "Checkpoints dropped to make room.",
     &core::StoreStats::evictions},
    {"leapcache_spills_total", "Checkpoints moved to a slower tier to make room.",
     &core::StoreStats::spills},
    {"leapcache_promotions_total", "Checkpoints moved back to the primary tier on a hit.",
     &core::StoreStats::promotions},
    {"leapcache_put_bytes_total", "Blob bytes committed.", &core::StoreStats::bytes_in},
    {"leapcache_get_bytes_total", "Blob bytes read by gets.", &core::StoreStats::bytes_out},
};

}  // namespace

StoreMetrics::StoreMetrics(metrics::Registry* r)
    : tier_capacity_(r->AddGauge("leapcache_tier_capacity_bytes", "Memory pool of each tier.")),
      tier_used_(r->AddGauge("leapcache_tier_used_bytes",
                             "Pages in use per tier: checkpoints and reservations.")),
      tier_reserved_(
          r->AddGauge("leapcache_tier_reserved_bytes", "Pages held by uncommitted puts per tier.")),
      tier_checkpoints_(
          r->AddGauge("leapcache_tier_checkpoints", "Checkpoints with bytes in each tier.")),
      memory_physical_(r->AddGauge("leapcache_memory_physical_bytes",
                                   "Pages held per tier and format, padding included.")),
      memory_stored_(
          r->AddGauge("leapcache_memory_stored_bytes", "Blob bytes stored per tier and format.")),
      memory_fp32_(r->AddGauge("leapcache_memory_fp32_equivalent_bytes",
                               "What the stored states would take in FP32, per tier and format.")),
      memory_blobs_(r->AddGauge("leapcache_memory_blobs", "Blobs stored per tier and format.")),
      namespaces_(r->AddGauge("leapcache_namespaces", "Registered namespaces.").Add({})),
      checkpoints_(r->AddGauge("leapcache_checkpoints", "Live checkpoints.").Add({})),
      pending_puts_(r->AddGauge("leapcache_pending_puts", "Uncommitted puts.").Add({})),
      leases_(
          r->AddGauge("leapcache_read_leases", "Read leases held by gets in progress.").Add({})),
      pinned_(r->AddGauge("leapcache_pinned_checkpoints", "Pinned checkpoints.").Add({})) {
  absl::MutexLock lock(&mu_);
  for (const CounterField& f : kCounters) {
    counters_[f.name].counter = &r->AddCounter(f.name, f.help).Add({});
  }
}

void StoreMetrics::Advance(CounterMirror& c, uint64_t now) {
  if (now > c.last) c.counter->Increment(static_cast<double>(now - c.last));
  c.last = std::max(c.last, now);
}

void StoreMetrics::Update(const core::StoreStats& s) {
  for (const core::TierStats& t : s.tiers) {
    const metrics::Labels l{{"tier", t.name}};
    tier_capacity_.Add(l).Set(static_cast<double>(t.capacity_bytes));
    tier_used_.Add(l).Set(static_cast<double>(t.used_bytes));
    tier_reserved_.Add(l).Set(static_cast<double>(t.reserved_bytes));
    tier_checkpoints_.Add(l).Set(static_cast<double>(t.checkpoints));
  }
  namespaces_.Set(static_cast<double>(s.namespaces));
  checkpoints_.Set(static_cast<double>(s.checkpoints));
  pending_puts_.Set(static_cast<double>(s.pending_puts));
  leases_.Set(static_cast<double>(s.leases));
  pinned_.Set(static_cast<double>(s.pinned));

  absl::MutexLock lock(&mu_);
  for (const core::FormatMemoryStats& m : s.memory) formats_seen_.emplace(m.tier, m.format);
  for (const auto& key : formats_seen_) {
    const metrics::Labels l{{"tier", key.first}, {"format", key.second}};
    const core::FormatMemoryStats* m = nullptr;
    for (const core::FormatMemoryStats& x : s.memory) {
      if (x.tier == key.first && x.format == key.second) m = &x;
    }
    memory_physical_.Add(l).Set(m ? static_cast<double>(m->physical_bytes) : 0);
    memory_stored_.Add(l).Set(m ? static_cast<double>(m->stored_bytes) : 0);
    memory_fp32_.Add(l).Set(m ? static_cast<double>(m->fp32_equivalent_bytes) : 0);
    memory_blobs_.Add(l).Set(m ? static_cast<double>(m->blobs) : 0);
  }
  for (const CounterField& f : kCounters) Advance(counters_[f.name], s.*(f.field));
}

}  // namespace leapcache::server
