#include "gpu/reference/compensators.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpu/format/half.h"
#include "tests/unit/gpu/test_util.h"

namespace leapcache::reference {
namespace {

using testutil::AllFinite;
using testutil::kNaN;
using testutil::RelL2;
using testutil::ReportMeasured;

constexpr uint16_t kHalfPoison = 0x7e01;  // a NaN pattern FitCompensators never writes

struct Factors {
  int dk = 0, dv = 0, r = 0;
  std::vector<uint16_t> kh, vh;  // [r][dk], [r][dv]
  std::vector<float> kf, vf;

  // sum_h K~_h U~_h^T in double.
  std::vector<float> Product() const {
    std::vector<float> p(static_cast<size_t>(dk) * dv);
    for (int a = 0; a < dk; ++a) {
      for (int j = 0; j < dv; ++j) {
        double c = 0.0;
        for (int h = 0; h < r; ++h) c += static_cast<double>(kf[h * dk + a]) * vf[h * dv + j];
        p[a * dv + j] = static_cast<float>(c);
      }
    }
    return p;
  }
  double KNorm(int h) const { return Norm(kf, h * dk, dk); }
  double VNorm(int h) const { return Norm(vf, h * dv, dv); }
  bool PairIsZero(int h) const {
    for (int a = 0; a < dk; ++a) {
      if (kh[h * dk + a] != 0) return false;
    }
    for (int j = 0; j < dv; ++j) {
      if (vh[h * dv + j] != 0) return false;
    }
    return true;
  }

