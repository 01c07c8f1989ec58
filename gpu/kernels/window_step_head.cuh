// The window format's fused decode step of one (request, head) (FORMAT.md section 5; CPU
// reference: reference::WindowState::Step), run by 128 threads: the step kernel's CTA
// (window_step.cu), or the first four warps of the step-and-refit kernel's (window_token.cu):
//   A. the 16 KiB of int8 codes are requested first (8 x 16 B per lane, in flight during the
//      rest of the prologue; 6- and 4-bit codes: 12 or 8 B per piece, widened in registers
//      before C to the top bits of int8 bytes, 4 or 16 times the codes); inputs are normalised, the
//      window's log-gate advanced, and the read vectors y = exp(G) * x (x = k, q) staged in shared
//      memory, with s_k * y split into four 7-bit integer limbs each;
//   C. the code pass on integer tensor cores: the codes times [y_k, y_q] is a [128 x 128] x
//      [128 x 8] product of int8 codes and int8 limbs (mma.sync m16n8k32, exact int32 sums), so
//      the codes go from their loads straight into the mma with no conversion, and the limbs'
//      27 bits leave the fp32 recombination as the only rounding;
//   B. the short dot products: each compensator's key factor and each record's key with the
//      decayed k and q (eight lanes per item, four items per warp at a time);
//   D. thread j owns value column j: adds the compensator and record terms, forms u_j, finds
//      the new record's scale (block max), rounds, writes o_j and appends the record.
// C runs before B: A and C read none of the records and compensators, so their bulk copies
// (issued once the window length is known, the third read of a chain slot -> window length ->
// records) run during A and C, and only B and D wait for them.
// Only the record append and o are written; the boundary payload is read once.
#pragma once

#include <cuda_bf16.h>

#include "gpu/format/half.h"
#include "gpu/kernels/code_packing.cuh"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/mma.cuh"
#include "gpu/kernels/region.cuh"

