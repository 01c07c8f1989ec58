// The fit and quantization of a window-format state held in the fold's accumulators
// (FragmentRows), the refit's and the encode's (FORMAT.md section 4, leap; CPU reference:
// reference::Encode): Y = S Omega, Qk = orth(Y), Z = S^T Qk, Qv = orth(Z), K = S Qv (the
// products on tensor cores; orth by CholeskyQR2 over all rows at once, or by the reference's
// Gram-Schmidt in one warp where the columns are nearly dependent), balanced fp16 pairs,
// residual, row smoothing, column scales, round-to-nearest-even codes; and one due head's
// refit (RefitRegion): its reconstruction (window_fold.cuh), then that fit.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "gpu/kernels/code_packing.cuh"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/mma.cuh"
#include "gpu/kernels/region.cuh"
#include "gpu/kernels/window_fold.cuh"
#include "gpu/kernels/window_layout.cuh"
#include "gpu/reference/compensators.h"

namespace leapcache::kernels::window {

constexpr float kDependentRatio = 1.0f / 65536.0f;  // as reference/compensators.h

// Modified Gram-Schmidt, twice, on the r columns X[c][0..kD) (one warp; lane owns 4 entries).
// Column c is projected against q_0..q_{c-1} (first pass), again against q_0..q_{c-1} (second
// pass), then normalised. The first pass runs "right-looking": as soon as q_c is final, every
// later column is projected against it, so those reductions overlap instead of queueing behind
// column c's second pass (14 dependent warp reductions at r = 4 instead of 20). Each column
// still sees the same floating-point operations in the same order as the left-looking loop
// (OrthonormalizeAnyRank), so both give the same factors.
template <int kR>
__device__ void OrthonormalizeRanks(float (*X)[kD], int r, int lane) {
  float x[kR][4], before[kR];
#pragma unroll
  for (int c = 0; c < kR; ++c) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[c][i] = c < r ? X[c][lane + 32 * i] : 0.0f;
      ss = fmaf(x[c][i], x[c][i], ss);
    }
    before[c] = ss;
  }
#pragma unroll
  for (int c = 0; c < kR; ++c) before[c] = sqrtf(GroupSum<32>(before[c]));
#pragma unroll
  for (int c = 0; c < kR; ++c) {
    if (c >= r) break;
    // Second pass against q_0..q_{c-1} (the first ran when each q_p became final).
#pragma unroll
    for (int p = 0; p < c; ++p) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) dot = fmaf(x[c][i], x[p][i], dot);
      dot = GroupSum<32>(dot);
#pragma unroll
      for (int i = 0; i < 4; ++i) x[c][i] -= dot * x[p][i];
    }
    float after = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) after = fmaf(x[c][i], x[c][i], after);
    after = sqrtf(GroupSum<32>(after));
    const bool dependent = !(after > before[c] * kDependentRatio) || after == 0.0f;
    const float inv = dependent ? 0.0f : 1.0f / after;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[c][i] = dependent ? 0.0f : x[c][i] * inv;
      X[c][lane + 32 * i] = x[c][i];
    }
    // First pass of every later column against q_c: independent reductions, issued together.
    float dots[kR];
#pragma unroll
    for (int c2 = c + 1; c2 < kR; ++c2) {
      dots[c2] = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) dots[c2] = fmaf(x[c2][i], x[c][i], dots[c2]);
    }
#pragma unroll
    for (int c2 = c + 1; c2 < kR; ++c2) dots[c2] = GroupSum<32>(dots[c2]);
#pragma unroll
    for (int c2 = c + 1; c2 < kR; ++c2) {
#pragma unroll
      for (int i = 0; i < 4; ++i) x[c2][i] -= dots[c2] * x[c][i];
    }
  }
  __syncwarp();
}

// The same loop, not unrolled, for ranks other than the default.
inline __device__ void OrthonormalizeAnyRank(float (*X)[kD], int r, int lane) {
  for (int c = 0; c < r; ++c) {
    float x[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = X[c][lane + 32 * i];
    float before = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) before = fmaf(x[i], x[i], before);
    before = sqrtf(GroupSum<32>(before));
    for (int pass = 0; pass < 2; ++pass) {
      for (int p = 0; p < c; ++p) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) dot = fmaf(x[i], X[p][lane + 32 * i], dot);
        dot = GroupSum<32>(dot);
#pragma unroll
        for (int i = 0; i < 4; ++i) x[i] -= dot * X[p][lane + 32 * i];
      }
    }
    float after = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) after = fmaf(x[i], x[i], after);
    after = sqrtf(GroupSum<32>(after));
    const bool dependent = !(after > before * kDependentRatio) || after == 0.0f;
    const float inv = dependent ? 0.0f : 1.0f / after;
#pragma unroll
    for (int i = 0; i < 4; ++i) X[c][lane + 32 * i] = dependent ? 0.0f : x[i] * inv;
    __syncwarp();
  }
}