 private:
  static double Norm(const std::vector<float>& x, int begin, int n) {
    double s = 0.0;
    for (int i = begin; i < begin + n; ++i) s += static_cast<double>(x[i]) * x[i];
    return std::sqrt(s);
  }
};

// Runs FitCompensators into poisoned buffers and checks every entry was written, finite, and
// that the fp32 outputs are exactly the fp16 patterns' values.
Factors Fit(const std::vector<float>& S, int dk, int dv, int r) {
  Factors f;
  f.dk = dk;
  f.dv = dv;
  f.r = r;
  f.kh.assign(static_cast<size_t>(r) * dk, kHalfPoison);
  f.vh.assign(static_cast<size_t>(r) * dv, kHalfPoison);
  f.kf.assign(f.kh.size(), kNaN);
  f.vf.assign(f.vh.size(), kNaN);
  FitCompensators(S.data(), dk, dv, r, f.kh.data(), f.vh.data(), f.kf.data(), f.vf.data());
  for (size_t i = 0; i < f.kh.size(); ++i) {
    EXPECT_NE(f.kh[i], kHalfPoison) << "kfac " << i << " not written";
    EXPECT_EQ(FloatBits(f.kf[i]), FloatBits(HalfToFloat(f.kh[i]))) << "kfac " << i;
  }
  for (size_t i = 0; i < f.vh.size(); ++i) {
    EXPECT_NE(f.vh[i], kHalfPoison) << "vfac " << i << " not written";
    EXPECT_EQ(FloatBits(f.vf[i]), FloatBits(HalfToFloat(f.vh[i]))) << "vfac " << i;
  }
  EXPECT_TRUE(AllFinite(f.kf));
  EXPECT_TRUE(AllFinite(f.vf));
  return f;
}

const std::pair<int, int> kShapes[] = {{128, 128}, {16, 32}, {64, 128}};

// A rank-r state is captured exactly by one subspace iteration; what is left is the fp16
// rounding of the factors (unit roundoff 2^-11 = 4.9e-4 each).
TEST(FitCompensators, RankRStateReconstructsToFp16Precision) {
  for (auto [dk, dv] : kShapes) {
    for (int rank = 1; rank <= kMaxRank; ++rank) {
      const uint32_t seed = 100 + rank;
      SCOPED_TRACE(std::to_string(dk) + "x" + std::to_string(dv) + " rank " + std::to_string(rank) +
                   " seed " + std::to_string(seed));
      const std::vector<float> S = testutil::LowRankState(dk, dv, rank, seed);
      const Factors f = Fit(S, dk, dv, rank);
      const double err = RelL2(f.Product(), S);
      // Measured <= 3.1e-4 over these shapes and ranks.
      EXPECT_LT(err, 1e-3);
      EXPECT_GT(err, 0.0) << "fp16 factors cannot be exact for a Gaussian state";
      for (int h = 0; h < rank; ++h) EXPECT_FALSE(f.PairIsZero(h)) << "pair " << h;
    }
  }
}

// r above the rank: the extra Gram-Schmidt columns are dependent (below 2^-16 of their norm
// before projection), so the extra pairs are exactly zero; the product is still the state.
TEST(FitCompensators, ExtraPairsOfARankDeficientStateAreZero) {
  for (auto [dk, dv] : kShapes) {
    for (auto [rank, r] : {std::pair{2, 4}, std::pair{1, 8}, std::pair{2, 8}, std::pair{5, 8}}) {
      SCOPED_TRACE(std::to_string(dk) + "x" + std::to_string(dv) + " rank " + std::to_string(rank) +
                   " r " + std::to_string(r));
      const std::vector<float> S = testutil::LowRankState(dk, dv, rank, 200 + rank);
      const Factors f = Fit(S, dk, dv, r);
      int zero_pairs = 0;
      for (int h = 0; h < r; ++h) zero_pairs += f.PairIsZero(h);
      EXPECT_EQ(zero_pairs, r - rank);
      EXPECT_LT(RelL2(f.Product(), S), 1e-3);
    }
  }
}

TEST(FitCompensators, ZeroStateGivesZeroFactors) {
  for (auto [dk, dv] : kShapes) {
    const std::vector<float> Z(testutil::Elements(dk, dv), 0.0f);
    const Factors f = Fit(Z, dk, dv, kMaxRank);
    for (uint16_t h : f.kh) ASSERT_EQ(h, 0);  // +0, not -0
    for (uint16_t h : f.vh) ASSERT_EQ(h, 0);
  }
}

TEST(FitCompensators, RankZeroWritesNothing) {
  const std::vector<float> S = testutil::RealisticState(16, 32, 1);
  uint16_t kh = kHalfPoison, vh = kHalfPoison;
  float kf = testutil::kPoison, vf = testutil::kPoison;
  FitCompensators(S.data(), 16, 32, 0, &kh, &vh, &kf, &vf);
  EXPECT_EQ(kh, kHalfPoison);
  EXPECT_EQ(vh, kHalfPoison);
  EXPECT_EQ(kf, testutil::kPoison);
  EXPECT_EQ(vf, testutil::kPoison);
}

TEST(FitCompensators, IsDeterministic) {
  const std::vector<float> S = testutil::RealisticState(64, 128, 7);
  const Factors a = Fit(S, 64, 128, 6);
  const Factors b = Fit(S, 64, 128, 6);
  EXPECT_EQ(a.kh, b.kh);
  EXPECT_EQ(a.vh, b.vh);
}

// Each pair is K_h / e_h, Qv_h * e_h with e_h = 2^floor((log2 ||K_h||) / 2) and Qv orthonormal:
// ||U~_h|| is a power of two, ||K~_h|| / ||U~_h|| is in [1, 4), and the U~_h are orthogonal.
TEST(FitCompensators, PairsAreBalancedAndValueFactorsOrthogonal) {
  for (auto [dk, dv] : kShapes) {
    for (float scale : {1e-3f, 1.0f, 300.0f}) {
      std::vector<float> S = testutil::RealisticState(dk, dv, 300);
      for (float& x : S) x *= scale;
      SCOPED_TRACE(std::to_string(dk) + "x" + std::to_string(dv) + " scale " + std::to_string(scale));
      const int r = 6;
      const Factors f = Fit(S, dk, dv, r);
      for (int h = 0; h < r; ++h) {
        ASSERT_FALSE(f.PairIsZero(h)) << h;
        const double vn = f.VNorm(h), kn = f.KNorm(h);
        EXPECT_NEAR(std::log2(vn), std::round(std::log2(vn)), 2e-3) << "pair " << h << " |U~| " << vn;
        EXPECT_GE(kn / vn, 1.0 - 2e-3) << "pair " << h;
        EXPECT_LT(kn / vn, 4.0 + 8e-3) << "pair " << h;
        for (int g = 0; g < h; ++g) {
          double dot = 0.0;
          for (int j = 0; j < dv; ++j) dot += static_cast<double>(f.vf[h * dv + j]) * f.vf[g * dv + j];
          EXPECT_LT(std::fabs(dot) / (vn * f.VNorm(g)), 2e-3) << "pairs " << g << ", " << h;
        }
      }
    }
  }
}

// The pairs carry the state's dominant structure: on the outlier-column state, four pairs remove
// most of its energy. One round from a fixed start does not reach the optimum (0.17-0.18 for
// these seeds): measured residual 0.25-0.49.
TEST(FitCompensators, CaptureOutlierColumns) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const std::vector<float> S = testutil::RealisticState(128, 128, seed);
    const Factors f = Fit(S, 128, 128, 4);
    std::vector<float> residual = S;
    const std::vector<float> p = f.Product();
    for (size_t i = 0; i < S.size(); ++i) residual[i] -= p[i];
    const double left = testutil::L2(residual) / testutil::L2(S);
    ReportMeasured("outlier_residual_seed" + std::to_string(seed), left);
    EXPECT_LT(left, 0.6) << "seed " << seed;
  }
}

