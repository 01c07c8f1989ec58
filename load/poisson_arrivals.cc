#include "load/poisson_arrivals.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace leapcache::load {

absl::StatusOr<PoissonArrivals> PoissonArrivals::Create(double rate_per_s, uint64_t seed) {
  if (!std::isfinite(rate_per_s) || rate_per_s <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("arrival rate must be finite and > 0 per second (got ", rate_per_s, ")"));
  }
  return PoissonArrivals(rate_per_s, seed);
}

double PoissonArrivals::Next() {
  // Inverse CDF on 53 random bits, u in (0, 1]: bit-identical across standard libraries.
  const double u = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;
  now_ += -std::log(u) / rate_;
  return now_;
}

}  // namespace leapcache::load
