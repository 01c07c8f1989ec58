// Boundary refit, encode and decode of window-format pool regions (FORMAT.md sections 4-5;
// CPU reference: reference::Encode, reference::Dequantize, WindowState's reconstruct).
//
// One CTA of 256 threads per (request, head) holds the dense fp32 state in shared memory as
// S[a][j] with a row pitch of 129 floats, so both a row walk (thread per key row a) and a
// column walk (thread per value column j) are free of bank conflicts. Only compressed data
// crosses HBM: a refit reads the payload and p records and writes the new payload.
//   Reconstruct: S = diag(exp(G)) B + sum_j w_j diag(exp(G - G_j)) k_j u_j^T
//   Encode:      Y = S Omega, Qk = orth(Y), Z = S^T Qk, Qv = orth(Z), K = S Qv (one warp runs
//                each modified Gram-Schmidt, twice), balanced fp16 pairs, residual, row
//                smoothing, column scales, round-to-nearest-even codes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu/half.h"
#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/region.cuh"

namespace leapcache::kernels {
namespace {

constexpr int kD = kKernelDim;
constexpr int kThreads = 256;
constexpr int kPitch = kD + 1;
constexpr float kScaleFloor = 1.40129846432481707e-45f;  // 2^-149, as reference/codec.h
constexpr float kDependentRatio = 1.0f / 65536.0f;      // as reference/compensators.h

struct Shared {
  float S[kD * kPitch];
  float kf[kMaxRank][kD];  // fp16-exact key factors (and Y / K scratch as [h][a])
  float vf[kMaxRank][kD];  // fp16-exact value factors (and Z / Qv scratch as [h][j])
  float om[kMaxRank][kD];  // Omega [h][j]
  float row_scale[kD];
  float col_scale[kD];
  float misc[kD];
  float red[kThreads / 32];
  float rec_ka[kMaxWindow][kD];  // record keys with scale and decay folded in
  float rec_u[kMaxWindow][kD];   // record updates
};

__device__ __forceinline__ float CompensatorStartDevice(int j, int h) {
  uint32_t x = static_cast<uint32_t>(j) * 8u + static_cast<uint32_t>(h) + 0x9E3779B9u;
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return static_cast<float>(x >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

// Modified Gram-Schmidt, twice, on the r columns X[c][0..kD) (one warp; lane owns 4 entries).
__device__ void Orthonormalize(float (*X)[kD], int r, int lane) {
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

// S[a][j] from the region's payload and open window (n records, log-gate G). Every global
// read is issued up front as independent 16-byte loads (codes straight into registers, the
// rest staged in shared memory), so a CTA waits for memory about once, not once per element.
__device__ void Reconstruct(Shared& sh, const uint8_t* region, const RegionView& rv, bool kda) {
  const int t = threadIdx.x;
  // Codes: 1024 chunks of 16 bytes; chunk c is value row c / 8, keys [16 (c % 8), +16).
  uint4 codes[kD * kD / 16 / kThreads];
#pragma unroll
  for (int i = 0; i < kD * kD / 16 / kThreads; ++i) {
    codes[i] = __ldg(reinterpret_cast<const uint4*>(region + rv.codes) + t + i * kThreads);
  }
  const int n = *reinterpret_cast<const int32_t*>(region + rv.window);
  const float* G = reinterpret_cast<const float*>(region + rv.window + 16);
  const __half* comp = reinterpret_cast<const __half*>(region + rv.comp);
  if (t < kD) {
    sh.row_scale[t] = rv.smoothing ? reinterpret_cast<const float*>(region + rv.row_scale)[t] : 1.0f;
    sh.col_scale[t] = reinterpret_cast<const float*>(region + rv.col_scale)[t] / 127.0f;
    sh.misc[t] = expf(G[kda ? t : 0]);
  }
  for (int i = t; i < rv.r * kD; i += kThreads) {
    sh.kf[i / kD][i % kD] = __half2float(comp[(i / kD) * 2 * kD + i % kD]);
    sh.vf[i / kD][i % kD] = __half2float(comp[(i / kD) * 2 * kD + kD + i % kD]);
  }
  // Records: u as floats, and the key side folded with its scale and decay:
  // ka[rec][a] = w_rec * exp(G[a] - G_rec[a]) * k_rec[a].
  const __half* rk = reinterpret_cast<const __half*>(region + rv.rec_k);
  const __half* ru = reinterpret_cast<const __half*>(region + rv.rec_u);
  const float* rw = reinterpret_cast<const float*>(region + rv.rec_w);
  const float* rg = reinterpret_cast<const float*>(region + rv.rec_g);
  // Batches of 8 elements per thread: all loads of a batch are issued before its stores.
  for (int base = 0; base < n * kD; base += 8 * kThreads) {
    float u[8], k[8], w[8], g[8], gw[8];
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int i = base + t + m * kThreads;
      if (i < n * kD) {
        const int rec = i / kD, x = i % kD;
        u[m] = __half2float(ru[i]);
        k[m] = __half2float(rk[i]);
        w[m] = rw[rec];
        g[m] = rg[rec * rv.gate + (kda ? x : 0)];
        gw[m] = G[kda ? x : 0];
      }
    }
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int i = base + t + m * kThreads;
      if (i < n * kD) {
        const int rec = i / kD, x = i % kD;
        sh.rec_u[rec][x] = u[m];
        sh.rec_ka[rec][x] = w[m] * expf(gw[m] - g[m]) * k[m];
      }
    }
  }
  __syncthreads();
  // Boundary term, decayed: S[a][j] = exp(G[a]) (code * s_k[a] * s_v[j] / q + sum_h K~ U~).
#pragma unroll
  for (int i = 0; i < kD * kD / 16 / kThreads; ++i) {
    const int c = t + i * kThreads, j = c / 8, a0 = 16 * (c % 8);
    const uint32_t w4[4] = {codes[i].x, codes[i].y, codes[i].z, codes[i].w};
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const int a = a0 + e;
      const int code = static_cast<int8_t>((w4[e / 4] >> (8 * (e % 4))) & 0xffu);
      float x = static_cast<float>(code) * sh.row_scale[a] * sh.col_scale[j];
      for (int h = 0; h < rv.r; ++h) x = fmaf(sh.kf[h][a], sh.vf[h][j], x);
      sh.S[a * kPitch + j] = x * sh.misc[a];
    }
  }
  __syncthreads();
  if (n == 0) return;
  // Records: S += sum_rec ka[rec] u[rec]^T, an 8 x 8 register tile per thread.
  const int a0 = (t / 16) * 8, j0 = (t % 16) * 8;
  float acc[8][8];
#pragma unroll
  for (int x = 0; x < 8; ++x) {
#pragma unroll
    for (int y = 0; y < 8; ++y) acc[x][y] = sh.S[(a0 + x) * kPitch + j0 + y];
  }
  for (int rec = 0; rec < n; ++rec) {
    float ka[8], u[8];
#pragma unroll
    for (int x = 0; x < 8; ++x) ka[x] = sh.rec_ka[rec][a0 + x];
#pragma unroll
    for (int y = 0; y < 8; ++y) u[y] = sh.rec_u[rec][j0 + y];
#pragma unroll
    for (int x = 0; x < 8; ++x) {
#pragma unroll
      for (int y = 0; y < 8; ++y) acc[x][y] = fmaf(ka[x], u[y], acc[x][y]);
    }
  }
#pragma unroll
  for (int x = 0; x < 8; ++x) {
#pragma unroll
    for (int y = 0; y < 8; ++y) sh.S[(a0 + x) * kPitch + j0 + y] = acc[x][y];
  }
  __syncthreads();
}

// Encodes S (destroyed: becomes the scaled residual) into the region's payload; resets the
// window (n = 0, G = 0).
__device__ void EncodeInto(Shared& sh, uint8_t* region, const RegionView& rv, bool kda) {
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int r = rv.r;
  if (r > 0) {
    for (int i = t; i < r * kD; i += kThreads) sh.om[i / kD][i % kD] = CompensatorStartDevice(i % kD, i / kD);
    __syncthreads();
    // Y[h][a] = sum_j S[a][j] Omega[j][h]  (thread per row a)
    if (t < kD) {
      float acc[kMaxRank] = {};
      for (int j = 0; j < kD; ++j) {
        const float s = sh.S[t * kPitch + j];
#pragma unroll
        for (int h = 0; h < kMaxRank; ++h) if (h < r) acc[h] = fmaf(s, sh.om[h][j], acc[h]);
      }
#pragma unroll
      for (int h = 0; h < kMaxRank; ++h) if (h < r) sh.kf[h][t] = acc[h];
    }
    __syncthreads();
    if (warp == 0) Orthonormalize(sh.kf, r, lane);
    __syncthreads();
    // Z[h][j] = sum_a S[a][j] Qk[a][h]  (thread per column j)
    if (t < kD) {
      float acc[kMaxRank] = {};
      for (int a = 0; a < kD; ++a) {
        const float s = sh.S[a * kPitch + t];
#pragma unroll
        for (int h = 0; h < kMaxRank; ++h) if (h < r) acc[h] = fmaf(s, sh.kf[h][a], acc[h]);
      }
#pragma unroll
      for (int h = 0; h < kMaxRank; ++h) if (h < r) sh.vf[h][t] = acc[h];
    }
    __syncthreads();
    if (warp == 0) Orthonormalize(sh.vf, r, lane);
    __syncthreads();
    // K[h][a] = sum_j S[a][j] Qv[j][h]
    if (t < kD) {
      float acc[kMaxRank] = {};
      for (int j = 0; j < kD; ++j) {
        const float s = sh.S[t * kPitch + j];
#pragma unroll
        for (int h = 0; h < kMaxRank; ++h) if (h < r) acc[h] = fmaf(s, sh.vf[h][j], acc[h]);
      }
#pragma unroll
      for (int h = 0; h < kMaxRank; ++h) if (h < r) sh.kf[h][t] = acc[h];
    }
    __syncthreads();
    // Balance each pair by 2^floor(log2(||K_h||) / 2), round to fp16, zero it if not finite.
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
      }
    }
    __syncthreads();
    // Residual against the fp16 factors: E = S - sum_h K~_h U~_h^T.
    for (int i = t; i < kD * kD; i += kThreads) {
      const int a = i / kD, j = i % kD;
      float c = 0.0f;
      for (int h = 0; h < r; ++h) c = fmaf(sh.kf[h][a], sh.vf[h][j], c);
      sh.S[a * kPitch + j] -= c;
    }
    __syncthreads();
  }
  // Row smoothing scale (thread per row), then t = E / s_k in place.
  if (t < kD) {
    float s = 1.0f;
    if (rv.smoothing) {
      float sum = 0.0f;
      for (int j = 0; j < kD; ++j) sum += fabsf(sh.S[t * kPitch + j]);
      s = fmaxf(sqrtf(sum / static_cast<float>(kD)), kScaleFloor);
      reinterpret_cast<float*>(region + rv.row_scale)[t] = s;
    }
    for (int j = 0; j < kD; ++j) sh.S[t * kPitch + j] = sh.S[t * kPitch + j] / s;
  }
  __syncthreads();
  // Column scale (thread per column).
  if (t < kD) {
    float m = 0.0f;
    for (int a = 0; a < kD; ++a) m = fmaxf(m, fabsf(sh.S[a * kPitch + t]));
    m = fmaxf(m, kScaleFloor);
    reinterpret_cast<float*>(region + rv.col_scale)[t] = m;
    sh.col_scale[t] = m;
  }
  __syncthreads();
  // Codes: one warp per value row j, lane packs 4 consecutive keys into one 32-bit store.
  uint32_t* codes = reinterpret_cast<uint32_t*>(region + rv.codes);
  for (int j = warp; j < kD; j += kThreads / 32) {
    const float s_v = sh.col_scale[j];
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int a = 4 * lane + i;
      int c = __float2int_rn(127.0f * (sh.S[a * kPitch + j] / s_v));
      c = max(-127, min(127, c));
      word |= (static_cast<uint32_t>(c) & 0xffu) << (8 * i);
    }
    codes[j * (kD / 4) + lane] = word;
  }
  // Reset the window.
  if (t < rv.gate) reinterpret_cast<float*>(region + rv.window + 16)[t] = 0.0f;
  if (t == 0) *reinterpret_cast<int32_t*>(region + rv.window) = 0;
  (void)kda;
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

