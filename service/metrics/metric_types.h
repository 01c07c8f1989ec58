// The three metric types of the leapcache_* exposition, shaped like prometheus-cpp's: a Counter
// only goes up, a Gauge is set to any value, a Histogram counts observations into fixed buckets.
// All methods are thread-safe and lock-free; Families (family.h) own the instances.
//
// Values are doubles, as in the exposition format. A counter of bytes or events stays exact up
// to 2^53, which no process reaches.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace leapcache::metrics {

class Counter {
 public:
  // REQUIRES: v >= 0 (a counter never goes down; negative increments are ignored).
  void Increment(double v = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Increment(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  void Decrement(double v = 1.0) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Bucket counts, cumulative as the exposition format wants them.
struct HistogramSnapshot {
  std::vector<double> upper_bounds;         // finite, ascending; +Inf is implied
  std::vector<uint64_t> cumulative_counts;  // per upper bound
  uint64_t count = 0;                       // all observations (the +Inf bucket)
  double sum = 0;
};

class Histogram {
 public:
  // REQUIRES: upper_bounds finite and strictly ascending (checked; aborts otherwise).
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  HistogramSnapshot Snapshot() const;

 private:
  const std::vector<double> upper_bounds_;
  // Per bucket, not cumulative; the last one is the +Inf bucket.
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

// Bucket bounds for request latencies in seconds: 50 us (an in-memory lookup over loopback) to
// 10 s (a large dense put on a busy host), about 2.5x apart.
std::vector<double> LatencySecondsBuckets();

}  // namespace leapcache::metrics
