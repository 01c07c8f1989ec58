// What the window-format region kernels share (the refit, encode and decode of pool regions,
// and the one-kernel decode token): the CTA's shape, its shared-memory layouts and their sizes,
// where a thread's elements of the state sit (FragmentRows), and a region launch's arguments and
// checks.
//
// One CTA of 256 threads per (request, head). Every kernel holds the dense fp32 state in the
// layout of the fold's mma accumulators (warp w: rows 16 w .. 16 w + 15, FragmentRows): the
// refit and the decode reconstruct it there (window_fold.cuh), the encode loads it there; the
// refit and the encode fit and quantize it there (window_fit.cuh). Only compressed data crosses
// HBM in a refit: it reads the payload and p records and writes the new payload. Codes are int8
// in shared memory throughout. Every kernel also serves the 6- and 4-bit formats (r = 6, 8):
// their packed rows are widened in place once staged (UnpackCodeRow) and packed as they are
// written out (PackCodeRow), in kernel instances of their own (kAnyWidth), so the 8-bit ones
// carry none of it.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"
#include "gpu/kernels/region.cuh"

namespace leapcache::kernels::window {

constexpr int kD = kKernelDim;
constexpr int kThreads = 256;
// Code rows are 128 bytes; staged at a 144-byte pitch (16-byte aligned for cp.async) so the
// 16 rows a warp touches at once spread over 8 banks instead of one.
constexpr int kCodePitch = kD + 16;
constexpr float kScaleFloor = 1.40129846432481707e-45f;  // 2^-149, as reference/codec.h

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
  float kf[kMaxRank][kD];  // key factors (Y, K as [h][a] while fitting)
  float vf[kMaxRank][kD];  // value factors (Z, Qv as [h][j] while fitting)
  float col_scale[kD];     // s_v / q while reconstructing, q / (s_v pre) while quantizing
  float row_base[kD];      // s_k[a] exp(G[a]) while reconstructing, pre while quantizing
  float fold_unscale[kD];  // 2^-e_a: undoes the fold's per-row operand scaling
  int32_t col_max[kD];     // column maxima as ordered ints (non-negative floats)
  __align__(16) float gram[2][kD / 32][GramStride(kMaxRank)];  // per pass and warp (CholeskyQR2)
  __align__(16) int8_t codes[kD * kCodePitch];                 // [j][a], row pitch kCodePitch
  // Dynamic tail of the refit, sized by the pool's p and r at launch (RefitSharedBytes): one
  // head's staged reads (StageLayout).
  __align__(16) float rec[1];
};

// Shared memory of one decode CTA: what the reconstruction reads and nothing of the fit, so
// three CTAs fit on an SM at p = 16 (the refit's registers allow two). The dynamic tail holds
// the fold's operands, sized for n + r <= p + r, then the staged reads (StageLayout).
struct DecodeShared {
  float col_scale[kD];                          // s_v / q
  float row_base[kD];                           // s_k[a] exp(G[a])
  float fold_unscale[kD];                       // 2^-e_a
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
inline size_t DecodeSharedBytes(int p, int r, int gate) {
  return offsetof(DecodeShared, rec) + sizeof(uint32_t) * FoldWords(p + r) +
         StageLayout(p, r, gate).bytes;
}

// At p = 16, r = 4: 88,768 bytes for KDA, 80,144 for GDN (two CTAs per SM, as the registers
// allow). The encode needs no tail.
inline size_t RefitSharedBytes(int p, int r, int gate) {
  return offsetof(Shared, rec) + StageLayout(p, r, gate).bytes;
}
inline size_t EncodeSharedBytes() { return offsetof(Shared, rec); }

__device__ __forceinline__ uint32_t Half2Bits(__half2 h) {
  return *reinterpret_cast<const uint32_t*>(&h);
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
      : warp(static_cast<int>(threadIdx.x) / 32),
        lane(static_cast<int>(threadIdx.x) % 32),
        gid(lane / 4),
        tig(lane % 4),
        a0(16 * warp + 2 * gid),
        a1(a0 + 1) {}
  __device__ int Col(int nt) const { return 8 * nt + 2 * tig; }
};

// A region kernel's arguments: one CTA per (request, head) of the batch (RegionOf), or, for the
// refit, the due heads of the batch.
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

// Lets each kernel take `bytes` of dynamic shared memory; the first error, if any.
template <typename... Kernel>
cudaError_t AllowSharedBytes(size_t bytes, Kernel... kernels) {
  cudaError_t e = cudaSuccess;
  ((e = e != cudaSuccess
            ? e
            : cudaFuncSetAttribute(kernels, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes))),
   ...);
  return e;
}

// The checks of every region launch (the pool's layout, the batch's slots), then, once per device,
// `allow_shared_bytes` (AllowSharedBytes for the launch's kernels).
template <typename Init>
Status PrepareRegionLaunch(const PoolLayout& layout, const void* pool, const int32_t* slot,
                           int batch, Init&& allow_shared_bytes) {
  LEAPCACHE_RETURN_IF_ERROR(ValidatePoolLayout(layout, pool));
  LEAPCACHE_RETURN_IF_ERROR(ValidateRegionBatch(layout, slot, batch));
  return OncePerDevice([&] {
    return CudaStatus(allow_shared_bytes(), "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)",
                      __FILE__, __LINE__);
  });
}

}  // namespace leapcache::kernels::window