// Not inlined: both fits call it, and one copy keeps the kernel's code (and its instruction
// cache misses, the refit's largest stall) smaller.
inline __device__ __noinline__ void Orthonormalize(float (*X)[kD], int r, int lane) {
  if (r == 4) {
    OrthonormalizeRanks<4>(X, 4, lane);
  } else {
    OrthonormalizeAnyRank(X, r, lane);
  }
}

// The pivot test of OrthonormalizeCholesky: column c's squared norm after projection on the
// columns before it must exceed 2^-16 of its squared norm (an angle of at least 2^-8 rad from
// their span), and each squared norm must lie within [2^-100, 2^100]. Within these bounds the
// first pass leaves the columns orthogonal to about 2^16 fp32 ulps and the second to a few, as
// the two Gram-Schmidt passes do; outside them the Gram matrix loses what separates the columns.
constexpr float kPivotRatio = 1.52587890625e-05f;  // 2^-16
constexpr float kGramMin = 7.88860905e-31f;        // 2^-100
constexpr float kGramMax = 1.26765060e+30f;        // 2^100

// Orthonormalizes the kR columns X[c][0..kD) by CholeskyQR2: every row at once (thread a < kD
// owns row a) instead of one warp walking the columns. Per pass: the Gram matrix X^T X (warp
// sums, then the four warps' partials), its Cholesky factor R computed by each of those threads
// alike (the same operations on the same values: the same R and the same decision in each),
// and X R^-1 by forward substitution in each row. R's diagonal is needed only as 1 / R_cc, one
// rsqrt of the pivot. Two passes, as Gram-Schmidt runs twice. It spans the same subspace with
// the same orthonormal basis as modified Gram-Schmidt (a thin QR with a positive diagonal is
// unique), differing in rounding; where a pivot fails the test above (nearly dependent, zero
// or badly scaled columns) the columns are left as they were and one warp runs the CPU
// reference's Gram-Schmidt on them. Three barriers in all, against the Gram-Schmidt's 14
// dependent warp reductions in a row while seven warps wait.
template <int kR>
__device__ __forceinline__ void OrthonormalizeCholeskyRank(Shared& sh, float (*X)[kD]) {
  constexpr int kG = kR * (kR + 1) / 2, kStride = GramStride(kR);
  static_assert(kR <= kMaxRank, "a warp's Gram partial fits its row of sh.gram");
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  auto at = [](int p, int q) { return p * kR - p * (p - 1) / 2 + (q - p); };  // p <= q
  bool ok = true;
  float x[kR];
  if (t < kD) {
#pragma unroll
    for (int c = 0; c < kR; ++c) x[c] = X[c][t];
  }
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    if (t < kD) {
      float g[kG];
#pragma unroll
      for (int p = 0; p < kR; ++p) {
#pragma unroll
        for (int q = p; q < kR; ++q) g[at(p, q)] = x[p] * x[q];
      }
#pragma unroll
      for (int i = 0; i < kG; ++i) g[i] = GroupSum<32>(g[i]);
      if (lane == 0) {
#pragma unroll
        for (int i = 0; i < kG; ++i) sh.gram[pass][warp][i] = g[i];
      }
    }
    __syncthreads();
    if (t < kD) {
      float G[kStride], R[kG], inv[kR];
#pragma unroll
      for (int i = 0; i < kStride; i += 4) {
        float4 v = *reinterpret_cast<const float4*>(&sh.gram[pass][0][i]);
#pragma unroll
        for (int w = 1; w < kD / 32; ++w) {
          const float4 u = *reinterpret_cast<const float4*>(&sh.gram[pass][w][i]);
          v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
        }
        G[i] = v.x, G[i + 1] = v.y, G[i + 2] = v.z, G[i + 3] = v.w;
      }
#pragma unroll
      for (int c = 0; c < kR; ++c) {
        float d = G[at(c, c)];
#pragma unroll
        for (int p = 0; p < c; ++p) d = fmaf(-R[at(p, c)], R[at(p, c)], d);
        ok = ok && G[at(c, c)] >= kGramMin && G[at(c, c)] <= kGramMax &&
             d > G[at(c, c)] * kPivotRatio;
        inv[c] = rsqrtf(fmaxf(d, kGramMin));
#pragma unroll
        for (int q = c + 1; q < kR; ++q) {
          float v = G[at(c, q)];
#pragma unroll
          for (int p = 0; p < c; ++p) v = fmaf(-R[at(p, c)], R[at(p, q)], v);
          R[at(c, q)] = v * inv[c];
        }
      }
#pragma unroll
      for (int c = 0; c < kR; ++c) {
        float v = x[c];
#pragma unroll
        for (int p = 0; p < c; ++p) v = fmaf(-x[p], R[at(p, c)], v);
        x[c] = v * inv[c];
      }
    }
  }
  if (t < kD && ok) {
#pragma unroll
    for (int c = 0; c < kR; ++c) X[c][t] = x[c];
  }
  if (__syncthreads_or(!ok)) {  // rare: the columns as they were, orthonormalized one by one
    if (warp == 0) Orthonormalize(X, kR, lane);
    __syncthreads();
  }
}

