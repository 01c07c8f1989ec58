// Boundary refit, encode and decode of window-format pool regions (FORMAT.md sections 4-5;
// CPU reference: reference::Encode, reference::Dequantize, WindowState's reconstruct), and the
// one-kernel decode token of small batches (StepAndRefitKernel: a head's step, from
// window_step_head.cuh, in the first four warps, then its refit where the window filled).
//
// One CTA of 256 threads per (request, head). Every kernel holds the dense fp32 state in the
// layout of the fold's mma accumulators (warp w: rows 16 w .. 16 w + 15, FragmentRows): the
// refit and the decode reconstruct it there, the encode loads it there. Only compressed data
// crosses HBM in a refit: it reads the payload and p records and writes the new payload.
//   Reconstruct: S = diag(exp(G)) B + sum_j w_j diag(exp(G - G_j)) k_j u_j^T, the records and
//                compensators folded on tensor cores as one [dk x (n + r)] x [(n + r) x dv]
//                product, the codes' term added in the epilogue. The refit keeps the result
//                in the mma accumulators; the decode writes it to global memory from them,
//                half the columns at a time, in a shared-memory layout of its own
//                (DecodeShared) that fits three CTAs per SM.
//   Fit and quantization (FitAndEncodeFragments, the refit's and the encode's): Y = S Omega,
//                Qk = orth(Y), Z = S^T Qk, Qv = orth(Z), K = S Qv (the products on tensor
//                cores; orth by CholeskyQR2 over all rows at once, or by the reference's
//                Gram-Schmidt in one warp where the columns are nearly dependent), balanced fp16
//                pairs, residual, row smoothing, column scales, round-to-nearest-even codes.
// Codes are int8 in shared memory throughout. Every kernel also serves the 6- and 4-bit formats
// (r = 6, 8): their packed rows are widened in place once staged (UnpackCodeRow) and packed as
// they are written out (PackCodeRow), in kernel instances of their own (kAnyWidth), so the
// 8-bit ones carry none of it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "gpu/half.h"
#include "gpu/kernels/code_packing.cuh"
#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/dispatch.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"
#include "gpu/kernels/mma.cuh"
#include "gpu/kernels/region.cuh"
#include "gpu/kernels/window_step_head.cuh"
#include "gpu/reference/compensators.h"

