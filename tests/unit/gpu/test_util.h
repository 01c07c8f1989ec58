// Shared helpers of the gpu/ unit tests: seeded random states, error metrics, poisoned buffers.
//
// Every generator takes an explicit seed (std::mt19937), so a failing test names the exact input
// it saw; tests print the seed through SCOPED_TRACE. States are dense fp32 [dk][dv] (key rows,
// value columns), the orientation Orientation::kKV means.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpu/format/status.h"
#include "gpu/reference/recurrence.h"

namespace leapcache::reference::testutil {

// A value no codec or step ever produces: output buffers are filled with it before a call that
// must leave them alone, and checked afterwards.
inline constexpr float kPoison = 1e30f;
inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

inline size_t Elements(int dk, int dv) { return static_cast<size_t>(dk) * dv; }

// i.i.d. N(0, sigma^2) entries.
inline std::vector<float> GaussianState(int dk, int dv, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> s(Elements(dk, dv));
  for (float& x : s) x = normal(rng);
  return s;
}

// sum_{h < rank} a_h b_h^T / (h + 1) with Gaussian a_h [dk], b_h [dv]: exactly rank `rank`
// (almost surely), with distinct singular values.
inline std::vector<float> LowRankState(int dk, int dv, int rank, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> s(Elements(dk, dv), 0.0f);
  std::vector<float> a(dk), b(dv);
  for (int h = 0; h < rank; ++h) {
    for (float& x : a) x = normal(rng);
    for (float& x : b) x = normal(rng) / static_cast<float>(h + 1);
    for (int i = 0; i < dk; ++i) {
      for (int j = 0; j < dv; ++j) s[i * dv + j] += a[i] * b[j];
    }
  }
  return s;
}

inline void ScaleColumns(std::vector<float>& s, int dk, int dv, std::initializer_list<int> cols,
                         float factor) {
  for (int c : cols) {
    for (int a = 0; a < dk; ++a) s[a * dv + c % dv] *= factor;
  }
}

inline void ScaleRows(std::vector<float>& s, int dk, int dv, std::initializer_list<int> rows,
                      float factor) {
  for (int r : rows) {
    for (int j = 0; j < dv; ++j) s[(r % dk) * dv + j] *= factor;
  }
}

// The value columns that RealisticState makes outliers.
inline std::vector<int> OutlierColumns(int dv) { return {3, dv / 4 + 1, dv / 2, (3 * dv) / 4 + 5}; }

// A state with the structure LeapQuant targets: Gaussian entries plus four outlier value columns
// 30x larger than the rest.
inline std::vector<float> RealisticState(int dk, int dv, uint32_t seed, float sigma = 1.0f) {
  std::vector<float> s = GaussianState(dk, dv, seed, sigma);
  for (int c : OutlierColumns(dv)) {
    for (int a = 0; a < dk; ++a) s[a * dv + c % dv] *= 30.0f;
  }
  return s;
}

inline double L2(std::span<const float> x) {
  double s = 0.0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

// ||x - ref|| / ||ref|| in double; +inf when ref is zero and x is not, 0 when both are zero, NaN
// when either holds a NaN (so any bound comparison fails).
inline double RelL2(std::span<const float> x, std::span<const float> ref) {
  EXPECT_EQ(x.size(), ref.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < x.size() && i < ref.size(); ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

inline std::vector<float> Transpose(std::span<const float> m, int rows, int cols) {
  std::vector<float> t(m.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) t[static_cast<size_t>(c) * rows + r] = m[static_cast<size_t>(r) * cols + c];
  }
  return t;
}

inline bool AllFinite(std::span<const float> x) {
  for (float v : x) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

// Bitwise equality (distinguishes -0 from +0 and compares NaNs by pattern).
inline bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Index of the first element whose bits differ, or -1.
inline long FirstBitDifference(std::span<const float> a, std::span<const float> b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<long>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<long>(std::min(a.size(), b.size()));
}

inline bool AllEqualTo(std::span<const float> x, float value) {
  for (float v : x) {
    if (std::memcmp(&v, &value, sizeof v) != 0) return false;
  }
  return true;
}

// Records a measured quantity (an error a bound was set from) as a test property, and prints it
// when LEAPCACHE_TEST_VERBOSE is set, so bounds can be re-measured after a codec change.
inline void ReportMeasured(const std::string& name, double value) {
  ::testing::Test::RecordProperty(name, std::to_string(value));
  if (std::getenv("LEAPCACHE_TEST_VERBOSE") != nullptr) {
    std::printf("[measured] %s = %.6g\n", name.c_str(), value);
  }
}

inline ::testing::AssertionResult MessageContains(const Status& s, std::string_view needle) {
  if (s.message().find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "status " << s.ToString() << " does not mention \"" << needle << "\"";
}

// One head's token stream: q, k [dk], v [dv], g [1] (GDN) or [dk] (KDA), beta, all from one
// seeded generator. Decays are realistic log-gates in [g_min, g_max]; `hard_channels` of a KDA
// stream decay by `hard_gate` every token (e.g. -80: the cumulative gate passes -1000 within
// a 16-token window). `v_scale` scales the values, `v_outliers` value channels get 30x.
struct TokenStreamOptions {
  float g_min = -0.3f;
  float g_max = -0.005f;
  float v_scale = 1.0f;
  std::vector<int> hard_channels;
  float hard_gate = -80.0f;
  std::vector<int> v_outliers;
};

class TokenStream {
 public:
  TokenStream(StateKind kind, int dk, int dv, uint32_t seed, TokenStreamOptions opts = {})
      : kind_(kind), dk_(dk), dv_(dv), rng_(seed), opts_(std::move(opts)),
        q_(dk), k_(dk), v_(dv), g_(GateSize(kind, dk)) {}

  // Draws the next token and returns a StepInput that points into this stream's buffers.
  StepInput Next() {
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> gate(opts_.g_min, opts_.g_max);
    std::uniform_real_distribution<float> unit(0.05f, 0.95f);
    for (float& x : q_) x = normal(rng_);
    for (float& x : k_) x = normal(rng_);
    for (float& x : v_) x = normal(rng_) * opts_.v_scale;
    for (int c : opts_.v_outliers) v_[c % dv_] *= 30.0f;
    for (float& x : g_) x = gate(rng_);
    if (kind_ == StateKind::kKda) {
      for (int c : opts_.hard_channels) g_[c % dk_] = opts_.hard_gate;
    }
    StepInput in;
    in.q = q_.data();
    in.k = k_.data();
    in.v = v_.data();
    in.g = g_.data();
    in.beta = unit(rng_);
    return in;
  }

 private:
  StateKind kind_;
  int dk_, dv_;
  std::mt19937 rng_;
  TokenStreamOptions opts_;
  std::vector<float> q_, k_, v_, g_;
};

}  // namespace leapcache::reference::testutil