// CholeskyQR2 at the rank of each code width: 4, and 6 and 8 where the kernel serves the packed
// widths (kAnyWidth), so the 8-bit kernels carry only the first. One function for every rank, not
// inlined: a function per rank made the packed encode spill more and run 10% slower.
template <bool kAnyWidth>
__device__ __noinline__ void OrthonormalizeCholesky(Shared& sh, float (*X)[kD], int r) {
  if (kAnyWidth && r == 8) {
    OrthonormalizeCholeskyRank<8>(sh, X);
  } else if (kAnyWidth && r == 6) {
    OrthonormalizeCholeskyRank<6>(sh, X);
  } else {
    OrthonormalizeCholeskyRank<4>(sh, X);
  }
}

// The fit's orthonormalization of r factor columns, ending in a barrier: CholeskyQR2 for the
// ranks of the code widths the kernel serves, one warp's Gram-Schmidt for the others.
template <bool kAnyWidth>
__device__ __forceinline__ void OrthonormalizeFactors(Shared& sh, float (*X)[kD], int r) {
  if (r == 4 || (kAnyWidth && (r == 6 || r == 8))) {
    OrthonormalizeCholesky<kAnyWidth>(sh, X, r);
  } else {
    if (threadIdx.x < 32) Orthonormalize(X, r, threadIdx.x);
    __syncthreads();
  }
}

// Omega's B fragments (hi b0, hi b1, lo b0, lo b1 for k-tile kk = 0..7, one uint4 per lane,
// built once per CTA: they depend on nothing but r) after the fold's operands.
__device__ __forceinline__ uint4* OmegaFragments(Shared& sh) {
  return reinterpret_cast<uint4*>(sh.work + kFoldAreaBytes);
}
constexpr int kPartialBytes = kThreads / 32 * kMaxRank * kD * 4;

// Row pitch (32-bit words) of the compensator value pairs: 8 mod 32, so the fragment loads of a
// warp (rows tig, columns 8 nt + gid) fall on 32 different banks.
constexpr int kValuePairPitch = kD + 8;

// x / s for a positive scale s, without a branch: (x * pre) * (1 / (s * pre)) with a power of
// two `pre` that makes 1 / (s * pre) a normal float (2^64 for subnormal scales, where 1 / s
// overflows; 2^-64 above 2^100, never reached by states within the format's 2^64 bound). The
// scaling is exact, so this is the reciprocal multiply of the scaled pair: it may differ from the
// division in the last bit, which moves a code only at an exact rounding tie.
struct Divider {
  float pre, inv;
  __device__ explicit Divider(float scale)
      : pre(scale < 1.1754944e-38f ? 18446744073709551616.0f : scale > 1.2676506e30f ? 5.421010862e-20f : 1.0f),
        inv(1.0f / (scale * pre)) {}
  __device__ float operator()(float x) const { return (x * pre) * inv; }
};

// Balances each fitted pair (K_h in sh.kf, Qv_h in sh.vf) by 2^floor(log2(||K_h||) / 2), rounds
// it to fp16 (zero if not finite), stores it in the region and leaves the stored values in
// sh.kf / sh.vf. One warp per pair. With value_pairs, also writes U~_h[j] as the fp16 half h % 2
// of word (h / 2) * kValuePairPitch + j there (the residual's mma B fragments).
inline __device__ void StoreBalancedCompensators(Shared& sh, uint8_t* region, const RegionView& rv,
                                                 __half* value_pairs = nullptr) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = rv.r;
  __half* comp = reinterpret_cast<__half*>(region + rv.comp);
  for (int h = warp; h < r; h += kThreads / 32) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) ss = fmaf(sh.kf[h][lane + 32 * i], sh.kf[h][lane + 32 * i], ss);
    const float norm = sqrtf(GroupSum<32>(ss));
    float e = 1.0f;
    if (norm > 0.0f) {
      int ex = 0;
      frexpf(norm, &ex);
      e = ldexpf(1.0f, (ex - 1) >> 1);
    }
    float kq[4], vq[4];
    bool finite = norm > 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      kq[i] = RoundToHalf(sh.kf[h][lane + 32 * i] / e);
      vq[i] = RoundToHalf(sh.vf[h][lane + 32 * i] * e);
      finite = finite && isfinite(kq[i]) && isfinite(vq[i]);
    }
    finite = __all_sync(0xffffffffu, finite);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float kv = finite ? kq[i] : 0.0f, vv = finite ? vq[i] : 0.0f;
      sh.kf[h][lane + 32 * i] = kv;
      sh.vf[h][lane + 32 * i] = vv;
      comp[h * 2 * kD + lane + 32 * i] = __float2half_rn(kv);
      comp[h * 2 * kD + kD + lane + 32 * i] = __float2half_rn(vv);
      if (value_pairs != nullptr) {
        value_pairs[2 * ((h / 2) * kValuePairPitch + lane + 32 * i) + h % 2] = __float2half_rn(vv);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The refit's fit and quantization, run on the state as the fold leaves it in the accumulators
// (FragmentRows): no shared-memory copy of S. The fit's three products run on tensor cores with
// fp32 operands split into fp16 hi + lo (hi hi + lo hi + hi lo; the dropped lo lo term and the
// split's 22 bits put the error near 2^-22 of the largest term, a few fp32 roundings). S is
// split once (SplitS), each row scaled by its own power of two, in place of its fp32 values:
//   Y = S Omega, K = S Qv: an m16n8k16 accumulator pair is an A fragment of the next product,
//     so each warp multiplies its own 16 rows;
//   Z = S^T Qk: the split transposed by movmatrix gives A fragments of S^T, Qk's rows scaled to
//     match; each warp's partial sum over its rows meets the others in shared memory;
//   the residual: S rejoined from the split (hi + lo, on tensor cores), so it carries the same
//     22 bits of each row's largest element as the reconstruction's own fold operands.
// Splitting once instead of per product saves about 8 of the three products' 13 instructions
// per element; holding the split instead of S keeps the registers at 64 per thread.

// (x0, x1) as fp16 pairs hi and lo with x = hi + lo to 22 significant bits (|x| < 2^15).
__device__ __forceinline__ void SplitPair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x0, x1);
  const float2 hf = __half22float2(h);
  hi = Half2Bits(h);
  lo = Half2Bits(__floats2half2_rn(x0 - hf.x, x1 - hf.y));
}

