#include "service/metrics/metric_types.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace leapcache::metrics {

void Counter::Increment(double v) {
  if (!(v >= 0)) return;
  value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    if (!std::isfinite(upper_bounds_[i]) || (i > 0 && upper_bounds_[i] <= upper_bounds_[i - 1])) {
      std::fprintf(stderr, "histogram bucket bounds must be finite and strictly ascending\n");
      std::abort();
    }
  }
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  // Buckets are "less than or equal" (le): the first bound >= v.
  const size_t i = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.upper_bounds = upper_bounds_;
  s.cumulative_counts.resize(upper_bounds_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative_counts[i] = running;
  }
  // The total is the sum of the buckets read here, so +Inf is never below a finite bucket.
  s.count = running + counts_[upper_bounds_.size()].load(std::memory_order_relaxed);
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> LatencySecondsBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0};
}

}  // namespace leapcache::metrics
