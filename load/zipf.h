// Zipf popularity: item k of n (0-based) is drawn with probability proportional to 1/(k+1)^s.
// Prefix-sharing workloads are skewed this way (a few system prompts and templates serve most
// requests); s = 0 is uniform. Sampling inverts a precomputed CDF (O(log n) per draw, n doubles
// of memory), exact for any s >= 0.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"

namespace leapcache::load {

class ZipfSampler {
 public:
  // INVALID_ARGUMENT unless 1 <= n <= 2^26 and s is finite and >= 0.
  static absl::StatusOr<ZipfSampler> Create(uint64_t n, double s);

  uint64_t Sample(std::mt19937_64& rng) const;
  // P(item k).
  double Probability(uint64_t k) const;
  uint64_t size() const { return cdf_.size(); }

 private:
  explicit ZipfSampler(std::vector<double> cdf) : cdf_(std::move(cdf)) {}
  std::vector<double> cdf_;  // cdf_[k] = P(item <= k); cdf_.back() == 1
};

}  // namespace leapcache::load