// B operands (unit-bounded fp32 factors) are scaled by 2^14 before the split.
constexpr float kFactorScale = 16384.0f;
constexpr float kFactorUnscale = 1.0f / 16384.0f;

__device__ __forceinline__ float (*ZPartial(Shared& sh))[kMaxRank][kD] {
  return reinterpret_cast<float (*)[kMaxRank][kD]>(sh.work);
}

inline __device__ void BuildOmegaFragments(Shared& sh, int r) {
  const int t = threadIdx.x, kk = t / 32, lane = t % 32, h = lane / 4, tig = lane % 4;
  const int j = 16 * kk + 2 * tig;
  auto omega = [&](int jj) { return h < r ? kFactorScale * reference::CompensatorStart(jj, h) : 0.0f; };
  uint4 f;
  SplitPair(omega(j), omega(j + 1), f.x, f.z);
  SplitPair(omega(j + 8), omega(j + 9), f.y, f.w);
  OmegaFragments(sh)[t] = f;
}

// The state split once for the fit's three products (SplitState): for each n-tile nt, word 0
// holds the fp16 pair of row a0 (columns Col(nt), Col(nt) + 1), word 1 that of row a1, each row
// scaled by its own power of two 2^e (SplitExponent of the row's maximum).
struct SplitS {
  uint32_t hi[kD / 8][2], lo[kD / 8][2];
};

__device__ __forceinline__ void SplitState(const float s[kD / 8][4], float scale0, float scale1,
                                           SplitS& x) {
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    SplitPair(s[nt][0] * scale0, s[nt][1] * scale0, x.hi[nt][0], x.lo[nt][0]);
    SplitPair(s[nt][2] * scale1, s[nt][3] * scale1, x.hi[nt][1], x.lo[nt][1]);
  }
}

// The A fragments (hi, lo) of the split's 16 x 16 block kk of the warp's rows: n-tiles 2 kk and
// 2 kk + 1 of rows a0 and a1.
__device__ __forceinline__ void SplitFragments(const SplitS& x, int kk, uint32_t hi[4],
                                               uint32_t lo[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    hi[i] = x.hi[2 * kk + i / 2][i % 2];
    lo[i] = x.lo[2 * kk + i / 2][i % 2];
  }
}

// c = sum over j of S[a][j] X[j][h] for the warp's rows a (C fragment: rows a0 / a1, columns
// h = 2 tig, 2 tig + 1), times the rows' 2^e, X's B fragments from b_frag(kk) = (hi b0, hi b1,
// lo b0, lo b1). Two accumulators keep each dependent mma chain shorter.
template <typename BFragments>
__device__ __forceinline__ void RowProduct(const SplitS& x, BFragments b_frag, float c[4]) {
  float main_part[4] = {}, small_part[4] = {};
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    uint32_t hi[4], lo[4];
    SplitFragments(x, kk, hi, lo);
    const uint4 b = b_frag(kk);
    MmaF16(small_part, lo, b.x, b.y);
    MmaF16(small_part, hi, b.z, b.w);
    MmaF16(main_part, hi, b.x, b.y);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) c[i] = main_part[i] + small_part[i];
}