namespace leapcache::kernels::step {

constexpr int kD = kKernelDim;
constexpr int kThreads = 128;
constexpr int kMaxItems = kMaxRank + kMaxWindow + 1;

// The dynamic shared memory: the open window's records and the compensators, staged by
// bulk copies, sized by the pool's p and r (so a p = 16 pool keeps more CTAs per SM than the
// largest window would allow). Byte offsets, every section 16-byte aligned.
struct StepStage {
  int rec_k, rec_u, rec_g, rec_w, comp, bytes;
  __host__ __device__ StepStage(int p, int r, int gate) {
    rec_k = 0;
    rec_u = rec_k + p * kD * 2;
    rec_g = rec_u + p * kD * 2;
    rec_w = rec_g + RoundUp16(p * gate * 4);
    comp = rec_w + RoundUp16(p * 4);
    bytes = comp + r * 2 * kD * 2;
  }
};

struct StepArgs {
  RegionView rv;
  int batch;
  const int32_t* slot;
  const void *q, *k, *v;
  const float *g, *beta;
  void* o;
  uint8_t* pool;
  bool l2norm;
  float scale;
};

inline StepArgs MakeStepArgs(const PoolLayout& layout, const StepParams& p, uint8_t* pool) {
  return StepArgs{MakeRegionView(layout),
                  p.batch,
                  p.slot,
                  p.q,
                  p.k,
                  p.v,
                  p.g,
                  p.beta,
                  p.o,
                  pool,
                  p.l2norm_qk,
                  p.scale};
}

// Power of two 2^e with max / 2^e in [1, 2) (1 for zero): the record scale of FORMAT.md. Bit
// arithmetic for normal maxima (the block-uniform branch to frexpf is for subnormal ones).
__device__ __forceinline__ float RecordScale(float max_abs) {
  if (max_abs == 0.0f) return 1.0f;
  const int bits = __float_as_int(max_abs) & 0x7f800000;
  if (bits != 0) return __int_as_float(bits);
  int e = 0;
  frexpf(max_abs, &e);
  return ldexpf(1.0f, e - 1);
}

// x / s for a power of two s, exactly as the division rounds: a multiplication by 1 / s where
// that is a normal float (every scale real inputs produce), the division otherwise.
__device__ __forceinline__ float DivideByPowerOfTwo(float x, float s) {
  const int bits = __float_as_int(s);
  if (bits >= 0x00800000 && bits <= 0x7e800000) return x * __int_as_float(0x7f000000 - bits);
  return x / s;
}

// The exponent that brings a read vector's largest magnitude into [2^5, 2^6), so its first
// limb rounds into [-64, 64]; clamped so that 2^e stays a normal float.
__device__ __forceinline__ int LimbExponent(float max_abs) {
  if (!(max_abs > 0.0f)) return 0;
  int e = 0;
  frexpf(max_abs, &e);  // max_abs in [2^(e-1), 2^e)
  return max(-120, min(120, 6 - e));
}

// y (already scaled by 2^LimbExponent) as four int8 limbs, y = l0 + l1 / 128 + l2 / 128^2 +
// l3 / 128^3 up to 2^-22: each limb is the rounded remainder of the last, every step exact in
// fp32 (the remainder is at most 1/2, and times 128 at most 64).
__device__ __forceinline__ void SplitIntoLimbs(float y, int8_t* limb, int stride) {
#pragma unroll
  for (int l = 0; l < 4; ++l) {
    const float r = rintf(y);
    limb[l * stride] = static_cast<int8_t>(static_cast<int>(r));
    y = (y - r) * 128.0f;
  }
}

// One step of (request, head) bh, run by threads 0 .. kThreads - 1 of the CTA; Barrier is
// theirs (the whole CTA's in the step kernel, a named one where a larger CTA runs the step).
// s_stage: the dynamic shared memory, StepStage(p, r, gate).bytes of it. Returns the window's
// record count after the step (n + 1), the count it found where the window was full or the count
// corrupt (n >= p or n < 0: the step wrote NaN and left the region), or -1 for a padding slot;
// the same in every thread.
// kPacked: the pool's codes are 6- or 4-bit (rv.bits), read packed and widened before the code
// pass; the 8-bit kernels carry none of it (their registers set their CTAs per SM).
template <bool kKda, bool kPacked, typename TIn, typename TOut, typename Barrier>
__device__ __forceinline__ int StepHead(const StepArgs& a, int bh, uint8_t* s_stage) {
  // Read by float4 in phase B.
  __shared__ __align__(16) float s_yk[kD], s_yq[kD];  // exp(G) * x
  // s_k * exp(G) * x (x = k, q) times a per-vector power of two as four int8 limbs: rows
  // [k limbs 0-3, q limbs 0-3], the B operand (columns) of the code pass.
  __shared__ __align__(16) int8_t s_limbs[8][kD];
  __shared__ __align__(16) float s_xk[kD], s_xq[kD];  // prepared k and q
  __shared__ __align__(16) float s_G[kD];             // the advanced cumulative log-gate
  __shared__ float s_acc_k[kD], s_acc_q[kD];
  __shared__ float2 s_dot[kMaxItems];  // (with k, with q) per compensator, then per record
  __shared__ float s_red[3 * kThreads / 32];
  __shared__ uint64_t s_bar;  // the staging's mbarrier

  const RegionView& rv = a.rv;
  const StepStage stage(rv.p, rv.r, rv.gate);
  __half* const s_rec_k = reinterpret_cast<__half*>(s_stage + stage.rec_k);  // [p][dk]
  __half* const s_rec_u = reinterpret_cast<__half*>(s_stage + stage.rec_u);  // [p][dv]
  float* const s_rec_g = reinterpret_cast<float*>(s_stage + stage.rec_g);    // [p][gate]
  float* const s_rec_w = reinterpret_cast<float*>(s_stage + stage.rec_w);    // [p]
  __half* const s_comp = reinterpret_cast<__half*>(s_stage + stage.comp);    // [r][dk + dv]
  const int b = bh / rv.num_heads, h = bh % rv.num_heads;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  // The step's inputs depend on nothing in the pool: requested first, their latency overlaps the
  // slot -> window -> records chain of dependent reads below.
  const size_t in_off = static_cast<size_t>(bh) * kD;
  float qv = LoadAsFloat(static_cast<const TIn*>(a.q) + in_off, t);
  float kv = LoadAsFloat(static_cast<const TIn*>(a.k) + in_off, t);
  const float vv = LoadAsFloat(static_cast<const TIn*>(a.v) + in_off, t);
  const float beta = a.beta[bh];
  const float g_in = kKda ? a.g[in_off + t] : a.g[bh];
  const int slot = a.slot[b];
  TOut* o = static_cast<TOut*>(a.o) + static_cast<size_t>(bh) * kD;
  if (slot < 0 || slot >= rv.num_slots) {
    StoreFromFloat(o, t, 0.0f);
    return -1;
  }
  uint8_t* region = a.pool + (static_cast<size_t>(slot) * rv.num_heads + h) * rv.region_bytes;

  // A. Issue the code loads first (with the window length, not after it: the two round trips
  // overlap), in the mma fragment layout of phase C: warp w owns value rows
  // 32 w + 16 mt + {g, g + 8} (g = lane / 4, mt = 0, 1); lane quad c = lane % 4 reads bytes
  // [16 c, +16) and [64 + 16 c, +16) of each (64 contiguous bytes per row and load).
  const int g = lane / 4, c4 = lane % 4;
  uint4 codes[8];  // [mt][row g / g + 8][low / high half of the row]
  // Packed rows: the same keys' 8 (4-bit) or 12 (6-bit) bytes, widened in phase C.
  uint32_t packed[8][3];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int j = 32 * warp + 16 * (i / 4) + g + 8 * ((i / 2) % 2);
    if constexpr (kPacked) {
      const int row_bytes = kD * rv.bits / 8;
      const uint8_t* piece =
          region + rv.codes + j * row_bytes + (row_bytes / 2) * (i % 2) + (row_bytes / 8) * c4;
      const uint32_t* w = reinterpret_cast<const uint32_t*>(piece);
      packed[i][0] = __ldcs(w);
      packed[i][1] = __ldcs(w + 1);
      packed[i][2] = rv.bits == 6 ? __ldcs(w + 2) : 0u;
    } else {
      codes[i] = __ldcs(
          reinterpret_cast<const uint4*>(region + rv.codes + j * kD + 64 * (i % 2) + 16 * c4));
    }
  }
  const int n = *reinterpret_cast<const int32_t*>(region + rv.window);
  // Thread t needs only key row t's scale s_k and value column t's scale s_v: plain loads,
  // written ahead of the window's check so they need not queue behind it (the compiler may
  // still sink a load below the check: it does so with the log-gate's).
  const float sk_row =
      rv.smoothing ? reinterpret_cast<const float*>(region + rv.row_scale)[t] : 1.0f;
  const float col_scale = reinterpret_cast<const float*>(region + rv.col_scale)[t];
  const float G_old = reinterpret_cast<const float*>(region + rv.window + 16)[kKda ? t : 0];
  // A full window not yet refitted (a caller bug), or a count outside [0, p] (a corrupt header:
  // its byte counts below would wrap and the append land in another section): keep the state,
  // flag the output.
  if (n < 0 || n >= rv.p) {
    StoreFromFloat(o, t, __int_as_float(0x7fc00000));
    return n;
  }
  // The records and compensators, staged by the copy engine: thread 0 issues up to five bulk
  // copies (sizes rounded up to 16 bytes, within the region's sections) that complete on s_bar.
  if (t == 0) {
    const uint32_t rec_bytes = n * kD * 2, g_bytes = RoundUp16(n * rv.gate * 4),
                   w_bytes = RoundUp16(n * 4);
    const uint32_t comp_bytes = rv.r * 2 * kD * 2;
    BulkStageBegin(&s_bar, 2 * rec_bytes + g_bytes + w_bytes + comp_bytes);
    if (n > 0) {
      BulkCopy(s_rec_k, region + rv.rec_k, rec_bytes, &s_bar);
      BulkCopy(s_rec_u, region + rv.rec_u, rec_bytes, &s_bar);
      BulkCopy(s_rec_g, region + rv.rec_g, g_bytes, &s_bar);
      BulkCopy(s_rec_w, region + rv.rec_w, w_bytes, &s_bar);
    }
    if (comp_bytes > 0) BulkCopy(s_comp, region + rv.comp, comp_bytes, &s_bar);
  }
  // Packed codes enter the code pass at the top of their bytes (16 or 4 times the code), and
  // their column factor carries that power of two back: the sums grow by it exactly, the factor
  // shrinks by it exactly, so s_acc * cf is the same product, bit for bit.
  const float cf = col_scale / (kPacked ? rv.code_max * (rv.bits == 4 ? 16.0f : 4.0f) : 127.0f);
  // Log-gates clamped at -1000 as reference::kMinLogGate: same decay, no overflow of G.
  const float Gt = G_old + fmaxf(g_in, -1000.0f);
  // The read vectors. The first block barrier (in BlockSumN or BlockMaxN) publishes the
  // initialised s_bar before any thread waits on it.
  if (a.l2norm) {
    float sums[2] = {qv * qv, kv * kv};
    BlockSumN<kThreads, 2, Barrier>(sums, s_red);
    qv *= 1.0f / sqrtf(sums[0] + 1e-6f);
    kv *= 1.0f / sqrtf(sums[1] + 1e-6f);
  }
  qv *= a.scale;
  const float e = expf(Gt);
  s_xk[t] = kv;
  s_xq[t] = qv;
  s_yk[t] = e * kv;
  s_yq[t] = e * qv;
  s_G[t] = Gt;
  const float ysk = sk_row * (e * kv), ysq = sk_row * (e * qv);
  float maxima[3] = {fabsf(kv), fabsf(ysk), fabsf(ysq)};
  BlockMaxN<kThreads, 3, Barrier>(maxima, s_red);  // barrier
  // The new record's key: scaled by a power of two and rounded to fp16 (as stored).
  const float k_scale = RecordScale(maxima[0]);
  const float k_rec = RoundToHalf(DivideByPowerOfTwo(kv, k_scale));
  // The code pass's operands: y * 2^ex as four 7-bit limbs (27 bits of y relative to its
  // vector's largest entry).
  const int ex_k = LimbExponent(maxima[1]), ex_q = LimbExponent(maxima[2]);
  SplitIntoLimbs(ysk * PowerOfTwo(ex_k), &s_limbs[0][t], kD);
  SplitIntoLimbs(ysq * PowerOfTwo(ex_q), &s_limbs[4][t], kD);

