#include "load/latency_recorder.h"

#include <algorithm>
#include <cmath>

namespace leapcache::load {

void LatencyRecorder::Record(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  samples_us_.push_back(absl::ToDoubleMicroseconds(d));
}

double NearestRank(const std::vector<double>& sorted, double q) {
  const size_t n = sorted.size();
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  return sorted[rank - 1];
}

LatencySummary LatencyRecorder::Summarize() const {
  std::vector<double> s;
  {
    absl::MutexLock lock(&mu_);
    s = samples_us_;
  }
  LatencySummary out;
  out.count = s.size();
  if (s.empty()) return out;
  std::sort(s.begin(), s.end());
  double sum = 0;
  for (double v : s) sum += v;
  out.mean_us = sum / static_cast<double>(s.size());
  out.p50_us = NearestRank(s, 0.50);
  out.p90_us = NearestRank(s, 0.90);
  out.p99_us = NearestRank(s, 0.99);
  out.max_us = s.back();
  return out;
}

}  // namespace leapcache::load