// out[h][a] = c (the RowProduct result) undone from the row scales 2^e0, 2^e1 and the factor
// scale, for h < r.
__device__ __forceinline__ void StoreRowProduct(const FragmentRows& fr, const float c[4], int e0, int e1,
                                                int r, float (*out)[kD]) {
  const float un0 = PowerOfTwo(-e0) * kFactorUnscale, un1 = PowerOfTwo(-e1) * kFactorUnscale;
  const int h = 2 * fr.tig;
  if (h < r) {
    out[h][fr.a0] = c[0] * un0;
    out[h][fr.a1] = c[2] * un1;
  }
  if (h + 1 < r) {
    out[h + 1][fr.a0] = c[1] * un0;
    out[h + 1][fr.a1] = c[3] * un1;
  }
}

// B fragments of an fp32 factor X[h][i] (h < r, |X| <= 1) over i = 16 kk .. 16 kk + 15, lane's
// n = gid: X read from shared memory, scaled by 2^14 and split.
__device__ __forceinline__ uint4 FactorFragments(const float (*X)[kD], int r, const FragmentRows& fr, int i0) {
  uint4 f = {0u, 0u, 0u, 0u};
  if (fr.gid < r) {
    const float2 x0 = *reinterpret_cast<const float2*>(&X[fr.gid][i0 + 2 * fr.tig]);
    const float2 x1 = *reinterpret_cast<const float2*>(&X[fr.gid][i0 + 2 * fr.tig + 8]);
    SplitPair(x0.x * kFactorScale, x0.y * kFactorScale, f.x, f.z);
    SplitPair(x1.x * kFactorScale, x1.y * kFactorScale, f.y, f.w);
  }
  return f;
}

// This warp's part of Z[h][j] = sum_a S[a][j] Qk[h][a] (its 16 rows a) into ZPartial[warp].
// e0, e1: the split exponents of the thread's rows a0, a1; row_max: the maximum |S| of them.
// Row a of the split carries 2^e_a, so Qk's row a is scaled by 2^(e_w - e_a) (e_w: the
// exponent of the warp's largest row, at most every nonzero row's e_a); the rows of zeros
// (e_a = 0) are clamped to at most 1, which keeps their operand finite.
__device__ __forceinline__ void ColumnProductPartial(Shared& sh, const SplitS& x, int r,
                                                     const FragmentRows& fr, int e0, int e1,
                                                     float row_max) {
  const int ew = SplitExponent(GroupMax<32>(row_max));
  // B fragment of Qk over the warp's rows in fragment order: k = 2 tig, 2 tig + 1 (b0) and
  // 2 tig + 8, 2 tig + 9 (b1) are the state's rows 16 w + 4 tig + {0, 2} and {1, 3}, whose
  // exponents are e0 and e1 of lanes 8 tig (rows + 0, + 1) and 8 tig + 4 (rows + 2, + 3).
  auto factor = [&](int e) { return PowerOfTwo(max(-126, min(0, ew - e))) * kFactorScale; };
  const float f0 = factor(__shfl_sync(0xffffffffu, e0, 8 * fr.tig));
  const float f1 = factor(__shfl_sync(0xffffffffu, e1, 8 * fr.tig));
  const float f2 = factor(__shfl_sync(0xffffffffu, e0, 8 * fr.tig + 4));
  const float f3 = factor(__shfl_sync(0xffffffffu, e1, 8 * fr.tig + 4));
  uint4 b = {0u, 0u, 0u, 0u};
  if (fr.gid < r) {
    const float4 q = *reinterpret_cast<const float4*>(&sh.kf[fr.gid][16 * fr.warp + 4 * fr.tig]);
    SplitPair(q.x * f0, q.z * f2, b.x, b.z);
    SplitPair(q.y * f1, q.w * f3, b.y, b.w);
  }
  const float un = PowerOfTwo(-ew) * kFactorUnscale;
  float (*zp)[kD] = ZPartial(sh)[fr.warp];
#pragma unroll
  for (int mt = 0; mt < kD / 16; ++mt) {
    // A fragment of S^T for columns j in [16 mt, 16 mt + 16) (its rows) and the warp's 16 rows a
    // (its k): the four 8 x 8 blocks of the split, transposed.
    const uint32_t hi[4] = {Transpose8x8(x.hi[2 * mt][0]), Transpose8x8(x.hi[2 * mt + 1][0]),
                            Transpose8x8(x.hi[2 * mt][1]), Transpose8x8(x.hi[2 * mt + 1][1])};
    const uint32_t lo[4] = {Transpose8x8(x.lo[2 * mt][0]), Transpose8x8(x.lo[2 * mt + 1][0]),
                            Transpose8x8(x.lo[2 * mt][1]), Transpose8x8(x.lo[2 * mt + 1][1])};
    float c[4] = {}, small_part[4] = {};
    MmaF16(small_part, lo, b.x, b.y);
    MmaF16(small_part, hi, b.z, b.w);
    MmaF16(c, hi, b.x, b.y);
    // c: rows j = 16 mt + gid (c0, c1) and j + 8 (c2, c3), columns h = 2 tig, 2 tig + 1.
    const int j = 16 * mt + fr.gid, h = 2 * fr.tig;
    if (h < r) {
      zp[h][j] = (c[0] + small_part[0]) * un;
      zp[h][j + 8] = (c[2] + small_part[2]) * un;
    }
    if (h + 1 < r) {
      zp[h + 1][j] = (c[1] + small_part[1]) * un;
      zp[h + 1][j + 8] = (c[3] + small_part[3]) * un;
    }
  }
}