  // The limbs visible to the code pass (one barrier pair for it and the sum of k_rec q).
  const float knq = BlockSum<kThreads, Barrier>(k_rec * qv, s_red);

  // C. The code pass, mma.sync m16n8k32 s8 x s8 -> s32. Key index permutation: k-tile kt takes,
  // for lane quad c, the codes of words 2 kt (a0 / a1: rows g / g + 8) and 2 kt + 1 (a2 / a3)
  // of the 8 words this lane loaded per row; B column n = g is limb row g of s_limbs at the
  // same keys, which are the same words of the same 16-byte loads. Any permutation of the key
  // index gives the same sum.
  if constexpr (kPacked) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      codes[i] = rv.bits == 4 ? WidenNibblesHigh(packed[i][0], packed[i][1])
                              : WidenSixesHigh(packed[i][0], packed[i][1], packed[i][2]);
    }
  }
  uint32_t bfrag[8];
  {
    const uint4 lo = *reinterpret_cast<const uint4*>(&s_limbs[g][16 * c4]);
    const uint4 hi = *reinterpret_cast<const uint4*>(&s_limbs[g][64 + 16 * c4]);
    const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) bfrag[i] = words[i];
  }
  // Lane quad c holds columns 2 c and 2 c + 1: limbs (0, 1) of k, (2, 3) of k, (0, 1) of q,
  // (2, 3) of q. Its two limbs' weight, and the vector's unscaling power of two.
  const float w_hi = (c4 % 2 == 0) ? 1.0f : 1.0f / (128.0f * 128.0f);
  const float unscale = PowerOfTwo(-(c4 < 2 ? ex_k : ex_q));
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    int d[4] = {0, 0, 0, 0};
    const uint4 row_g[2] = {codes[4 * mt], codes[4 * mt + 1]};
    const uint4 row_g8[2] = {codes[4 * mt + 2], codes[4 * mt + 3]};
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
      auto word = [](const uint4(&row)[2], int w) {
        const uint4& v = row[w / 4];
        return (w % 4) == 0 ? v.x : (w % 4) == 1 ? v.y : (w % 4) == 2 ? v.z : v.w;
      };
      const uint32_t af[4] = {word(row_g, 2 * kt), word(row_g8, 2 * kt), word(row_g, 2 * kt + 1),
                              word(row_g8, 2 * kt + 1)};
      MmaS8(d, af, bfrag[2 * kt], bfrag[2 * kt + 1]);
    }
    // Row g: columns 2 c (weight w_hi) and 2 c + 1 (w_hi / 128); the other limb pair of the same
    // vector is in the neighbouring lane quad. int32 sums of at most 2^20 are exact in fp32.
    float part_g =
        fmaf(static_cast<float>(d[1]), w_hi * (1.0f / 128.0f), static_cast<float>(d[0]) * w_hi);
    float part_g8 =
        fmaf(static_cast<float>(d[3]), w_hi * (1.0f / 128.0f), static_cast<float>(d[2]) * w_hi);
    part_g += __shfl_xor_sync(0xffffffffu, part_g, 1);
    part_g8 += __shfl_xor_sync(0xffffffffu, part_g8, 1);
    const int j = 32 * warp + 16 * mt + g;
    if (c4 == 0) {
      s_acc_k[j] = part_g * unscale;
      s_acc_k[j + 8] = part_g8 * unscale;
    } else if (c4 == 2) {
      s_acc_q[j] = part_g * unscale;
      s_acc_q[j + 8] = part_g8 * unscale;
    }
  }
  // The records and compensators: the bulk copies ran during A and C.
  BulkStageWait(&s_bar);

  // B. Dot products of length dk: compensators 0..r-1 (with exp(G) x), records 0..n-1 (with x
  // and the records' decay). Four items per warp at a time, eight lanes per item: lane s of an
  // item's group covers keys 4 s + 32 m + {0..3} (m = 0..3), so each 8-lane phase of a shared
  // load reads one contiguous run, and a sum needs three shuffle levels instead of five.
  const int items = rv.r + n;
  const int sub = lane % 8;
  for (int base = 4 * warp; base < items; base += kThreads / 8) {
    const int it = base + lane / 8;
    float dk_ = 0.0f, dq_ = 0.0f, factor = 1.0f;
    if (it < rv.r) {
      const __half* kf = s_comp + it * 2 * kD;  // row h: [K~_h (dk) | U~_h (dv)]
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int a0 = 4 * sub + 32 * m;
        const uint2 hv = *reinterpret_cast<const uint2*>(kf + a0);
        const float2 f01 = __half22float2(*reinterpret_cast<const __half2*>(&hv.x));
        const float2 f23 = __half22float2(*reinterpret_cast<const __half2*>(&hv.y));
        const float4 yk = *reinterpret_cast<const float4*>(s_yk + a0);
        const float4 yq = *reinterpret_cast<const float4*>(s_yq + a0);
        dk_ = fmaf(f01.x, yk.x, fmaf(f01.y, yk.y, fmaf(f23.x, yk.z, fmaf(f23.y, yk.w, dk_))));
        dq_ = fmaf(f01.x, yq.x, fmaf(f01.y, yq.y, fmaf(f23.x, yq.z, fmaf(f23.y, yq.w, dq_))));
      }
    } else if (it < items) {
      const int rec = it - rv.r;
      const __half* rk = s_rec_k + rec * kD;
      const float* rg = s_rec_g + rec * rv.gate;
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int a0 = 4 * sub + 32 * m;
        const uint2 hv = *reinterpret_cast<const uint2*>(rk + a0);
        const float2 f01 = __half22float2(*reinterpret_cast<const __half2*>(&hv.x));
        const float2 f23 = __half22float2(*reinterpret_cast<const __half2*>(&hv.y));
        float f[4] = {f01.x, f01.y, f23.x, f23.y};
        if (kKda) {
          const float4 G = *reinterpret_cast<const float4*>(s_G + a0);
          const float4 Gr = *reinterpret_cast<const float4*>(rg + a0);
          f[0] *= expf(G.x - Gr.x);
          f[1] *= expf(G.y - Gr.y);
          f[2] *= expf(G.z - Gr.z);
          f[3] *= expf(G.w - Gr.w);
        }
        const float4 xk = *reinterpret_cast<const float4*>(s_xk + a0);
        const float4 xq = *reinterpret_cast<const float4*>(s_xq + a0);
        dk_ = fmaf(f[0], xk.x, fmaf(f[1], xk.y, fmaf(f[2], xk.z, fmaf(f[3], xk.w, dk_))));
        dq_ = fmaf(f[0], xq.x, fmaf(f[1], xq.y, fmaf(f[2], xq.z, fmaf(f[3], xq.w, dq_))));
      }
      factor = (kKda ? 1.0f : expf(s_G[0] - rg[0])) * s_rec_w[rec];
    }
    dk_ = GroupSum<8>(dk_);
    dq_ = GroupSum<8>(dq_);
    if (sub == 0 && it < items) s_dot[it] = make_float2(dk_ * factor, dq_ * factor);
  }
  Barrier::Sync();  // B's and C's results visible

  // D. Thread t owns value column j = t.
  const int j = t;
  float rk = s_acc_k[j] * cf, rq = s_acc_q[j] * cf;
  for (int c = 0; c < rv.r; ++c) {
    const float uf = __half2float(s_comp[c * 2 * kD + kD + j]);
    const float2 d = s_dot[c];
    rk = fmaf(uf, d.x, rk);
    rq = fmaf(uf, d.y, rq);
  }
  for (int rec = 0; rec < n; ++rec) {
    const float uf = __half2float(s_rec_u[rec * kD + j]);
    const float2 d = s_dot[rv.r + rec];
    rk = fmaf(d.x, uf, rk);
    rq = fmaf(d.y, uf, rq);
  }
  const float u = beta * (vv - rk);
  const float u_scale = RecordScale(BlockMax<kThreads, Barrier>(fabsf(u), s_red));
  const float u_rec = RoundToHalf(DivideByPowerOfTwo(u, u_scale));
  const float w_new = k_scale * u_scale;
  StoreFromFloat(o, j, fmaf(w_new * knq, u_rec, rq));

  // Append record n and advance the window.
  reinterpret_cast<__half*>(region + rv.rec_u)[n * kD + j] = __float2half_rn(u_rec);
  reinterpret_cast<__half*>(region + rv.rec_k)[n * kD + t] = __float2half_rn(k_rec);
  float* rec_g = reinterpret_cast<float*>(region + rv.rec_g) + n * rv.gate;
  float* G_new = reinterpret_cast<float*>(region + rv.window + 16);
  if (kKda || t == 0) {
    rec_g[t] = Gt;
    G_new[t] = Gt;
  }
  if (t == 0) {
    reinterpret_cast<float*>(region + rv.rec_w)[n] = w_new;
    StoreWindowHead(region + rv.window, n + 1, 0);  // clears a refit's mark
  }
  return n + 1;
}

}  // namespace leapcache::kernels::step
