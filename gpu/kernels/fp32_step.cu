// The FP32 baseline decode step, in place on a pool of fp32 states [slot][head][dv][dk].
//
// Work split: one CTA of 128 threads per (request, head, row split). Eight lanes own one value
// row (dk = 128 floats = 512 B): lane part p of the group loads the 16-byte chunks p, p+8,
// p+16, p+24, so each warp instruction reads four rows as four contiguous 128-byte segments.
// A row's two dot products (with the decayed k and q) reduce over its 8 lanes with 3 shuffles,
// then the lanes write the updated row. Every state byte is read once and written once.
#include <cuda_bf16.h>

#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/dispatch.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"

namespace leapcache::kernels {
namespace {

constexpr int kD = kKernelDim;
constexpr int kThreads = 128;
constexpr int kRowsPerPass = kThreads / 8;  // 16 rows per CTA pass
constexpr int kChunks = kD / 4 / 8;         // 16-byte chunks per lane per row (4)

struct Fp32Args {
  int batch, num_heads, num_slots, splits;
  const int32_t* slot;
  const void *q, *k, *v;
  const float *g, *beta;
  void* o;
  float* pool;
  bool l2norm;
  float scale;
};

template <bool kKda, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads) Fp32StepKernel(Fp32Args a) {
  __shared__ float s_q[kD], s_k[kD], s_e[kD], s_red[kThreads / 32];
  const int split = blockIdx.x % a.splits;
  const int bh = blockIdx.x / a.splits;
  const int b = bh / a.num_heads, h = bh % a.num_heads;
  const int rows = kD / a.splits;
  const int row0 = split * rows;
  const int slot = a.slot[b];
  TOut* o = static_cast<TOut*>(a.o) + static_cast<size_t>(bh) * kD;
  if (slot < 0 || slot >= a.num_slots) {  // padding: zero output, no state access
    for (int j = row0 + threadIdx.x; j < row0 + rows; j += kThreads) StoreFromFloat(o, j, 0.0f);
    return;
  }
  const int t = threadIdx.x;
  const size_t in_off = static_cast<size_t>(bh) * kD;
  float qv = LoadAsFloat(static_cast<const TIn*>(a.q) + in_off, t);
  float kv = LoadAsFloat(static_cast<const TIn*>(a.k) + in_off, t);
  if (a.l2norm) {
    const float qs = BlockSum<kThreads>(qv * qv, s_red);
    const float ks = BlockSum<kThreads>(kv * kv, s_red);
    qv *= 1.0f / sqrtf(qs + 1e-6f);
    kv *= 1.0f / sqrtf(ks + 1e-6f);
  }
  qv *= a.scale;
  const float e = expf(kKda ? a.g[in_off + t] : a.g[bh]);
  s_q[t] = qv;
  s_k[t] = kv;
  s_e[t] = e;
  const float kq = BlockSum<kThreads>(qv * kv, s_red);  // barrier: s_q/s_k/s_e visible
  const float beta = a.beta[bh];

  const int group = t / 8, part = t % 8;
  // This lane's 16 key indices: chunk c covers [4 (part + 8 c), +4).
  float ek[kChunks * 4], eq[kChunks * 4], kk[kChunks * 4], ee[kChunks * 4];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = 4 * (part + 8 * c) + i;
      ee[4 * c + i] = s_e[idx];
      kk[4 * c + i] = s_k[idx];
      ek[4 * c + i] = s_e[idx] * s_k[idx];
      eq[4 * c + i] = s_e[idx] * s_q[idx];
    }
  }
  const TIn* v = static_cast<const TIn*>(a.v) + in_off;
  float* state = a.pool + (static_cast<size_t>(slot) * a.num_heads + h) * kD * kD;
  for (int j0 = row0; j0 < row0 + rows; j0 += 2 * kRowsPerPass) {
    float4 s[2][kChunks];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = j0 + r * kRowsPerPass + group;
      const float4* row = reinterpret_cast<const float4*>(state + static_cast<size_t>(j) * kD);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        s[r][c] = j < row0 + rows ? __ldcs(row + part + 8 * c) : make_float4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = j0 + r * kRowsPerPass + group;
      float dk_ = 0.0f, dq_ = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const float x[4] = {s[r][c].x, s[r][c].y, s[r][c].z, s[r][c].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          dk_ = fmaf(x[i], ek[4 * c + i], dk_);
          dq_ = fmaf(x[i], eq[4 * c + i], dq_);
        }
      }
      dk_ = GroupSum<8>(dk_);
      dq_ = GroupSum<8>(dq_);
      if (j >= row0 + rows) continue;
      const float u = beta * (LoadAsFloat(v, j) - dk_);
      if (part == 0) StoreFromFloat(o, j, fmaf(u, kq, dq_));
      float4* row = reinterpret_cast<float4*>(state + static_cast<size_t>(j) * kD);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        float4 y;
        y.x = fmaf(kk[4 * c + 0], u, ee[4 * c + 0] * s[r][c].x);
        y.y = fmaf(kk[4 * c + 1], u, ee[4 * c + 1] * s[r][c].y);
        y.z = fmaf(kk[4 * c + 2], u, ee[4 * c + 2] * s[r][c].z);
        y.w = fmaf(kk[4 * c + 3], u, ee[4 * c + 3] * s[r][c].w);
        __stcs(row + part + 8 * c, y);
      }
    }
  }
}


}  // namespace


Status Fp32DecodeStep(StateKind kind, const StepParams& p, float* pool, int num_slots,
                      cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateStepParams(p, kD));
  if (pool == nullptr) return InvalidArgumentError("state_pool is null");
  if (reinterpret_cast<uintptr_t>(pool) % 16 != 0) {
    return InvalidArgumentError("state_pool must be 16-byte aligned");
  }
  if (num_slots < 1) return InvalidArgumentError("num_slots must be >= 1");
  if (kind != StateKind::kGdn && kind != StateKind::kKda) return InvalidArgumentError("unknown kind");
  if (p.batch == 0) return OkStatus();
  // Small batches cannot fill the GPU with one CTA per head: split the value rows.
  const int heads = p.batch * p.num_heads;
  int splits = 1;
  while (splits < 8 && heads * splits < 4 * SmCount()) splits *= 2;
  Fp32Args a{p.batch, p.num_heads, num_slots, splits, p.slot, p.q, p.k, p.v, p.g, p.beta,
             p.o,     pool,        p.l2norm_qk, p.scale};
  const dim3 grid(heads * splits), block(kThreads);
  const bool kda = kind == StateKind::kKda;
  DispatchStep(kda, p.in_dtype, p.out_dtype, [&](auto kda_c, auto in_t, auto out_t) {
    Fp32StepKernel<decltype(kda_c)::value, typename decltype(in_t)::type, typename decltype(out_t)::type>
        <<<grid, block, 0, stream>>>(a);
  });
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