// The value pairs sit in the fold's area after the fit's partial sums (free by then).
__device__ __forceinline__ __half* ValuePairs(Shared& sh) {
  return reinterpret_cast<__half*>(sh.work + kPartialBytes);
}
static_assert(kPartialBytes + kMaxRank / 2 * kValuePairPitch * 4 <= kFoldAreaBytes,
              "the partial sums and value pairs fit in the fold's area");

// S from its split into s, on tensor cores: each 16 x 16 block of the split (one A fragment,
// hi and lo) times the two 16 x 8 halves of the identity gives the block's two n-tiles in the
// accumulator layout, hi + lo summed in fp32; then times 2^-e of the row (exact). Reading the
// split only as mma operands keeps its words in the operand registers of the products.
__device__ __forceinline__ void JoinState(const SplitS& x, const FragmentRows& fr, int e0, int e1,
                                          float s[kD / 8][4]) {
  const float un0 = PowerOfTwo(-e0), un1 = PowerOfTwo(-e1);
  // Identity B fragment rows 2 tig, 2 tig + 1 at column gid.
  const uint32_t one = Half2Bits(__floats2half2_rn(2 * fr.tig == fr.gid ? 1.0f : 0.0f,
                                                   2 * fr.tig + 1 == fr.gid ? 1.0f : 0.0f));
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    uint32_t hi[4], lo[4];
    SplitFragments(x, kk, hi, lo);
    float c[2][4] = {};
    MmaF16(c[0], hi, one, 0u);
    MmaF16(c[0], lo, one, 0u);
    MmaF16(c[1], hi, 0u, one);
    MmaF16(c[1], lo, 0u, one);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s[2 * kk + h][0] = c[h][0] * un0;
      s[2 * kk + h][1] = c[h][1] * un0;
      s[2 * kk + h][2] = c[h][2] * un1;
      s[2 * kk + h][3] = c[h][3] * un1;
    }
  }
}

// E = S - sum_h K~_h U~_h^T in place. The factors are fp16 values, so one m16n8k16 mma per
// 8 columns (k = h, zero past r) forms the compensator sum from exact products in fp32; it can
// differ from the reference's fmaf chain in the last bit, as any other summation order.
__device__ __forceinline__ void SubtractCompensators(Shared& sh, float s[kD / 8][4], int r,
                                                     const FragmentRows& fr) {
  const int h = 2 * fr.tig;
  auto key = [&](int hh, int row) { return hh < r ? sh.kf[hh][row] : 0.0f; };
  const uint32_t a[4] = {Half2Bits(__floats2half2_rn(key(h, fr.a0), key(h + 1, fr.a0))),
                         Half2Bits(__floats2half2_rn(key(h, fr.a1), key(h + 1, fr.a1))), 0u, 0u};
  // B rows h = 2 tig, 2 tig + 1; pairs at or past r hold stale values and are masked to zero.
  const uint32_t mask = h >= r ? 0u : h + 1 >= r ? 0x0000ffffu : 0xffffffffu;
  const uint32_t* pairs = reinterpret_cast<const uint32_t*>(ValuePairs(sh)) + fr.tig * kValuePairPitch;
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    float c[4] = {};
    MmaF16(c, a, pairs[8 * nt + fr.gid] & mask, 0u);
#pragma unroll
    for (int i = 0; i < 4; ++i) s[nt][i] -= c[i];
  }
}

// Maxima over the warp's 16 rows of the 32 column values v[2 nt + c] (column Col(nt) + c) of
// each lane, reduce-scattered over the 8 lanes that share tig: 28 shuffles instead of 96. Lane
// keeps v[m] for m < 4, the maximum for column 8 (2 gid + m / 2) + 2 tig + m % 2.
__device__ __forceinline__ void ColumnMaxScatter(float v[32], int lane) {
#pragma unroll
  for (int width = 16; width >= 4; width /= 2) {
    const bool upper = (lane & (width == 16 ? 16 : width == 8 ? 8 : 4)) != 0;
    const int n = width == 16 ? 16 : width == 8 ? 8 : 4;
#pragma unroll
    for (int i = 0; i < n; ++i) {
      const float send = upper ? v[i] : v[n + i];
      const float keep = upper ? v[n + i] : v[i];
      v[i] = fmaxf(keep, __shfl_xor_sync(0xffffffffu, send, width));
    }
  }
}

