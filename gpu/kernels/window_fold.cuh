// The reconstruction of a window-format region's state (FORMAT.md section 5; CPU reference:
// WindowState's reconstruct), for the refit and the decode:
//   S = diag(exp(G)) B + sum_j w_j diag(exp(G - G_j)) k_j u_j^T,
// the records and compensators folded on tensor cores as one [dk x (n + r)] x [(n + r) x dv]
// product, the codes' term added in the epilogue. The refit keeps the result in the mma
// accumulators; the decode writes it to global memory from them, half the columns at a time, in
// a shared-memory layout of its own (DecodeShared) that fits three CTAs per SM.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gpu/kernels/code_packing.cuh"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/mma.cuh"
#include "gpu/kernels/region.cuh"
#include "gpu/kernels/window_layout.cuh"

namespace leapcache::kernels::window {

// Byte kByte of a word of four int8 codes, as a float, exactly, without the quarter-rate I2F:
// `biased` is the word with each byte biased by 128 (word ^ 0x80808080, one LOP3 for four
// codes); one PRMT makes the biased byte the low mantissa byte of 2^23, one FADD removes
// 2^23 + 128.
template <int kByte>
__device__ __forceinline__ float CodeToFloat(uint32_t biased) {
  return __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7650 + kByte)) - 8388736.0f;
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


template <typename Sh>
__device__ __forceinline__ FoldOperands FoldArea(Sh& sh, const RegionView& rv, int k_total) {
  const int ktiles = FoldTiles(k_total);
  const int a_pitch = FoldAPitch(ktiles);
  uint32_t* base = FoldBase(sh, rv);
  return {base, base + kD * a_pitch, FoldBRows(sh, rv), a_pitch, ktiles};
}
static_assert(FoldABytes(kMaxWindow + kMaxRank) % 16 == 0, "B's rows start 16-byte aligned");

// Issues every global read of the reconstruction of a region with n records as asynchronous
// copies, in two groups: the records, compensators, scales and log-gate (the fold's operands
// are built from them first), then the codes (needed only by the epilogue, so they stay in
// flight while the operands are built and multiplied). The records' u and the compensators'
// value halves land as B's rows 0 .. n + r - 1, as stored; B's padding rows are zeroed here.
// kPayloadOnly: `region` is a payload alone (a stored blob's, byte-identical to a fresh
// boundary region's first payload_bytes), whose window is empty: n must be 0, and the window's
// log-gate G is staged as the zeros a fresh boundary holds instead of read past the payload.
template <bool kAnyWidth, typename Sh, bool kPayloadOnly = false>
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
  if constexpr (kPayloadOnly) {
    for (int i = t; i < rv.gate; i += kThreads) reinterpret_cast<float*>(staged + st.G)[i] = 0.0f;
  } else {
    BlockCopyAsync(staged + st.G, region + rv.window + 16, rv.gate * 4);
  }
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

}  // namespace leapcache::kernels::window
