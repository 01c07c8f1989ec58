// Open-loop Poisson arrivals: exponential gaps of mean 1/rate, independent of how fast the
// service answers (a closed loop would hide queueing by slowing down with the server).
#pragma once

#include <cstdint>
#include <random>

#include "absl/status/statusor.h"

namespace leapcache::load {

class PoissonArrivals {
 public:
  // INVALID_ARGUMENT unless rate_per_s is finite and > 0.
  static absl::StatusOr<PoissonArrivals> Create(double rate_per_s, uint64_t seed);

  // The next arrival time in seconds (the first is one gap after 0).
  double Next();

 private:
  PoissonArrivals(double rate, uint64_t seed) : rate_(rate), rng_(seed) {}
  double rate_;
  std::mt19937_64 rng_;
  double now_ = 0;
};

}  // namespace leapcache::load