// Codes, staged in shared memory as [j][a] (written out by the caller). A code is rne(q t / s_v)
// for the largest code q (127, 31 or 7), from the FFMA of (t pre) and q / (s_v pre) with
// 1.5 * 2^23: the low byte of the sum's bits is the code. No clamp: |t| <= s_v (the column
// maximum of these very t), so the product is below q (1 + 2^-22) and rounds to at most q (the
// reference clamps to +-q and never needs to). The thread's four codes of n-tile nt form one word
// of the [j][a] layout transposed (FragmentRows); movmatrix hands lane (gid, tig) the codes of keys
// 16 w + 4 tig .. + 3 of column 8 nt + gid. kPrescaled = false: every column's pre is 1.
template <bool kPrescaled>
__device__ __forceinline__ void QuantizeCodes(Shared& sh, const float s[kD / 8][4],
                                              const FragmentRows& fr, const float* col_pre,
                                              const float* col_inv) {
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    const int j = fr.Col(nt);
    const float2 pre =
        kPrescaled ? *reinterpret_cast<const float2*>(col_pre + j) : make_float2(1.0f, 1.0f);
    const float2 inv = *reinterpret_cast<const float2*>(col_inv + j);
    auto biased = [](float x, float p, float i) {
      return __float_as_uint(__fmaf_rn(kPrescaled ? x * p : x, i, 12582912.0f));
    };
    const uint32_t c00 = biased(s[nt][0], pre.x, inv.x), c01 = biased(s[nt][1], pre.y, inv.y);
    const uint32_t c10 = biased(s[nt][2], pre.x, inv.x), c11 = biased(s[nt][3], pre.y, inv.y);
    // Bytes (a0, j), (a1, j), (a0, j + 1), (a1, j + 1).
    const uint32_t word =
        __byte_perm(__byte_perm(c00, c10, 0x0040), __byte_perm(c01, c11, 0x0040), 0x5410);
    int8_t* dst = sh.codes + (8 * nt + fr.gid) * kCodePitch + 16 * fr.warp + 4 * fr.tig;
    *reinterpret_cast<uint32_t*>(dst) = Transpose8x8(word);
  }
}

