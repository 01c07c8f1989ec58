// DecodeMetrics: the attached-decode session table's snapshot as leapcache_decode_* Prometheus
// families, refreshed at scrape time like StoreMetrics.
//
//   gauges   leapcache_decode_sessions, leapcache_decode_state_bytes,
//            leapcache_decode_memory_budget_bytes, leapcache_decode_step_channels (open step
//            channels: a same-host engine's shared-memory mailbox, decode.proto)
//   counters leapcache_decode_sessions_opened_total, leapcache_decode_sessions_closed_total,
//            leapcache_decode_sessions_reaped_total, leapcache_decode_sessions_refused_total,
//            leapcache_decode_steps_total, leapcache_decode_request_steps_total
#pragma once

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "service/decode/decode_session_table.h"
#include "service/metrics/registry.h"

namespace leapcache::server {

class DecodeMetrics {
 public:
  // Registers the families. `registry` must outlive this object.
  DecodeMetrics(metrics::Registry* registry, uint64_t memory_budget);
  DecodeMetrics(const DecodeMetrics&) = delete;
  DecodeMetrics& operator=(const DecodeMetrics&) = delete;

  // Thread-safe; counters advance by the snapshot's increase since the last update.
  void Update(const decode::TableStats& stats, int step_channels);

 private:
  struct Mirror {
    metrics::Counter* counter = nullptr;
    uint64_t decode::TableStats::*field = nullptr;
    uint64_t last = 0;
  };
  metrics::Gauge& sessions_;
  metrics::Gauge& state_bytes_;
  metrics::Gauge& step_channels_;
  absl::Mutex mu_;
  std::vector<Mirror> counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::server