namespace leapcache::kernels {
namespace {

constexpr int kD = kKernelDim;
constexpr int kThreads = 256;
// Code rows are 128 bytes; staged at a 144-byte pitch (16-byte aligned for cp.async) so the
// 16 rows a warp touches at once spread over 8 banks instead of one.
constexpr int kCodePitch = kD + 16;
constexpr float kScaleFloor = 1.40129846432481707e-45f;  // 2^-149, as reference/codec.h
constexpr float kDependentRatio = 1.0f / 65536.0f;      // as reference/compensators.h

// The fold's operands for k_total = n + r (FoldArea): A hi and A lo, kD rows of 8 words (fp16
// pairs) per k-tile of 16 plus 2 (a pitch of 2 mod 16, as A's fragment rows are 2 apart), then
// B as 16 rows per k-tile of kD halves at a pitch of kBRowBytes.
constexpr int kBRowBytes = 2 * kD + 16;
__host__ __device__ constexpr int FoldTiles(int k_total) { return (k_total + 15) / 16; }
__host__ __device__ constexpr int FoldAPitch(int ktiles) { return 8 * ktiles + 2; }
// A's area (hi and lo) for k_total, in bytes: B's rows start after it.
__host__ __device__ constexpr int FoldABytes(int k_total) {
  return 2 * kD * FoldAPitch(FoldTiles(k_total)) * 4;
}
__host__ __device__ constexpr int FoldWords(int k_total) {
  return (FoldABytes(k_total) + 16 * FoldTiles(k_total) * kBRowBytes) / 4;
}

// The refit's and the encode's work area: the fold's operands (refit), then the fit's partial
// sums and the residual's value pairs over them; Omega's B fragments after them.
constexpr int kFoldAreaBytes = sizeof(uint32_t) * FoldWords(kMaxWindow + kMaxRank);
constexpr int kOmegaFragmentBytes = 8 * 32 * 16;
constexpr int kWorkBytes = kFoldAreaBytes + kOmegaFragmentBytes;

// A warp's partial Gram matrix in OrthonormalizeCholesky: the upper triangle of rank kR, padded
// to whole float4 loads (12 floats at r = 4, 36 at the largest rank).
__host__ __device__ constexpr int GramStride(int rank) {
  return (rank * (rank + 1) / 2 + 3) / 4 * 4;
}

// Shared memory of one refit or encode CTA.
struct Shared {
  __align__(16) unsigned char work[kWorkBytes];
  float kf[kMaxRank][kD];    // key factors (Y, K as [h][a] while fitting)
  float vf[kMaxRank][kD];    // value factors (Z, Qv as [h][j] while fitting)
  float col_scale[kD];       // s_v / q while reconstructing, q / (s_v pre) while quantizing
  float row_base[kD];        // s_k[a] exp(G[a]) while reconstructing, pre while quantizing
  float fold_unscale[kD];    // 2^-e_a: undoes the fold's per-row operand scaling
  int32_t col_max[kD];       // column maxima as ordered ints (non-negative floats)
  __align__(16) float gram[2][kD / 32][GramStride(kMaxRank)];  // per pass and warp (CholeskyQR2)
  __align__(16) int8_t codes[kD * kCodePitch];  // [j][a], row pitch kCodePitch
  // Dynamic tail of the refit, sized by the pool's p and r at launch (RefitSharedBytes): one
  // head's staged reads (StageLayout).
  __align__(16) float rec[1];
};

// Shared memory of one decode CTA: what the reconstruction reads and nothing of the fit, so
// three CTAs fit on an SM at p = 16 (the refit's registers allow two). The dynamic tail holds
// the fold's operands, sized for n + r <= p + r, then the staged reads (StageLayout).
struct DecodeShared {
  float col_scale[kD];       // s_v / q
  float row_base[kD];        // s_k[a] exp(G[a])
  float fold_unscale[kD];    // 2^-e_a
  __align__(16) int8_t codes[kD * kCodePitch];  // [j][a], row pitch kCodePitch
  __align__(16) float rec[1];
};

// One head's reads staged for the reconstruction (StageReads), at offsets set by the pool's p,
// r and gate width: the records' k halves [p][kD], their log-gates G_rec [p][gate] and weights
// w [p], the compensators [r][kD + kD] halves, the payload's column and row scales [kD] each and
// the window's log-gate G [gate]. The records' u go straight into the fold's B operand, the
// codes into their own staging area.
struct StageLayout {
  int rec_g, rec_w, comp, col_scale, row_scale, G, bytes;
  __host__ __device__ constexpr StageLayout(int p, int r, int gate)
      : rec_g(p * kD * 2),
        rec_w(rec_g + RoundUp16(p * gate * 4)),
        comp(rec_w + RoundUp16(p * 4)),
        col_scale(comp + r * kD * 4),
        row_scale(col_scale + kD * 4),
        G(row_scale + kD * 4),
        bytes(G + RoundUp16(gate * 4)) {}
};
// At p = 16, r = 4: 63,040 bytes for KDA, 54,416 for GDN (three CTAs per SM).
size_t DecodeSharedBytes(int p, int r, int gate) {
  return offsetof(DecodeShared, rec) + sizeof(uint32_t) * FoldWords(p + r) +
         StageLayout(p, r, gate).bytes;
}

// At p = 16, r = 4: 88,768 bytes for KDA, 80,144 for GDN (two CTAs per SM, as the registers
// allow). The encode needs no tail.
size_t RefitSharedBytes(int p, int r, int gate) {
  return offsetof(Shared, rec) + StageLayout(p, r, gate).bytes;
}
size_t EncodeSharedBytes() { return offsetof(Shared, rec); }

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
__device__ void OrthonormalizeAnyRank(float (*X)[kD], int r, int lane) {
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
__device__ __noinline__ void Orthonormalize(float (*X)[kD], int r, int lane) {
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

// Byte kByte of a word of four int8 codes, as a float, exactly, without the quarter-rate I2F:
// `biased` is the word with each byte biased by 128 (word ^ 0x80808080, one LOP3 for four
// codes); one PRMT makes the biased byte the low mantissa byte of 2^23, one FADD removes
// 2^23 + 128.
template <int kByte>
__device__ __forceinline__ float CodeToFloat(uint32_t biased) {
  return __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7650 + kByte)) - 8388736.0f;
}

// The code width and largest code of a launch: the pool's in the kernels that serve the packed
// widths (kAnyWidth), 8 bits as compile-time constants in the 8-bit ones (none of the packed
// paths compiled in: present and never taken, they made the refit's staggered launch 2% slower
// for KDA and the encode 4-5% slower).
template <bool kAnyWidth>
__device__ __forceinline__ int CodeBits(const RegionView& rv) {
  return kAnyWidth ? rv.bits : 8;
}
template <bool kAnyWidth>
__device__ __forceinline__ float CodeMax(const RegionView& rv) {
  return kAnyWidth ? rv.code_max : 127.0f;
}

// The fold's operands (the refit's work area, the decode's tail; free once the fold's mma
// loop is done). k counts the n records and then the r compensators, padded with zeros to whole mma
// k-tiles of 16. A hi and lo: fp16 pairs in 32-bit words as [a][k], k contiguous, at a row pitch
// (words) of 2 mod 16, so the 8 rows x 4 words a fragment load touches (rows 2 apart,
// FragmentRows) fall on 32 different banks. B: fp16 as [k][j], the records' u and the
// compensators' value halves copied in as stored, and read by ldmatrix.trans; rows of
// kBRowBytes (68 words, 4 mod 32) put the 8 rows of each 8 x 8 matrix on different banks.
struct FoldOperands {
  uint32_t* a_hi;
  uint32_t* a_lo;
  unsigned char* b;  // row k at b + k * kBRowBytes
  int a_pitch;       // words per row
  int ktiles;        // k-tiles of 16
};

constexpr int kMaxFoldTiles = FoldTiles(kMaxWindow + kMaxRank);

// Where each layout keeps the fold's operands and the staged reads (StageReads; the codes go to
// the code array of either): the refit in its work area (A, then B's rows after the largest A)
// and the tail; the decode in its tail, operands first.
__device__ __forceinline__ uint32_t* FoldBase(Shared& sh, const RegionView&) {
  return reinterpret_cast<uint32_t*>(sh.work);
}
__device__ __forceinline__ unsigned char* FoldBRows(Shared& sh, const RegionView&) {
  return sh.work + FoldABytes(kMaxWindow + kMaxRank);
}
__device__ __forceinline__ unsigned char* Staged(Shared& sh, const RegionView&) {
  return reinterpret_cast<unsigned char*>(sh.rec);
}
__device__ __forceinline__ uint32_t* FoldBase(DecodeShared& sh, const RegionView&) {
  return reinterpret_cast<uint32_t*>(sh.rec);
}
__device__ __forceinline__ unsigned char* FoldBRows(DecodeShared& sh, const RegionView& rv) {
  return reinterpret_cast<unsigned char*>(sh.rec) + FoldABytes(rv.p + rv.r);
}
__device__ __forceinline__ unsigned char* Staged(DecodeShared& sh, const RegionView& rv) {
  return reinterpret_cast<unsigned char*>(sh.rec + FoldWords(rv.p + rv.r));
}

// Omega's B fragments (hi b0, hi b1, lo b0, lo b1 for k-tile kk = 0..7, one uint4 per lane,
// built once per CTA: they depend on nothing but r) after the fold's operands.
__device__ __forceinline__ uint4* OmegaFragments(Shared& sh) {
  return reinterpret_cast<uint4*>(sh.work + kFoldAreaBytes);
}
constexpr int kPartialBytes = kThreads / 32 * kMaxRank * kD * 4;

template <typename Sh>
__device__ __forceinline__ FoldOperands FoldArea(Sh& sh, const RegionView& rv, int k_total) {
  const int ktiles = FoldTiles(k_total);
  const int a_pitch = FoldAPitch(ktiles);
  uint32_t* base = FoldBase(sh, rv);
  return {base, base + kD * a_pitch, FoldBRows(sh, rv), a_pitch, ktiles};
}
static_assert(FoldABytes(kMaxWindow + kMaxRank) % 16 == 0, "B's rows start 16-byte aligned");

__device__ __forceinline__ uint32_t Half2Bits(__half2 h) {
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Where a thread's elements of S sit in the fold's accumulators (mma m16n8k16 C fragments):
// warp w holds rows 16 w .. 16 w + 15 and all 128 columns; s[nt][0..1] are S[a0][j], S[a0][j + 1]
// and s[nt][2..3] are S[a1][j], S[a1][j + 1], with j = Col(nt). The fragment's rows gid and
// gid + 8 are the state's rows a0 = 16 w + 2 gid and a1 = a0 + 1 (the A operand is loaded in
// that order), so a thread's four elements of a column pair are the four int8 codes of one
// 32-bit word of the [j][a] code layout: one ldmatrix.trans reads four such words, one movmatrix
// and one 32-bit store write one.
struct FragmentRows {
  int warp, lane, gid, tig, a0, a1;
  __device__ FragmentRows()
      : warp(static_cast<int>(threadIdx.x) / 32), lane(static_cast<int>(threadIdx.x) % 32),
        gid(lane / 4), tig(lane % 4), a0(16 * warp + 2 * gid), a1(a0 + 1) {}
  __device__ int Col(int nt) const { return 8 * nt + 2 * tig; }
};

// Issues every global read of the reconstruction of a region with n records as asynchronous
// copies, in two groups: the records, compensators, scales and log-gate (the fold's operands
// are built from them first), then the codes (needed only by the epilogue, so they stay in
// flight while the operands are built and multiplied). The records' u and the compensators'
// value halves land as B's rows 0 .. n + r - 1, as stored; B's padding rows are zeroed here.
template <bool kAnyWidth, typename Sh>
__device__ __forceinline__ void StageReads(Sh& sh, const uint8_t* region, const RegionView& rv,
                                           int n) {
  // Opaque: computed from n and t here, not hoisted out of the refit's loop over heads into
  // registers held across the fit (hoisted, the staging's addresses made the refit spill).
  n = Opaque(n);
  const int t = Opaque(static_cast<int>(threadIdx.x)), r = rv.r;
  const StageLayout st(rv.p, r, rv.gate);
  unsigned char* staged = Staged(sh, rv);
  BlockCopyAsync(staged, region + rv.rec_k, n * kD * 2);
  BlockCopyAsync(staged + st.rec_g, region + rv.rec_g, n * rv.gate * 4);
  BlockCopyAsync(staged + st.rec_w, region + rv.rec_w, n * 4);
  BlockCopyAsync(staged + st.comp, region + rv.comp, r * kD * 4);
  BlockCopyAsync(staged + st.col_scale, region + rv.col_scale, kD * 4);
  if (rv.smoothing) BlockCopyAsync(staged + st.row_scale, region + rv.row_scale, kD * 4);
  BlockCopyAsync(staged + st.G, region + rv.window + 16, rv.gate * 4);
  {
    // Not unrolled: unrolled, these loops made the refit spill.
    unsigned char* b = FoldBRows(sh, rv);
    constexpr int kRowChunks = kD * 2 / 16;  // 16-byte pieces of a B row
    const int piece = 16 * (t % kRowChunks);
#pragma unroll 1
    for (int k = t / kRowChunks; k < n; k += kThreads / kRowChunks) {
      CopyAsync16(b + k * kBRowBytes + piece, region + rv.rec_u + k * kD * 2 + piece);
    }
#pragma unroll 1
    for (int k = t / kRowChunks; k < r; k += kThreads / kRowChunks) {
      CopyAsync16(b + (n + k) * kBRowBytes + piece, region + rv.comp + k * kD * 4 + kD * 2 + piece);
    }
#pragma unroll 1
    for (int k = n + r + t / kRowChunks; k < 16 * FoldTiles(n + r); k += kThreads / kRowChunks) {
      *reinterpret_cast<uint4*>(b + k * kBRowBytes + piece) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  CopyAsyncCommit();
  // Code row j (kD * bits / 8 bytes: packed below 8 bits) at row j of the code array; the loop
  // runs over 8 pieces per row whatever the width (no division by a run-time width).
  const int row_bytes = kD * CodeBits<kAnyWidth>(rv) / 8;
  for (int c = t; c < kD * kD / 16; c += kThreads) {
    const int j = c / 8, piece = 16 * (c % 8);
    if (piece < row_bytes)
      CopyAsync16(sh.codes + j * kCodePitch + piece, region + rv.codes + j * row_bytes + piece);
  }
  CopyAsyncCommit();
}

// FoldStaged: S[a][j] from the region's payload and open window (n records, log-gate G), read
// from what StageReads staged (the caller's barrier must follow StageReads, and no other
// cp.async group may be in flight):
//   S = exp(G[a]) (code * s_k[a] * s_v[j] / q + sum_h K~_h[a] U~_h[j]) + sum_rec ka[rec][a] u[rec][j]
// with ka = w * exp(G[a] - G_rec[a]) * k_rec[a]. The compensator and record sums are one
// product F = A B on tensor cores (mma.sync m16n8k16, fp16 operands, fp32 accumulation):
//   A[a][k] = ka[k][a] (k < n), exp(G[a]) K~_{k-n}[a] (n <= k < n + r);
//   B[k][j] = u[k][j], U~_{k-n}[j]: fp16 values already, so exact.
// A is fp32: each row a is scaled by the power of two 2^e_a that brings its largest entry into
// [2^14, 2^15) and split into fp16 hi + lo (22 significant bits; both products exact, fp32
// sums); the epilogue multiplies by 2^-e_a, exactly. A per-row scale keeps the rows of KDA
// channels that decayed far below the others at full relative precision. The fp32 CUDA-core
// version spent about half of the refit's arithmetic on these sums.
// S leaves in the accumulators' layout (FragmentRows), 8 columns at a time as soon as they are
// final, through emit(nt, S[a0][j], S[a0][j + 1], S[a1][j], S[a1][j + 1]) with j = Col(nt): the
// refit keeps them in registers and fits and quantizes S there, the decode writes them to global
// memory without a shared-memory round trip. The fold's operand area (FoldBase, FoldBRows) and
// the staged reads are free once every warp has returned; so are the staged codes, row_base,
// fold_unscale and col_scale. With kHalves = 2 the product runs over the columns in two
// halves, one after the other, so only 32 accumulators per thread are live (the decode's
// register budget for three CTAs per SM); emit still sees every column once, in order.
template <int kHalves, bool kAnyWidth, typename Sh, typename Emit>
__device__ __forceinline__ void FoldStaged(Sh& sh, const RegionView& rv, int n, bool kda,
                                           Emit emit) {
  n = Opaque(n);  // as in StageReads
  const int t = Opaque(static_cast<int>(threadIdx.x)), r = rv.r;
  const StageLayout st(rv.p, r, rv.gate);
  const unsigned char* staged = Staged(sh, rv);
  const FoldOperands f = FoldArea(sh, rv, n + r);
  const __half* rec_k = reinterpret_cast<const __half*>(staged);
  const float* rec_g = reinterpret_cast<const float*>(staged + st.rec_g);
  const float* rec_w = reinterpret_cast<const float*>(staged + st.rec_w);
  const __half* comp = reinterpret_cast<const __half*>(staged + st.comp);
  const int a = t / 2, par = t % 2;  // thread pair (2a, 2a + 1) builds row a of A
  CopyAsyncWaitGroup<1>();
  __syncthreads();
  if (t < kD)
    sh.col_scale[t] =
        reinterpret_cast<const float*>(staged + st.col_scale)[t] / CodeMax<kAnyWidth>(rv);
  const float g_a = reinterpret_cast<const float*>(staged + st.G)[kda ? a : 0];
  const float row_scale =
      rv.smoothing ? reinterpret_cast<const float*>(staged + st.row_scale)[a] : 1.0f;
  const int pairs = 4 * f.ktiles * 2;  // k pairs per row, padding included
  {
    // A: the thread pair owns row a, the even and the odd k pairs. Entry k is a coefficient
    // times a key value: w_k exp(g_a - G_k) times the record's key for k < n, exp(g_a) times the
    // compensator's key half for n <= k < n + r, zero past them. GDN's coefficients do not
    // depend on the row: lane k of each warp computes record k's once (n <= kMaxWindow = 32) and
    // the others read it by a shuffle, instead of each row's thread evaluating every expf. The
    // entries are selected, not branched to: every read address is valid either way. KDA's
    // gates are per key channel, so its build is a second copy with a per-entry expf.
    const float decay = expf(g_a);
    constexpr int kPairsPerThread = 4 * kMaxFoldTiles;
    float x[kPairsPerThread][2];
    float mx = 0.0f;
    // Each entry once, kept in registers between the row maximum and the split (the thread's
    // pairs are m = par + 2 i; entries past n + r are the zero padding). The condition is the
    // even thread's, the same for the whole CTA, so the shuffles run in converged warps.
    auto build = [&](auto kda_tag) {
      constexpr bool kKda = decltype(kda_tag)::value;
      const int lane = t % 32;
      const int lane_rec = lane < n ? lane : 0;
      const float lane_coef = kKda ? 0.0f : rec_w[lane_rec] * expf(g_a - rec_g[lane_rec * rv.gate]);
      auto entry = [&](int k) -> float {
        const bool is_rec = k < n;
        const int kr = is_rec ? k : 0, kc = is_rec ? 0 : max(0, min(k - n, r - 1));
        const float rec_coef = kKda ? rec_w[kr] * expf(g_a - rec_g[kr * rv.gate + a])
                                    : __shfl_sync(0xffffffffu, lane_coef, k % 32);
        const float value = __half2float(is_rec ? rec_k[kr * kD + a] : comp[kc * 2 * kD + a]);
        return k < n + r ? (is_rec ? rec_coef : decay) * value : 0.0f;
      };
#pragma unroll
      for (int i = 0; i < kPairsPerThread; ++i) {
        const int m = par + 2 * i;
        x[i][0] = x[i][1] = 0.0f;
        if (4 * i < n + r) {
          x[i][0] = entry(2 * m);
          x[i][1] = entry(2 * m + 1);
          mx = fmaxf(mx, fmaxf(fabsf(x[i][0]), fabsf(x[i][1])));
        }
      }
    };
    if (kda) {
      build(std::true_type{});
    } else {
      build(std::false_type{});
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const int e = SplitExponent(mx);
    const float scale = PowerOfTwo(e);
    if (par == 0) {
      sh.fold_unscale[a] = PowerOfTwo(-e);
      sh.row_base[a] = row_scale * decay;
    }
#pragma unroll
    for (int i = 0; i < kPairsPerThread; ++i) {
      const int m = par + 2 * i;
      if (m < pairs) {
        const float x0 = x[i][0] * scale, x1 = x[i][1] * scale;
        const __half2 hi = __floats2half2_rn(x0, x1);
        const float2 hf = __half22float2(hi);
        f.a_hi[a * f.a_pitch + m] = Half2Bits(hi);
        f.a_lo[a * f.a_pitch + m] = Half2Bits(__floats2half2_rn(x0 - hf.x, x1 - hf.y));
      }
    }
  }
  CopyAsyncWaitAll();
  __syncthreads();  // operands built, codes landed
  // Packed codes, widened in place to the int8 rows the epilogue reads.
  if (CodeBits<kAnyWidth>(rv) != 8) {
    if (t < kD) UnpackCodeRow(sh.codes + t * kCodePitch, rv.bits);
    __syncthreads();
  }
  // F on tensor cores: warp w owns rows [16 w, 16 w + 16) (in FragmentRows' order) and all 128
  // columns (16 n-tiles), in kHalves passes of 16 / kHalves n-tiles.
  const FragmentRows fr;
  const int tig = fr.tig, a0 = fr.a0;
  constexpr int kTiles = kD / 8 / kHalves;
  static_assert(kTiles % 4 == 0, "codes are read four n-tiles at a time");
#pragma unroll
  for (int half = 0; half < kHalves; ++half) {
    float acc[kTiles][4] = {};
    for (int kt = 0; kt < f.ktiles; ++kt) {
      const int r0 = a0 * f.a_pitch + 8 * kt + tig, r1 = r0 + f.a_pitch;
      const uint32_t hi[4] = {f.a_hi[r0], f.a_hi[r1], f.a_hi[r0 + 4], f.a_hi[r1 + 4]};
      const uint32_t lo[4] = {f.a_lo[r0], f.a_lo[r1], f.a_lo[r0 + 4], f.a_lo[r1 + 4]};
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const int nt = half * kTiles + i;
        // b0 and b1 of n-tile nt by one ldmatrix.trans: its two matrices are B's rows
        // 16 kt .. + 7 and 16 kt + 8 .. + 15 over columns 8 nt .. 8 nt + 7 (lanes 0-15 give the
        // row addresses). Loading two n-tiles per instruction (x4) made the compiler spill.
        uint32_t b[2];
        LoadMatrixX2Trans(b, SharedAddress(f.b + (16 * kt + fr.lane % 16) * kBRowBytes + 16 * nt));
        MmaF16(acc[i], lo, b[0], b[1]);
        MmaF16(acc[i], hi, b[0], b[1]);
      }
    }
    // Not needed for the data (the epilogue reads nothing the mma loop writes), but it keeps the
    // compiler from hoisting the epilogue's shared loads into the mma loop: without it the decode
    // needed 128 registers instead of 120 and ran 270-275 us instead of 256-262 us (B = 256).
    // The refit (one pass) does without it.
    if (kHalves > 1) __syncthreads();
    // Epilogue: S = code * (s_k exp(G)) * s_v / q + F 2^-e_a, in the accumulators' layout
    // (rows a0 and a1, columns j = 8 nt + 2 tig and j + 1). The codes come four n-tiles at a
    // time by ldmatrix.trans: matrix i's rows are columns 8 (nt + i) .. + 7 of the code staging
    // ([j][a]), 16 bytes each (the warp's 16 keys), so lane's word i holds the codes
    // (a0, j), (a1, j), (a0, j + 1), (a1, j + 1) of n-tile nt + i.
    const uint32_t code_row =
        SharedAddress(sh.codes + (8 * (fr.lane / 8) + fr.lane % 8) * kCodePitch + 16 * fr.warp);
    const float2 base = *reinterpret_cast<const float2*>(sh.row_base + a0);
    const float2 un = *reinterpret_cast<const float2*>(sh.fold_unscale + a0);
#pragma unroll
    for (int i4 = 0; i4 < kTiles; i4 += 4) {
      uint32_t words[4];
      const int nt4 = half * kTiles + i4;
      LoadMatrixX4Trans(words, code_row + 8 * nt4 * kCodePitch);
#pragma unroll
      for (int i = i4; i < i4 + 4; ++i) {
        const int nt = half * kTiles + i;
        const float2 cf = *reinterpret_cast<const float2*>(sh.col_scale + fr.Col(nt));
        const uint32_t biased = words[i - i4] ^ 0x80808080u;
        emit(nt, fmaf(acc[i][0], un.x, CodeToFloat<0>(biased) * base.x * cf.x),
             fmaf(acc[i][1], un.x, CodeToFloat<2>(biased) * base.x * cf.y),
             fmaf(acc[i][2], un.y, CodeToFloat<1>(biased) * base.y * cf.x),
             fmaf(acc[i][3], un.y, CodeToFloat<3>(biased) * base.y * cf.y));
      }
    }
  }
}

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
__device__ void StoreBalancedCompensators(Shared& sh, uint8_t* region, const RegionView& rv,
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

__device__ void BuildOmegaFragments(Shared& sh, int r) {
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

struct RegionArgs {
  RegionView rv;
  int batch;
  const int32_t* slot;
  uint8_t* pool;
  void* states;
  int kv_layout;  // 1: [dk][dv], 0: [dv][dk]
  bool kda;
};

__device__ __forceinline__ uint8_t* RegionOf(const RegionArgs& a, int* slot_out) {
  const int b = blockIdx.x / a.rv.num_heads, h = blockIdx.x % a.rv.num_heads;
  const int slot = a.slot[b];
  *slot_out = slot;
  if (slot < 0 || slot >= a.rv.num_slots) return nullptr;
  return a.pool + (static_cast<size_t>(slot) * a.rv.num_heads + h) * a.rv.region_bytes;
}

// Which due heads a refit CTA takes. G = gridDim.x CTAs share the launch's (request, head) items,
// and each item has one owner that checks its record count and refits it if due. A request's
// heads step together, so they fall due together, but which requests fall due at a token is the
// engine's schedule: under continuous batching, any subset. A fixed item-to-CTA map (item mod G)
// then lets one CTA draw several due heads while others draw none, and the launch takes as long
// as that CTA's list (with random window phases at B = 256, about 4.6 heads where 2.5 would do).
// So the owners follow a hint: whether head 0 of a request is due. Hinted requests are ranked in
// batch order and their heads numbered rank * H + h; CTA c owns the numbers congruent to c mod G,
// which gives every CTA at most ceil(due heads / G) of them, whatever requests are due. The
// other requests' heads keep the fixed map. Every CTA must compute the same hints, or an item
// could have two owners or none; yet the CTAs read head 0 at different times, and its owner may
// have refitted it (n back to 0) before a late CTA reads it. So the refit marks what it resets
// (WindowHead.refitted, written with n as one word; the step clears it), and the hint is
// "n >= p or marked": true before that refit and after it alike. A stale mark (two refit
// launches without a step between) is the same for every CTA too, and costs balance only, as
// any wrong hint does: the owner of an item still checks the item's own count.
struct DueList {
  int items[kThreads];  // the due regions' indices in the pool: slot * H + head
  int count;
  int owned[kThreads];  // each thread's first owned head of its request
  int warp_hints[kThreads / 32];
  int hinted_before;  // hinted requests in the groups before
};

// Pass `pass` over the requests: groups of 256 (one per thread), one candidate head per thread
// per pass, so more than one pass per group only where H > G. Lists this CTA's due heads of the
// pass in `list` (barriers inside; every thread calls it alike) and returns their number, or -1
// after the last pass. Not inlined: its values stay out of the refit's registers, which are at
// their cap. With nothing due a pass costs one round trip: head 0's count and the fixed map's
// candidate's, side by side.
__device__ __noinline__ int ListDueHeads(int pass, int batch, const int32_t* slots,
                                         const uint8_t* pool, int num_slots, int heads,
                                         uint32_t region_bytes, uint32_t window, int p,
                                         DueList& list) {
  const int stride = static_cast<int>(gridDim.x);
  const int cta = static_cast<int>(blockIdx.x);
  const int rounds = (heads - 1) / stride + 1;
  if (pass >= ((batch - 1) / kThreads + 1) * rounds) return -1;
  // The first head number >= 0 congruent to the CTA modulo G, for heads numbered from `first`.
  auto first_owned = [&](int first) { return ((cta - first) % stride + stride) % stride; };
  // Heads this CTA owns: no other CTA writes them during the launch.
  auto record_count = [&](const uint8_t* request_regions, int h) {
    return *reinterpret_cast<const int32_t*>(request_regions +
                                             static_cast<size_t>(h) * region_bytes + window);
  };
  const int round = pass % rounds;
  const int b = pass / rounds * kThreads + static_cast<int>(threadIdx.x);
  const int slot = b < batch ? slots[b] : -1;
  const uint8_t* regions = slot >= 0 && slot < num_slots
                               ? pool + static_cast<size_t>(slot) * heads * region_bytes
                               : nullptr;
  if (pass == 0 && threadIdx.x == 0) list.hinted_before = 0;
  if (threadIdx.x == 0) list.count = 0;
  if (round == 0) {
    // b * heads <= batch * heads, which the launcher keeps within int.
    const int fixed = b < batch ? first_owned(b * heads) : heads;
    const WindowHead head0 =
        regions != nullptr ? LoadWindowHead(regions + window) : WindowHead{0, 0};
    const int n_fixed = regions != nullptr && fixed < heads ? record_count(regions, fixed) : 0;
    const bool hint = head0.n >= p || head0.refitted != 0;
    const int hinted = __syncthreads_count(hint);
    int owned = fixed;
    if (hinted > 0) {  // this request's rank among the hinted ones
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      const unsigned ballot = __ballot_sync(0xffffffffu, hint);
      if (lane == 0) list.warp_hints[warp] = __popc(ballot);
      __syncthreads();
      int rank = list.hinted_before + __popc(ballot & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) rank += list.warp_hints[w];
      if (hint) owned = first_owned(rank * heads);
      __syncthreads();  // every thread has read hinted_before
      if (threadIdx.x == 0) list.hinted_before += hinted;
    }
    list.owned[threadIdx.x] = owned;
    if (regions != nullptr && owned < heads) {
      const int n = owned == fixed ? n_fixed : owned == 0 ? head0.n : record_count(regions, owned);
      if (n >= p) list.items[atomicAdd(&list.count, 1)] = slot * heads + owned;
    }
  } else {
    __syncthreads();  // count reset
    const int64_t h = static_cast<int64_t>(round) * stride + list.owned[threadIdx.x];
    if (regions != nullptr && h < heads && record_count(regions, static_cast<int>(h)) >= p) {
      list.items[atomicAdd(&list.count, 1)] = slot * heads + static_cast<int>(h);
    }
  }
  __syncthreads();
  return list.count;
}

// Persistent: each CTA refits the due heads ListDueHeads gives it, one after another.
// kAnyWidth: the 6- and 4-bit pools' kernel (packed codes, r = 6 and 8); the 8-bit one carries
// none of their paths.
template <bool kAnyWidth>
__global__ void __launch_bounds__(kThreads, 2) RefitKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  __shared__ DueList list;
  if (a.rv.r > 0) BuildOmegaFragments(sh, a.rv.r);  // barrier: the first pass's first
  if (threadIdx.x < kD) sh.col_max[threadIdx.x] = 0;
  for (int pass = 0, count;
       (count = ListDueHeads(pass, a.batch, a.slot, a.pool, a.rv.num_slots, a.rv.num_heads,
                             a.rv.region_bytes, a.rv.window, a.rv.p, list)) >= 0;
       ++pass) {
    for (int i = 0; i < count; ++i) {
      uint8_t* region = a.pool + static_cast<size_t>(list.items[i]) * a.rv.region_bytes;
      // A due head's window holds p records (n >= p is due, and a window never holds more), so
      // every read is issued at once, without waiting for the record count.
      StageReads<kAnyWidth>(sh, region, a.rv, a.rv.p);
      float s[kD / 8][4];
      FoldStaged<1, kAnyWidth>(sh, a.rv, a.rv.p, a.kda,
                               [&](int nt, float s00, float s01, float s10, float s11) {
                                 s[nt][0] = s00, s[nt][1] = s01, s[nt][2] = s10, s[nt][3] = s11;
                               });
      FitAndEncodeFragments<kAnyWidth>(sh, s, region, a.rv, 1);
      __syncthreads();  // the next head's staging overwrites what this one read last
    }
  }
}

// One head's refit as RefitKernel runs it, for StepAndRefitKernel. Not inlined: one copy per
// code width serves that kernel's every input and output type.
template <bool kAnyWidth>
__device__ __noinline__ void RefitHead(Shared& sh, uint8_t* region, RegionView rv, bool kda) {
  if (rv.r > 0) BuildOmegaFragments(sh, rv.r);
  if (threadIdx.x < kD) sh.col_max[threadIdx.x] = 0;
  __syncthreads();
  StageReads<kAnyWidth>(sh, region, rv, rv.p);
  float s[kD / 8][4];
  FoldStaged<1, kAnyWidth>(sh, rv, rv.p, kda,
                           [&](int nt, float s00, float s01, float s10, float s11) {
                             s[nt][0] = s00, s[nt][1] = s01, s[nt][2] = s10, s[nt][3] = s11;
                           });
  FitAndEncodeFragments<kAnyWidth>(sh, s, region, rv, 1);
}

// A decode token in one launch, for batches whose heads fit in two waves of it: warps 0-3 run
// the step of (request, head) blockIdx.x (window_step_head.cuh, on a named barrier) while warps
// 4-7 wait; then, if the step filled the window (or found it full), the whole CTA refits it.
// The same bytes as WindowDecodeStep followed by WindowRefit, without the second launch and its
// listing, which at small batches cost as much as the step (WindowDecodeStepAndRefit). The
// step's shared memory is the start of the refit's.
template <bool kKda, bool kAnyWidth, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads, 2) StepAndRefitKernel(step::StepArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int count;
  if (threadIdx.x < step::kThreads) {
    const int n = step::StepHead<kKda, kAnyWidth, TIn, TOut, NamedBarrier<1, step::kThreads>>(
        a, static_cast<int>(blockIdx.x), smem);
    if (threadIdx.x == 0) count = n;
  }
  __syncthreads();
  if (count < a.rv.p) return;  // an open window, or a padding slot (-1)
  const int b = blockIdx.x / a.rv.num_heads, h = blockIdx.x % a.rv.num_heads;
  uint8_t* region =
      a.pool + (static_cast<size_t>(a.slot[b]) * a.rv.num_heads + h) * a.rv.region_bytes;
  RefitHead<kAnyWidth>(*reinterpret_cast<Shared*>(smem), region, a.rv, kKda);
}

// kAnyWidth: the packed widths' paths (their ranks' factorizations, code packing) compiled in.
// The 8-bit encode runs without them: with them present and never taken it spilled more and ran
// 4-5% slower.
template <typename T, bool kAnyWidth>
__global__ void __launch_bounds__(kThreads, 2) EncodeKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  int slot;
  uint8_t* region = RegionOf(a, &slot);
  if (region == nullptr) return;
  // The state straight into the accumulator layout, fitted and quantized there as the refit
  // does after its fold. Per load instruction a warp reads 8 rows x 32 bytes ([K,V]) or 4
  // columns x 16 consecutive keys ([V,K], the thread's rows a0 and a1 = a0 + 1 as one pair).
  const T* in = static_cast<const T*>(a.states) + static_cast<size_t>(blockIdx.x) * kD * kD;
  const FragmentRows fr;
  float s[kD / 8][4];
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    const int j = fr.Col(nt);
    if (a.kv_layout) {
      LoadPairAsFloat(in, fr.a0 * kD + j, s[nt][0], s[nt][1]);
      LoadPairAsFloat(in, fr.a1 * kD + j, s[nt][2], s[nt][3]);
    } else {
      LoadPairAsFloat(in, j * kD + fr.a0, s[nt][0], s[nt][2]);
      LoadPairAsFloat(in, (j + 1) * kD + fr.a0, s[nt][1], s[nt][3]);
    }
  }
  if (a.rv.r > 0) BuildOmegaFragments(sh, a.rv.r);
  if (threadIdx.x < kD) sh.col_max[threadIdx.x] = 0;
  __syncthreads();
  FitAndEncodeFragments<kAnyWidth>(sh, s, region, a.rv, 0);
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 3) DecodeKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DecodeShared& sh = *reinterpret_cast<DecodeShared*>(smem);
  int slot;
  uint8_t* region = RegionOf(a, &slot);
  T* out = static_cast<T*>(a.states) + static_cast<size_t>(blockIdx.x) * kD * kD;
  if (region == nullptr) {  // padding: zeros
    for (int i = threadIdx.x; i < kD * kD; i += kThreads) StoreFromFloat(out, i, 0.0f);
    return;
  }
  // Straight from the fold's accumulators: per store instruction a warp writes 8 rows x 32
  // bytes ([K,V]) or one column's 16 consecutive keys ([V,K], the thread's rows a0 and a1 = a0 + 1
  // as one pair), whole 32-byte sectors either way.
  const bool kv = a.kv_layout != 0;
  const FragmentRows fr;
  // The staging holds p records; a window never holds more.
  const int n = min(*reinterpret_cast<const int32_t*>(region + a.rv.window), a.rv.p);
  StageReads<true>(sh, region, a.rv, n);
  FoldStaged<2, true>(sh, a.rv, n, a.kda, [&](int nt, float s00, float s01, float s10, float s11) {
    const int j = fr.Col(nt);
    if (kv) {
      StorePairFromFloat(out, fr.a0 * kD + j, s00, s01);
      StorePairFromFloat(out, fr.a1 * kD + j, s10, s11);
    } else {
      StorePairFromFloat(out, j * kD + fr.a0, s00, s10);
      StorePairFromFloat(out, (j + 1) * kD + fr.a0, s01, s11);
    }
  });
}

}  // namespace


namespace {

using StepAndRefitFn = void (*)(step::StepArgs);

StepAndRefitFn StepAndRefitKernelFor(bool kda, DType in, DType out, bool packed) {
  StepAndRefitFn kernel = nullptr;
  DispatchStep(kda, in, out, [&](auto kda_c, auto in_t, auto out_t) {
    constexpr bool kKda = decltype(kda_c)::value;
    using TIn = typename decltype(in_t)::type;
    using TOut = typename decltype(out_t)::type;
    kernel = packed ? StepAndRefitKernel<kKda, true, TIn, TOut>
                    : StepAndRefitKernel<kKda, false, TIn, TOut>;
  });
  return kernel;
}

Status PrepareRegionLaunch(const PoolLayout& layout, const void* pool, const int32_t* slot,
                           int batch) {
  LEAPCACHE_RETURN_IF_ERROR(ValidatePoolLayout(layout, pool));
  LEAPCACHE_RETURN_IF_ERROR(ValidateRegionBatch(layout, slot, batch));
  return OncePerDevice([] {
    return CudaStatus(
        [] {
          cudaError_t e = cudaSuccess;
          for (auto* kernel : {RefitKernel<false>, RefitKernel<true>}) {
            if (e == cudaSuccess)
              e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       RefitSharedBytes(kMaxWindow, kMaxRank, kD));
          }
          for (auto* kernel :
               {EncodeKernel<float, false>, EncodeKernel<float, true>,
                EncodeKernel<__nv_bfloat16, false>, EncodeKernel<__nv_bfloat16, true>}) {
            if (e == cudaSuccess)
              e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       EncodeSharedBytes());
          }
          const size_t token_max =
              std::max<size_t>(RefitSharedBytes(kMaxWindow, kMaxRank, kD),
                               step::StepStage(kMaxWindow, kMaxRank, kD).bytes);
          for (bool kda : {false, true}) {
            for (DType in : {DType::kFp32, DType::kBf16}) {
              for (DType out : {DType::kFp32, DType::kBf16}) {
                for (bool packed : {false, true}) {
                  if (e == cudaSuccess)
                    e = cudaFuncSetAttribute(StepAndRefitKernelFor(kda, in, out, packed),
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             token_max);
                }
              }
            }
          }
          const size_t decode_max = DecodeSharedBytes(kMaxWindow, kMaxRank, kD);
          if (e == cudaSuccess)
            e = cudaFuncSetAttribute(DecodeKernel<float>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, decode_max);
          if (e == cudaSuccess)
            e = cudaFuncSetAttribute(DecodeKernel<__nv_bfloat16>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, decode_max);
          return e;
        }(),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
  });
}

}  // namespace

