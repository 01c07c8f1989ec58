#include "gpu/reference/compensators.h"

#include <cmath>
#include <vector>

#include "gpu/format/half.h"

namespace leapcache::reference {

namespace {

// Orthonormalises the r columns of X [n][r] in place by modified Gram-Schmidt, twice.
void OrthonormalizeColumns(std::vector<float>& X, int n, int r) {
  for (int c = 0; c < r; ++c) {
    float before = 0.0f;
    for (int i = 0; i < n; ++i) before += X[i * r + c] * X[i * r + c];
    before = std::sqrt(before);
    for (int pass = 0; pass < 2; ++pass) {
      for (int p = 0; p < c; ++p) {
        float dot = 0.0f;
        for (int i = 0; i < n; ++i) dot += X[i * r + c] * X[i * r + p];
        for (int i = 0; i < n; ++i) X[i * r + c] -= dot * X[i * r + p];
      }
    }
    float after = 0.0f;
    for (int i = 0; i < n; ++i) after += X[i * r + c] * X[i * r + c];
    after = std::sqrt(after);
    if (!(after > before * kDependentColumnRatio) || after == 0.0f) {
      for (int i = 0; i < n; ++i) X[i * r + c] = 0.0f;
      continue;
    }
    const float inv = 1.0f / after;
    for (int i = 0; i < n; ++i) X[i * r + c] *= inv;
  }
}

}  // namespace

void FitCompensators(const float* S, int dk, int dv, int r, uint16_t* kfac_half,
                     uint16_t* vfac_half, float* kfac, float* vfac) {
  if (r == 0) return;
  std::vector<float> omega(static_cast<size_t>(dv) * r);
  for (int j = 0; j < dv; ++j) {
    for (int h = 0; h < r; ++h) omega[j * r + h] = CompensatorStart(j, h);
  }
  std::vector<float> qv = omega;                           // [dv][r]
  std::vector<float> qk(static_cast<size_t>(dk) * r);      // [dk][r]
  std::vector<float> kfull(static_cast<size_t>(dk) * r);   // [dk][r]
  auto multiply_s = [&](const std::vector<float>& right, std::vector<float>& out) {  // S right
    for (int a = 0; a < dk; ++a) {
      for (int h = 0; h < r; ++h) {
        float acc = 0.0f;
        for (int j = 0; j < dv; ++j) acc += S[a * dv + j] * right[j * r + h];
        out[a * r + h] = acc;
      }
    }
  };
  for (int it = 0; it < kSubspaceIterations; ++it) {
    multiply_s(qv, qk);
    OrthonormalizeColumns(qk, dk, r);
    for (int j = 0; j < dv; ++j) {  // Z = S^T Qk
      for (int h = 0; h < r; ++h) {
        float acc = 0.0f;
        for (int a = 0; a < dk; ++a) acc += S[a * dv + j] * qk[a * r + h];
        qv[j * r + h] = acc;
      }
    }
    OrthonormalizeColumns(qv, dv, r);
  }
  multiply_s(qv, kfull);
  for (int h = 0; h < r; ++h) {
    float norm = 0.0f;
    for (int a = 0; a < dk; ++a) norm += kfull[a * r + h] * kfull[a * r + h];
    norm = std::sqrt(norm);
    // e = 2^floor(log2(norm) / 2): exact scaling, leaves both factors near sqrt(norm).
    float e = 1.0f;
    if (norm > 0.0f) {
      int ex = 0;
      std::frexp(norm, &ex);
      e = std::ldexp(1.0f, (ex - 1) >> 1);
    }
    bool finite = norm > 0.0f;
    for (int a = 0; a < dk && finite; ++a) {
      kfac_half[h * dk + a] = FloatToHalf(kfull[a * r + h] / e);
      finite = std::isfinite(HalfToFloat(kfac_half[h * dk + a]));
    }
    for (int j = 0; j < dv && finite; ++j) {
      vfac_half[h * dv + j] = FloatToHalf(qv[j * r + h] * e);
      finite = std::isfinite(HalfToFloat(vfac_half[h * dv + j]));
    }
    if (!finite) {  // zero pair: a dependent direction, or one fp16 cannot hold
      for (int a = 0; a < dk; ++a) kfac_half[h * dk + a] = 0;
      for (int j = 0; j < dv; ++j) vfac_half[h * dv + j] = 0;
    }
    for (int a = 0; a < dk; ++a) kfac[h * dk + a] = HalfToFloat(kfac_half[h * dk + a]);
    for (int j = 0; j < dv; ++j) vfac[h * dv + j] = HalfToFloat(vfac_half[h * dv + j]);
  }
}

}  // namespace leapcache::reference
