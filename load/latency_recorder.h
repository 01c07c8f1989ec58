// Latency samples of one kind of call, kept whole (a load test makes at most millions), so the
// percentiles are exact rather than bucketed. Thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace leapcache::load {

struct LatencySummary {
  uint64_t count = 0;
  double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
};

class LatencyRecorder {
 public:
  void Record(absl::Duration d);
  // Nearest-rank percentiles of everything recorded so far.
  LatencySummary Summarize() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<double> samples_us_ ABSL_GUARDED_BY(mu_);
};

// Nearest-rank percentile q in [0, 1] of `sorted` (ascending, non-empty).
double NearestRank(const std::vector<double>& sorted, double q);

}  // namespace leapcache::load