// Balancing keeps both factors inside fp16 up to singular values of ~4e9; past that a pair is
// stored as zeros (the residual carries it) and everything stays finite.
TEST(FitCompensators, LargeStatesStayFiniteAndDropPairsPastFp16Range) {
  const std::vector<float> base = testutil::LowRankState(128, 128, 2, 400);
  for (float scale : {1e6f, 1e7f}) {  // top singular value ~1e8 and ~1e9
    std::vector<float> S = base;
    for (float& x : S) x *= scale;
    const Factors f = Fit(S, 128, 128, 2);
    EXPECT_LT(RelL2(f.Product(), S), 1e-3) << "scale " << scale;
  }
  for (float scale : {1e10f, 1e15f}) {  // far past fp16: both pairs dropped
    std::vector<float> S = base;
    for (float& x : S) x *= scale;
    const Factors f = Fit(S, 128, 128, 2);
    EXPECT_TRUE(f.PairIsZero(0) && f.PairIsZero(1)) << "scale " << scale;
  }
  // Subnormal states: finite (the factors underflow fp16).
  std::vector<float> tiny = base;
  for (float& x : tiny) x *= 1e-39f;
  Fit(tiny, 128, 128, 4);
}

TEST(CompensatorStart, FixedValuesInRange) {
  // Pinned values: the start matrix is part of the format (the GPU kernels use the same hash),
  // so a change here changes every leap blob.
  EXPECT_EQ(CompensatorStart(0, 0), -0.984469771f);
  EXPECT_EQ(CompensatorStart(0, 1), 0.244639158f);
  EXPECT_EQ(CompensatorStart(1, 2), -0.742201805f);
  EXPECT_EQ(CompensatorStart(3, 1), 0.0759329796f);
  EXPECT_EQ(CompensatorStart(127, 7), 0.906490207f);
  EXPECT_EQ(CompensatorStart(255, 0), -0.535409808f);
  std::set<float> distinct;
  double sum = 0.0;
  float lo = 1.0f, hi = -1.0f;
  for (int j = 0; j < kMaxDim; ++j) {
    for (int h = 0; h < kMaxRank; ++h) {
      const float x = CompensatorStart(j, h);
      ASSERT_EQ(x, CompensatorStart(j, h));
      ASSERT_GE(x, -1.0f);
      ASSERT_LT(x, 1.0f);
      ASSERT_EQ(std::ldexp(x, 23), std::round(std::ldexp(x, 23))) << "not a multiple of 2^-23";
      distinct.insert(x);
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  EXPECT_GT(distinct.size(), 2040u);
  EXPECT_LT(std::fabs(sum / (kMaxDim * kMaxRank)), 0.05);
  EXPECT_LT(lo, -0.99f);
  EXPECT_GT(hi, 0.99f);
}

}  // namespace
}  // namespace leapcache::reference
