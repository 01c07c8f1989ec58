// Zipf and Poisson statistics on large samples, within tolerances far wider than their sampling
// error (so a correct sampler passes with near certainty, a wrong one fails).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "load/poisson_arrivals.h"
#include "load/zipf.h"

namespace leapcache::load {
namespace {

TEST(Zipf, FrequenciesFollowThePowerLaw) {
  absl::StatusOr<ZipfSampler> z = ZipfSampler::Create(100, 1.0);
  ASSERT_TRUE(z.ok());
  double harmonic = 0;
  for (int k = 1; k <= 100; ++k) harmonic += 1.0 / k;
  std::mt19937_64 rng(7);
  constexpr int kSamples = 1'000'000;
  std::vector<int> counts(100, 0);
  for (int i = 0; i < kSamples; ++i) ++counts[z->Sample(rng)];
  for (int k : {0, 1, 2, 4, 9, 49}) {
    const double expected = 1.0 / (k + 1) / harmonic;
    EXPECT_NEAR(z->Probability(k), expected, 1e-12);
    const double observed = static_cast<double>(counts[k]) / kSamples;
    // 5 standard errors of a binomial proportion.
    EXPECT_NEAR(observed, expected, 5 * std::sqrt(expected * (1 - expected) / kSamples)) << k;
  }
}

TEST(Zipf, ExponentZeroIsUniformAndBadArgumentsAreRejected) {
  absl::StatusOr<ZipfSampler> z = ZipfSampler::Create(10, 0.0);
  ASSERT_TRUE(z.ok());
  std::mt19937_64 rng(3);
  std::vector<int> counts(10, 0);
  for (int i = 0; i < 200'000; ++i) ++counts[z->Sample(rng)];
  for (int c : counts) EXPECT_NEAR(c / 200'000.0, 0.1, 0.005);
  EXPECT_FALSE(ZipfSampler::Create(0, 1.0).ok());
  EXPECT_FALSE(ZipfSampler::Create(10, -1.0).ok());
  EXPECT_FALSE(ZipfSampler::Create(10, NAN).ok());
}

TEST(Poisson, GapsAreExponentialWithTheRate) {
  constexpr double kRate = 40.0;
  absl::StatusOr<PoissonArrivals> p = PoissonArrivals::Create(kRate, 11);
  ASSERT_TRUE(p.ok());
  constexpr int kN = 500'000;
  double prev = 0, sum = 0, sum_sq = 0;
  std::vector<int> per_second;
  for (int i = 0; i < kN; ++i) {
    const double t = p->Next();
    ASSERT_GT(t, prev);
    const double gap = t - prev;
    sum += gap;
    sum_sq += gap * gap;
    const size_t second = static_cast<size_t>(t);
    if (per_second.size() <= second) per_second.resize(second + 1, 0);
    ++per_second[second];
    prev = t;
  }
  const double mean = sum / kN;
  const double var = sum_sq / kN - mean * mean;
  EXPECT_NEAR(mean, 1 / kRate, 0.01 / kRate);                 // mean 1/rate
  EXPECT_NEAR(var, 1 / (kRate * kRate), 0.03 / (kRate * kRate));  // variance 1/rate^2
  // Counts per whole second: Poisson, mean = variance = rate.
  per_second.pop_back();  // the last second is partial
  double cm = 0, cv = 0;
  for (int c : per_second) cm += c;
  cm /= per_second.size();
  for (int c : per_second) cv += (c - cm) * (c - cm);
  cv /= per_second.size();
  EXPECT_NEAR(cm, kRate, 0.5);
  EXPECT_NEAR(cv / cm, 1.0, 0.1);
}

TEST(Poisson, SameSeedSameArrivalsAndBadRatesRejected) {
  PoissonArrivals a = *PoissonArrivals::Create(5, 99);
  PoissonArrivals b = *PoissonArrivals::Create(5, 99);
  PoissonArrivals c = *PoissonArrivals::Create(5, 100);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const double x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
  EXPECT_FALSE(PoissonArrivals::Create(0, 1).ok());
  EXPECT_FALSE(PoissonArrivals::Create(-3, 1).ok());
  EXPECT_FALSE(PoissonArrivals::Create(INFINITY, 1).ok());
}

}  // namespace
}  // namespace leapcache::load