Status WindowRefit(const PoolLayout& layout, const int32_t* slot, int batch, uint8_t* pool,
                   cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, slot, batch));
  if (batch == 0) return OkStatus();
  RegionArgs a{
      MakeRegionView(layout), batch, slot, pool, nullptr, 0, layout.spec().kind == StateKind::kKda};
  // One CTA per resident slot (two per SM), never more than there are heads.
  const int grid = std::min(batch * layout.num_heads(), 2 * SmCount());
  const size_t smem = RefitSharedBytes(layout.spec().p, layout.spec().r, layout.gate());
  auto* kernel = layout.spec().bits != 8 ? RefitKernel<true> : RefitKernel<false>;
  kernel<<<grid, kThreads, smem, stream>>>(a);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

Status WindowDecodeStepAndRefit(const PoolLayout& layout, const StepParams& p, uint8_t* pool,
                                cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateWindowStep(layout, p, pool));
  if (p.batch == 0) return OkStatus();
  // One CTA per head, two per SM, so its step runs at a quarter of the step kernel's CTAs per
  // SM. Measured on an H200 (GDN, staggered windows, H = 32): the one kernel wins at one and two
  // waves (B = 8: 16.9 -> 12.9 us per token; B = 16: 25.0 -> 23.3) and loses from three
  // (B = 24: 27.0 -> 29.0; B = 32: 28.7 -> 33.6), so larger batches take the two launches.
  if (p.batch * p.num_heads > 4 * SmCount()) {
    LEAPCACHE_RETURN_IF_ERROR(WindowDecodeStep(layout, p, pool, stream));
    return WindowRefit(layout, p.slot, p.batch, pool, stream);
  }
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, p.slot, p.batch));
  const step::StepArgs a = step::MakeStepArgs(layout, p, pool);
  const int sp = layout.spec().p, r = layout.spec().r;
  const size_t smem = std::max<size_t>(RefitSharedBytes(sp, r, layout.gate()),
                                       step::StepStage(sp, r, layout.gate()).bytes);
  StepAndRefitKernelFor(
      layout.spec().kind == StateKind::kKda, p.in_dtype, p.out_dtype,
      layout.spec().bits != 8)<<<p.batch * p.num_heads, kThreads, smem, stream>>>(a);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