__global__ void __launch_bounds__(kThreads) RefitKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  int slot;
  uint8_t* region = RegionOf(a, &slot);
  if (region == nullptr) return;
  if (*reinterpret_cast<const int32_t*>(region + a.rv.window) < a.rv.p) return;  // not due
  Reconstruct(sh, region, a.rv, a.kda);
  EncodeInto(sh, region, a.rv, a.kda);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) EncodeKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  int slot;
  uint8_t* region = RegionOf(a, &slot);
  if (region == nullptr) return;
  const T* in = static_cast<const T*>(a.states) + static_cast<size_t>(blockIdx.x) * kD * kD;
  // All 64 loads of a thread are issued before the first shared-memory store.
  constexpr int kPer = kD * kD / kThreads;
  float x[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) x[i] = LoadAsFloat(in, threadIdx.x + i * kThreads);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = threadIdx.x + i * kThreads, hi = idx / kD, lo = idx % kD;
    if (a.kv_layout) {
      sh.S[hi * kPitch + lo] = x[i];  // input [a][j]
    } else {
      sh.S[lo * kPitch + hi] = x[i];  // input [j][a]
    }
  }
  __syncthreads();
  EncodeInto(sh, region, a.rv, a.kda);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) DecodeKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  int slot;
  uint8_t* region = RegionOf(a, &slot);
  T* out = static_cast<T*>(a.states) + static_cast<size_t>(blockIdx.x) * kD * kD;
  if (region == nullptr) {  // padding: zeros
    for (int i = threadIdx.x; i < kD * kD; i += kThreads) StoreFromFloat(out, i, 0.0f);
    return;
  }
  Reconstruct(sh, region, a.rv, a.kda);
  for (int i = threadIdx.x; i < kD * kD; i += kThreads) {
    const int hi = i / kD, lo = i % kD;
    StoreFromFloat(out, i, a.kv_layout ? sh.S[hi * kPitch + lo] : sh.S[lo * kPitch + hi]);
  }
}

}  // namespace

