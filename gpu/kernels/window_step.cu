// The window format's fused decode step (FORMAT.md section 5; CPU reference:
// reference::WindowState::Step). One CTA of 128 threads per (request, head):
//   A. the 16 KiB of int8 codes are requested first (8 x 16 B per lane, in flight during the
//      rest of the prologue); inputs are normalised, the window's log-gate advanced, and the
//      read vectors y = exp(G) * x (x = k, q) and s_k * y staged in shared memory;
//   B. the short dot products: each compensator's key factor and each record's key with the
//      decayed k and q (one warp per item);
//   C. the code pass: eight lanes per value row, both readouts from one read of the codes;
//   D. thread j owns value column j: adds the compensator and record terms, forms u_j, finds
//      the new record's scale (block max), rounds, writes o_j and appends the record.
// Only the record append and o are written; the boundary payload is read once.
#include <cuda_bf16.h>

#include "gpu/half.h"
#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/dispatch.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"
#include "gpu/kernels/region.cuh"

namespace leapcache::kernels {
namespace {

constexpr int kD = kKernelDim;
constexpr int kThreads = 128;
constexpr int kMaxItems = kMaxRank + kMaxWindow + 1;

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

// Power of two 2^e with max / 2^e in [1, 2) (1 for zero): the record scale of FORMAT.md.
__device__ __forceinline__ float RecordScale(float max_abs) {
  if (max_abs == 0.0f) return 1.0f;
  int e = 0;
  frexpf(max_abs, &e);
  return ldexpf(1.0f, e - 1);
}

// Four int8 codes (one 32-bit word) to floats, exactly: each byte biased by 128 becomes the low
// mantissa byte of 2^23 (PRMT), and one FADD removes 2^23 + 128. Avoids the quarter-rate I2F.
__device__ __forceinline__ void Int8x4ToFloat(uint32_t w, float f[4]) {
  const uint32_t biased = w ^ 0x80808080u;
  f[0] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7650)) - 8388736.0f;
  f[1] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7651)) - 8388736.0f;
  f[2] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7652)) - 8388736.0f;
  f[3] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7653)) - 8388736.0f;
}