// Refits the region's state, reconstructed into s (destroyed), and resets the window, marked
// `refitted` (1 for the refit, 0 for the encode; ListDueHeads).
// REQUIRES: sh.col_max all zero and the Omega fragments built (the refit and encode kernels do
// both).
template <bool kAnyWidth>
__device__ void FitAndEncodeFragments(Shared& sh, float s[kD / 8][4], uint8_t* region,
                                      const RegionView& rv, int refitted) {
  const int t = threadIdx.x;
  const FragmentRows fr;
  const int r = rv.r;
  if (r > 0) {
    // Per-row split exponents (a warp's lanes with one gid hold a whole row).
    float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      m0 = fmaxf(m0, fmaxf(fabsf(s[nt][0]), fabsf(s[nt][1])));
      m1 = fmaxf(m1, fmaxf(fabsf(s[nt][2]), fabsf(s[nt][3])));
    }
    m0 = GroupMax<4>(m0);
    m1 = GroupMax<4>(m1);
    const int e0 = SplitExponent(m0), e1 = SplitExponent(m1);
    // S as fp16 hi + lo pairs for all three products; s is rebuilt from them for the residual.
    SplitS x;
    SplitState(s, PowerOfTwo(e0), PowerOfTwo(e1), x);
    const uint4* omega = OmegaFragments(sh);
    float c[4];
    // Y = S Omega
    RowProduct(x, [&](int kk) { return omega[32 * kk + fr.lane]; }, c);
    StoreRowProduct(fr, c, e0, e1, r, sh.kf);
    __syncthreads();
    OrthonormalizeFactors<kAnyWidth>(sh, sh.kf, r);
    ColumnProductPartial(sh, x, r, fr, e0, e1, fmaxf(m0, m1));  // Z = S^T Qk, this warp's rows
    __syncthreads();
    for (int i = t; i < r * kD; i += kThreads) {
      float z = 0.0f;
#pragma unroll
      for (int w = 0; w < kThreads / 32; ++w) z += ZPartial(sh)[w][i / kD][i % kD];
      sh.vf[i / kD][i % kD] = z;
    }
    __syncthreads();
    OrthonormalizeFactors<kAnyWidth>(sh, sh.vf, r);
    // K = S Qv
    RowProduct(x, [&](int kk) { return FactorFragments(sh.vf, r, fr, 16 * kk); }, c);
    StoreRowProduct(fr, c, e0, e1, r, sh.kf);
    __syncthreads();
    StoreBalancedCompensators(sh, region, rv, ValuePairs(sh));
    __syncthreads();
    JoinState(x, fr, e0, e1, s);
    SubtractCompensators(sh, s, r, fr);
  }
  // Row smoothing scales: a row's 128 values are spread over the 4 lanes of one gid.
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    sum0 += fabsf(s[nt][0]) + fabsf(s[nt][1]);
    sum1 += fabsf(s[nt][2]) + fabsf(s[nt][3]);
  }
  sum0 = GroupSum<4>(sum0);
  sum1 = GroupSum<4>(sum1);
  const float sk0 = rv.smoothing ? fmaxf(sqrtf(sum0 / static_cast<float>(kD)), kScaleFloor) : 1.0f;
  const float sk1 = rv.smoothing ? fmaxf(sqrtf(sum1 / static_cast<float>(kD)), kScaleFloor) : 1.0f;
  if (rv.smoothing && fr.tig == 0) {
    reinterpret_cast<float*>(region + rv.row_scale)[fr.a0] = sk0;
    reinterpret_cast<float*>(region + rv.row_scale)[fr.a1] = sk1;
  }
  // t = E / s_k, then the column maxima (non-negative floats order like their bit patterns).
  {
    const Divider div0(sk0), div1(sk1);
    // The prescale is 1 unless a row's scale is the floor (a row of subnormal residuals); where
    // no row of the warp needs it, its multiply (x * 1, exact) is skipped.
    if (__any_sync(0xffffffffu, div0.pre != 1.0f || div1.pre != 1.0f)) {
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
        s[nt][0] = div0(s[nt][0]);
        s[nt][1] = div0(s[nt][1]);
        s[nt][2] = div1(s[nt][2]);
        s[nt][3] = div1(s[nt][3]);
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
        s[nt][0] *= div0.inv;
        s[nt][1] *= div0.inv;
        s[nt][2] *= div1.inv;
        s[nt][3] *= div1.inv;
      }
    }
    float v[32];
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      v[2 * nt] = fmaxf(fabsf(s[nt][0]), fabsf(s[nt][2]));
      v[2 * nt + 1] = fmaxf(fabsf(s[nt][1]), fabsf(s[nt][3]));
    }
    ColumnMaxScatter(v, fr.lane);
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      atomicMax(&sh.col_max[8 * (2 * fr.gid + m / 2) + 2 * fr.tig + m % 2], __float_as_int(v[m]));
    }
  }
  __syncthreads();
  // Column scales, and their dividers (times q) once per column (the reconstruction's row_base
  // and col_scale arrays are free by now).
  float* col_pre = sh.row_base;
  float* col_inv = sh.col_scale;
  int prescaled = 0;
  if (t < kD) {
    const float m = fmaxf(__int_as_float(sh.col_max[t]), kScaleFloor);
    reinterpret_cast<float*>(region + rv.col_scale)[t] = m;
    const Divider div(m);
    col_pre[t] = div.pre;
    col_inv[t] = CodeMax<kAnyWidth>(rv) * div.inv;
    prescaled = div.pre != 1.0f;
    sh.col_max[t] = 0;  // cleared for the next head (the kernel clears it before the first)
  }
  // As for the rows: the prescale's multiply only where a column needs it (rare: a column whose
  // largest t is subnormal), decided once for the block.
  if (__syncthreads_or(prescaled)) {
    QuantizeCodes<true>(sh, s, fr, col_pre, col_inv);
  } else {
    QuantizeCodes<false>(sh, s, fr, col_pre, col_inv);
  }
  __syncthreads();
  if (CodeBits<kAnyWidth>(rv) == 8) {
    for (int c = t; c < kD * kD / 16; c += kThreads) {
      reinterpret_cast<uint4*>(region + rv.codes)[c] =
          *reinterpret_cast<const uint4*>(sh.codes + (c / 8) * kCodePitch + (c % 8) * 16);
    }
  } else if (t < kD) {
    PackCodeRow(sh.codes + t * kCodePitch, rv.bits, region + rv.codes + t * (kD * rv.bits / 8));
  }
  if (t < rv.gate) reinterpret_cast<float*>(region + rv.window + 16)[t] = 0.0f;
  if (t == 0) StoreWindowHead(region + rv.window, 0, refitted);
}

// One due head's refit: the state reconstructed from the region's payload and p records (a due
// window holds exactly p, so every read is issued at once, without waiting for the record count),
// fitted and quantized, the window reset.
// REQUIRES: as FitAndEncodeFragments.
template <bool kAnyWidth>
__device__ __forceinline__ void RefitRegion(Shared& sh, uint8_t* region, const RegionView& rv,
                                            bool kda) {
  StageReads<kAnyWidth>(sh, region, rv, rv.p);
  float s[kD / 8][4];
  FoldStaged<1, kAnyWidth>(sh, rv, rv.p, kda,
                           [&](int nt, float s00, float s01, float s10, float s11) {
                             s[nt][0] = s00, s[nt][1] = s01, s[nt][2] = s10, s[nt][3] = s11;
                           });
  FitAndEncodeFragments<kAnyWidth>(sh, s, region, rv, 1);
}

}  // namespace leapcache::kernels::window