Status ValidatePoolLayout(const PoolLayout& l, const void* pool);

namespace {

Status PrepareRegionLaunch(const PoolLayout& layout, const void* pool, const int32_t* slot,
                           int batch) {
  LEAPCACHE_RETURN_IF_ERROR(ValidatePoolLayout(layout, pool));
  if (batch < 0) return InvalidArgumentError("batch must be >= 0");
  if (batch > 0 && slot == nullptr) return InvalidArgumentError("slot is null");
  static const Status attr = CudaStatus(
      [] {
        cudaError_t e = cudaFuncSetAttribute(RefitKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Shared));
        if (e == cudaSuccess) e = cudaFuncSetAttribute(EncodeKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Shared));
        if (e == cudaSuccess) e = cudaFuncSetAttribute(EncodeKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Shared));
        if (e == cudaSuccess) e = cudaFuncSetAttribute(DecodeKernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Shared));
        if (e == cudaSuccess) e = cudaFuncSetAttribute(DecodeKernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Shared));
        return e;
      }(),
      "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
  return attr;
}

Status ValidateDense(const DenseParams& p) {
  if (p.batch > 0 && p.states == nullptr) return InvalidArgumentError("states is null");
  if (p.dtype != DType::kFp32 && p.dtype != DType::kBf16) return InvalidArgumentError("dtype must be fp32 or bf16");
  if (p.layout != Orientation::kKV && p.layout != Orientation::kVK) {
    return InvalidArgumentError("layout must be kv or vk");
  }
  return OkStatus();
}

}  // namespace