template <bool kKda, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads) WindowStepKernel(StepArgs a) {
  __shared__ float s_yk[kD], s_yq[kD];    // exp(G) * x
  __shared__ float s_ysk[kD], s_ysq[kD];  // s_k * exp(G) * x
  __shared__ float s_xk[kD], s_xq[kD];    // prepared k and q
  __shared__ float s_G[kD];               // the advanced cumulative log-gate
  __shared__ float s_acc_k[kD], s_acc_q[kD];
  __shared__ float s_dot_k[kMaxItems], s_dot_q[kMaxItems];
  __shared__ float s_red[kThreads / 32];
  // The open window's records, the compensators and the scales, staged by cp.async.
  __shared__ __align__(16) __half s_rec_k[kMaxWindow][kD];
  __shared__ __align__(16) __half s_rec_u[kMaxWindow][kD];
  __shared__ __align__(16) float s_rec_g[kKda ? kMaxWindow * kD : kMaxWindow];
  __shared__ __align__(16) float s_rec_w[kMaxWindow];
  __shared__ __align__(16) __half s_comp[kMaxRank * 2 * kD];
  __shared__ __align__(16) float s_row_scale[kD], s_col_scale[kD];

  const RegionView& rv = a.rv;
  const int bh = blockIdx.x;
  const int b = bh / rv.num_heads, h = bh % rv.num_heads;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int slot = a.slot[b];
  TOut* o = static_cast<TOut*>(a.o) + static_cast<size_t>(bh) * kD;
  if (slot < 0 || slot >= rv.num_slots) {
    StoreFromFloat(o, t, 0.0f);
    return;
  }
  uint8_t* region = a.pool + (static_cast<size_t>(slot) * rv.num_heads + h) * rv.region_bytes;
  const int n = *reinterpret_cast<const int32_t*>(region + rv.window);
  if (n >= rv.p) {  // full window not yet refitted: a caller bug; keep the state, flag the output
    StoreFromFloat(o, t, __int_as_float(0x7fc00000));
    return;
  }

  // A. Issue the code loads first: rows 32 warp + 4 it + group, bytes [16 part, +16).
  const int group = lane / 8, part = lane % 8;
  uint4 codes[8];
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int j = 32 * warp + 4 * it + group;
    codes[it] = __ldcs(reinterpret_cast<const uint4*>(region + rv.codes + j * kD) + part);
  }
  BlockCopyAsync(s_rec_k, region + rv.rec_k, n * kD * 2);
  BlockCopyAsync(s_rec_u, region + rv.rec_u, n * kD * 2);
  BlockCopyAsync(s_rec_g, region + rv.rec_g, n * rv.gate * 4);
  BlockCopyAsync(s_rec_w, region + rv.rec_w, n * 4);
  BlockCopyAsync(s_comp, region + rv.comp, rv.r * 2 * kD * 2);
  if (rv.smoothing) BlockCopyAsync(s_row_scale, region + rv.row_scale, kD * 4);
  BlockCopyAsync(s_col_scale, region + rv.col_scale, kD * 4);
  const float* G_old = reinterpret_cast<const float*>(region + rv.window + 16);
  const size_t in_off = static_cast<size_t>(bh) * kD;
  float qv = LoadAsFloat(static_cast<const TIn*>(a.q) + in_off, t);
  float kv = LoadAsFloat(static_cast<const TIn*>(a.k) + in_off, t);
  const float vv = LoadAsFloat(static_cast<const TIn*>(a.v) + in_off, t);
  const float beta = a.beta[bh];
  // Log-gates clamped at -1000 as reference::kMinLogGate: same decay, no overflow of G.
  const float Gt = kKda ? G_old[t] + fmaxf(a.g[in_off + t], -1000.0f) : G_old[0] + fmaxf(a.g[bh], -1000.0f);
  CopyAsyncWaitAll();
  __syncthreads();
  const float sk_row = rv.smoothing ? s_row_scale[t] : 1.0f;
  if (a.l2norm) {
    const float qs = BlockSum<kThreads>(qv * qv, s_red);
    const float ks = BlockSum<kThreads>(kv * kv, s_red);
    qv *= 1.0f / sqrtf(qs + 1e-6f);
    kv *= 1.0f / sqrtf(ks + 1e-6f);
  }
  qv *= a.scale;
  const float e = expf(Gt);
  s_xk[t] = kv;
  s_xq[t] = qv;
  s_yk[t] = e * kv;
  s_yq[t] = e * qv;
  s_ysk[t] = sk_row * (e * kv);
  s_ysq[t] = sk_row * (e * qv);
  s_G[t] = Gt;
  // The new record's key: scaled by a power of two and rounded to fp16 (as stored).
  const float k_scale = RecordScale(BlockMax<kThreads>(fabsf(kv), s_red));  // barrier
  const float k_rec = RoundToHalf(kv / k_scale);

  // B. Dot products of length dk, one warp per item: compensators 0..r-1, records 0..n-1,
  // and the new record's key with q (its scale w is known only after u).
  const int items = rv.r + n;
  const __half* comp = s_comp;
  for (int it = warp; it < items; it += kThreads / 32) {
    float dk_ = 0.0f, dq_ = 0.0f;
    if (it < rv.r) {
      const __half* kf = comp + it * 2 * kD;  // row h: [K~_h (dk) | U~_h (dv)]
#pragma unroll
      for (int i = 0; i < kD / 32; ++i) {
        const int idx = lane + 32 * i;
        const float f = __half2float(kf[idx]);
        dk_ = fmaf(f, s_yk[idx], dk_);
        dq_ = fmaf(f, s_yq[idx], dq_);
      }
    } else {
      const int rec = it - rv.r;
      const __half* rk = s_rec_k[rec];
      const float* rg = s_rec_g + rec * rv.gate;
      const float w = s_rec_w[rec];
#pragma unroll
      for (int i = 0; i < kD / 32; ++i) {
        const int idx = lane + 32 * i;
        float f = __half2float(rk[idx]);
        if (kKda) f *= expf(s_G[idx] - rg[idx]);
        dk_ = fmaf(f, s_xk[idx], dk_);
        dq_ = fmaf(f, s_xq[idx], dq_);
      }
      const float decay = kKda ? 1.0f : expf(s_G[0] - rg[0]);
      dk_ = GroupSum<32>(dk_) * decay * w;
      dq_ = GroupSum<32>(dq_) * decay * w;
      if (lane == 0) {
        s_dot_k[it] = dk_;
        s_dot_q[it] = dq_;
      }
      continue;
    }
    dk_ = GroupSum<32>(dk_);
    dq_ = GroupSum<32>(dq_);
    if (lane == 0) {
      s_dot_k[it] = dk_;
      s_dot_q[it] = dq_;
    }
  }
  const float knq = BlockSum<kThreads>(k_rec * qv, s_red);  // barrier: B's results visible

  // C. The code pass: this lane's 16 key indices [16 part, +16).
  float yk[16], yq[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    yk[i] = s_ysk[16 * part + i];
    yq[i] = s_ysq[16 * part + i];
  }
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const uint32_t w4[4] = {codes[it].x, codes[it].y, codes[it].z, codes[it].w};
    float ak = 0.0f, aq = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float f[4];
      Int8x4ToFloat(w4[c], f);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        ak = fmaf(f[i], yk[4 * c + i], ak);
        aq = fmaf(f[i], yq[4 * c + i], aq);
      }
    }
    ak = GroupSum<8>(ak);
    aq = GroupSum<8>(aq);
    if (part == 0) {
      const int j = 32 * warp + 4 * it + group;
      s_acc_k[j] = ak;
      s_acc_q[j] = aq;
    }
  }
  __syncthreads();

  // D. Thread t owns value column j = t.
  const int j = t;
  const float cf = s_col_scale[j] / 127.0f;
  float rk = s_acc_k[j] * cf, rq = s_acc_q[j] * cf;
  for (int c = 0; c < rv.r; ++c) {
    const float uf = __half2float(comp[c * 2 * kD + kD + j]);
    rk = fmaf(uf, s_dot_k[c], rk);
    rq = fmaf(uf, s_dot_q[c], rq);
  }
  for (int rec = 0; rec < n; ++rec) {
    const float uf = __half2float(s_rec_u[rec][j]);
    rk = fmaf(s_dot_k[rv.r + rec], uf, rk);
    rq = fmaf(s_dot_q[rv.r + rec], uf, rq);
  }
  const float u = beta * (vv - rk);
  const float u_scale = RecordScale(BlockMax<kThreads>(fabsf(u), s_red));
  const float u_rec = RoundToHalf(u / u_scale);
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
    *reinterpret_cast<int32_t*>(region + rv.window) = n + 1;
  }
}

}  // namespace


Status WindowDecodeStep(const PoolLayout& layout, const StepParams& p, uint8_t* pool,
                        cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateStepParams(p, kD));
  LEAPCACHE_RETURN_IF_ERROR(ValidatePoolLayout(layout, pool));
  if (p.num_heads != layout.num_heads) {
    return InvalidArgumentError("num_heads " + std::to_string(p.num_heads) +
                                " differs from the pool's " + std::to_string(layout.num_heads));
  }
  if (p.batch == 0) return OkStatus();
  StepArgs a{MakeRegionView(layout), p.batch, p.slot, p.q,   p.k,        p.v,
             p.g,                    p.beta,  p.o,    pool,  p.l2norm_qk, p.scale};
  const dim3 grid(p.batch * p.num_heads), block(kThreads);
  const bool kda = layout.spec.kind == StateKind::kKda;
  DispatchStep(kda, p.in_dtype, p.out_dtype, [&](auto kda_c, auto in_t, auto out_t) {
    WindowStepKernel<decltype(kda_c)::value, typename decltype(in_t)::type, typename decltype(out_t)::type>
        <<<grid, block, 0, stream>>>(a);
  });
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
