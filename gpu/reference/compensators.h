// Compensator fit: r rank-one pairs (K~_h, U~_h) that carry the dominant structure of a state
// S [dk][dv], so the quantized residual S - sum_h K~_h U~_h^T has flatter rows and columns.
//
// One round of subspace iteration from a fixed start (LeapQuant Sec. 3.3; the public kernels of
// the format use the same and report that warm starts from the previous window hurt):
//   Y  = S Omega           Omega [dv][r] fixed pseudo-random (CompensatorStart)
//   Qk = orth(Y)           modified Gram-Schmidt applied twice (stays orthogonal when S is
//   Z  = S^T Qk            rank-deficient); a column whose norm falls below 2^-16 of its norm
//   Qv = orth(Z)           before projection is dependent and set to zero
//   K  = S Qv              key factors carry the magnitude; Qv is orthonormal
// Each pair is then balanced by a power of two e_h ~ sqrt(||K_h||) (K_h / e_h, Qv_h * e_h: the
// product is unchanged, but both factors stay inside fp16's range for states up to ~4e9 in
// singular value) and rounded to fp16. A pair that does not fit fp16 is stored as zeros and the
// residual carries that energy. All arithmetic is fp32 with sums in index order.
#pragma once

#include <cstdint>

#include "gpu/format/half.h"  // LEAPCACHE_HD

namespace leapcache::reference {

inline constexpr int kSubspaceIterations = 1;
inline constexpr float kDependentColumnRatio = 1.0f / 65536.0f;  // 2^-16

// Omega[j][h] in [-1, 1): a fixed integer hash of (j, h), the same on the CPU and the GPU.
// lowbias32 (Chris Wellons' integer hash): full avalanche, three multiplies; the top 24 bits
// become an exact fp32 fraction.
LEAPCACHE_HD float CompensatorStart(int j, int h) {
  uint32_t x = static_cast<uint32_t>(j) * 8u + static_cast<uint32_t>(h) + 0x9E3779B9u;
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return static_cast<float>(x >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

// Writes the fp16 bit patterns and their fp32 values of the fitted factors:
// kfac [r][dk], vfac [r][dv]. REQUIRES: S finite with |S| <= 2^64, 0 <= r <= 8.
void FitCompensators(const float* S_kv, int dk, int dv, int r, uint16_t* kfac_half,
                     uint16_t* vfac_half, float* kfac, float* vfac);

}  // namespace leapcache::reference