Status WindowRefit(const PoolLayout& layout, const int32_t* slot, int batch, uint8_t* pool,
                   cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, slot, batch));
  if (batch == 0) return OkStatus();
  RegionArgs a{MakeRegionView(layout), batch, slot, pool, nullptr, 0,
               layout.spec.kind == StateKind::kKda};
  RefitKernel<<<batch * layout.num_heads, kThreads, sizeof(Shared), stream>>>(a);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

Status WindowEncode(const PoolLayout& layout, const DenseParams& p, uint8_t* pool,
                    cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, p.slot, p.batch));
  LEAPCACHE_RETURN_IF_ERROR(ValidateDense(p));
  if (p.batch == 0) return OkStatus();
  RegionArgs a{MakeRegionView(layout), p.batch, p.slot, pool, p.states,
               p.layout == Orientation::kKV ? 1 : 0, layout.spec.kind == StateKind::kKda};
  const int grid = p.batch * layout.num_heads;
  if (p.dtype == DType::kBf16) {
    EncodeKernel<__nv_bfloat16><<<grid, kThreads, sizeof(Shared), stream>>>(a);
  } else {
    EncodeKernel<float><<<grid, kThreads, sizeof(Shared), stream>>>(a);
  }
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

Status WindowDecode(const PoolLayout& layout, const DenseParams& p, const uint8_t* pool,
                    cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, p.slot, p.batch));
  LEAPCACHE_RETURN_IF_ERROR(ValidateDense(p));
  if (p.batch == 0) return OkStatus();
  RegionArgs a{MakeRegionView(layout), p.batch, p.slot, const_cast<uint8_t*>(pool), p.states,
               p.layout == Orientation::kKV ? 1 : 0, layout.spec.kind == StateKind::kKda};
  const int grid = p.batch * layout.num_heads;
  if (p.dtype == DType::kBf16) {
    DecodeKernel<__nv_bfloat16><<<grid, kThreads, sizeof(Shared), stream>>>(a);
  } else {
    DecodeKernel<float><<<grid, kThreads, sizeof(Shared), stream>>>(a);
  }
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