Status WindowEncode(const PoolLayout& layout, const DenseParams& p, uint8_t* pool,
                    cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateDenseParams(p));
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, p.slot, p.batch));
  if (p.batch == 0) return OkStatus();
  RegionArgs a{MakeRegionView(layout),
               p.batch,
               p.slot,
               pool,
               p.states,
               p.layout == Orientation::kKV ? 1 : 0,
               layout.spec().kind == StateKind::kKda};
  const int grid = p.batch * layout.num_heads();
  const bool packed = layout.spec().bits != 8;
  auto* kernel =
      p.dtype == DType::kBf16
          ? (packed ? EncodeKernel<__nv_bfloat16, true> : EncodeKernel<__nv_bfloat16, false>)
          : (packed ? EncodeKernel<float, true> : EncodeKernel<float, false>);
  kernel<<<grid, kThreads, EncodeSharedBytes(), stream>>>(a);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

Status WindowDecode(const PoolLayout& layout, const DenseParams& p, const uint8_t* pool,
                    cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateDenseParams(p));
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, p.slot, p.batch));
  if (p.batch == 0) return OkStatus();
  RegionArgs a{MakeRegionView(layout),
               p.batch,
               p.slot,
               const_cast<uint8_t*>(pool),
               p.states,
               p.layout == Orientation::kKV ? 1 : 0,
               layout.spec().kind == StateKind::kKda};
  const int grid = p.batch * layout.num_heads();
  const size_t decode_bytes = DecodeSharedBytes(layout.spec().p, layout.spec().r, layout.gate());
  if (p.dtype == DType::kBf16) {
    DecodeKernel<__nv_bfloat16><<<grid, kThreads, decode_bytes, stream>>>(a);
  } else {
    DecodeKernel<float><<<grid, kThreads, decode_bytes, stream>>>(a);
  }
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
