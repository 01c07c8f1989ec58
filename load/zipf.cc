#include "load/zipf.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace leapcache::load {

absl::StatusOr<ZipfSampler> ZipfSampler::Create(uint64_t n, double s) {
  if (n < 1 || n > (uint64_t{1} << 26)) {
    return absl::InvalidArgumentError(absl::StrCat("zipf: item count must be in [1, 2^26] (got ", n, ")"));
  }
  if (!std::isfinite(s) || s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("zipf: exponent must be finite and >= 0 (got ", s, ")"));
  }
  std::vector<double> cdf(n);
  double sum = 0;
  for (uint64_t k = 0; k < n; ++k) {
    sum += std::pow(static_cast<double>(k + 1), -s);
    cdf[k] = sum;
  }
  for (double& c : cdf) c /= sum;
  cdf.back() = 1.0;
  return ZipfSampler(std::move(cdf));
}

uint64_t ZipfSampler::Sample(std::mt19937_64& rng) const {
  // 53 random bits: the same draw on every standard library (uniform_real_distribution is not
  // specified bit-exactly), so a seed fixes the workload everywhere.
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  return std::min<uint64_t>(static_cast<uint64_t>(it - cdf_.begin()), cdf_.size() - 1);
}

double ZipfSampler::Probability(uint64_t k) const {
  if (k >= cdf_.size()) return 0;
  return k == 0 ? cdf_[0] : cdf_[k] - cdf_[k - 1];
}

}  // namespace leapcache::load
