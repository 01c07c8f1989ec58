// Small device helpers shared by the kernels: dtype loads, warp and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace leapcache::kernels {

__device__ __forceinline__ float LoadAsFloat(const float* p, int i) { return p[i]; }
__device__ __forceinline__ float LoadAsFloat(const __nv_bfloat16* p, int i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void StoreFromFloat(float* p, int i, float x) { p[i] = x; }
__device__ __forceinline__ void StoreFromFloat(__nv_bfloat16* p, int i, float x) {
  p[i] = __float2bfloat16_rn(x);
}
// x0, x1 = p[i], p[i + 1] as one load (i even, p aligned to the pair).
__device__ __forceinline__ void LoadPairAsFloat(const float* p, int i, float& x0, float& x1) {
  const float2 v = *reinterpret_cast<const float2*>(p + i);
  x0 = v.x, x1 = v.y;
}
__device__ __forceinline__ void LoadPairAsFloat(const __nv_bfloat16* p, int i, float& x0,
                                                float& x1) {
  const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p + i));
  x0 = v.x, x1 = v.y;
}
// p[i], p[i + 1] = x0, x1 as one store (i even, p aligned to the pair).
__device__ __forceinline__ void StorePairFromFloat(float* p, int i, float x0, float x1) {
  *reinterpret_cast<float2*>(p + i) = make_float2(x0, x1);
}
__device__ __forceinline__ void StorePairFromFloat(__nv_bfloat16* p, int i, float x0, float x1) {
  *reinterpret_cast<__nv_bfloat162*>(p + i) = __floats2bfloat162_rn(x0, x1);
}

// x, with its value hidden from the optimizer: what is computed from the result is computed
// where it is used, never hoisted out of a loop as an invariant.
__device__ __forceinline__ int Opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}

struct AddOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduction over lanes that differ only in the low log2(width) bits.
template <int kWidth, typename Op>
__device__ __forceinline__ float GroupReduce(float x, Op op) {
#pragma unroll
  for (int m = kWidth / 2; m > 0; m >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
template <int kWidth>
__device__ __forceinline__ float GroupSum(float x) {
  return GroupReduce<kWidth>(x, AddOp{});
}
template <int kWidth>
__device__ __forceinline__ float GroupMax(float x) {
  return GroupReduce<kWidth>(x, MaxOp{});
}

// The barrier of code that a whole CTA runs (CtaBarrier), or that only its first kCount threads
// run while the others wait elsewhere (NamedBarrier: hardware barrier kId, kCount threads, a
// multiple of 32; barrier 0 is __syncthreads').
struct CtaBarrier {
  __device__ static __forceinline__ void Sync() { __syncthreads(); }
};
template <int kId, int kCount>
struct NamedBarrier {
  static_assert(kId > 0 && kId < 16 && kCount % 32 == 0);
  __device__ static __forceinline__ void Sync() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
  }
};

// Block-wide reductions of N values at once for blocks of kThreads (multiple of 32): one pair
// of barriers for all of them (the first keeps `scratch` from being overwritten while an earlier
// reduction still reads it); `scratch` holds N * kThreads / 32 floats. Every thread gets the
// results in x. The warps' partials are folded into 0 in warp order, so maxima are of
// non-negative values (magnitudes), as every caller's are. Barrier: the kThreads threads'.
template <int kThreads, int N, typename Op, typename Barrier = CtaBarrier>
__device__ __forceinline__ void BlockReduceN(float (&x)[N], float* scratch, Op op) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < N; ++i) x[i] = GroupReduce<32>(x[i], op);
  Barrier::Sync();
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch[i * (kThreads / 32) + warp] = x[i];
  }
  Barrier::Sync();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) t = op(t, scratch[i * (kThreads / 32) + w]);
    x[i] = t;
  }
}
template <int kThreads, int N, typename Barrier = CtaBarrier>
__device__ __forceinline__ void BlockSumN(float (&x)[N], float* scratch) {
  BlockReduceN<kThreads, N, AddOp, Barrier>(x, scratch, AddOp{});
}
template <int kThreads, int N, typename Barrier = CtaBarrier>
__device__ __forceinline__ void BlockMaxN(float (&x)[N], float* scratch) {
  BlockReduceN<kThreads, N, MaxOp, Barrier>(x, scratch, MaxOp{});
}
template <int kThreads, typename Barrier = CtaBarrier>
__device__ __forceinline__ float BlockSum(float x, float* scratch) {
  float v[1] = {x};
  BlockSumN<kThreads, 1, Barrier>(v, scratch);
  return v[0];
}
template <int kThreads, typename Barrier = CtaBarrier>
__device__ __forceinline__ float BlockMax(float x, float* scratch) {
  float v[1] = {x};
  BlockMaxN<kThreads, 1, Barrier>(v, scratch);
  return v[0];
}

// Asynchronous 16-byte global -> shared copies (cp.async, sm_80+): the loads of a whole
// staging pass are in flight together and need no registers.
__device__ __forceinline__ void CopyAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}

__device__ __forceinline__ void CopyAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::); }
// Closes the group of copies issued so far; CopyAsyncWaitGroup<N> waits until at most N of the
// most recent groups are still in flight (so staging can be consumed in order of issue).
__device__ __forceinline__ void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CopyAsyncWaitGroup() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The block copies `bytes` rounded up to 16 (both pointers 16-byte aligned; the rounded range
// must be readable). Complete with CopyAsyncWaitAll() and a barrier.
__device__ __forceinline__ void BlockCopyAsync(void* smem, const void* gmem, int bytes) {
  for (int i = 16 * static_cast<int>(threadIdx.x); i < bytes; i += 16 * static_cast<int>(blockDim.x)) {
    CopyAsync16(static_cast<char*>(smem) + i, static_cast<const char*>(gmem) + i);
  }
}

// One-shot bulk copies (the sm_90 copy engine, cp.async.bulk) that complete on an mbarrier: one
// thread initialises the barrier, announces the byte count and issues the copies, so a CTA's
// staging costs a few instructions instead of a loop in every thread; after a block barrier
// (which publishes the initialised mbarrier) every thread waits on phase 0, and then sees the
// data. For one staging phase per CTA.
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void BulkStageBegin(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(SharedAddress(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SharedAddress(bar)), "r"(bytes)
               : "memory");
}
// `bytes` a positive multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void BulkCopy(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          SharedAddress(smem)),
      "l"(gmem), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}
__device__ __forceinline__ void BulkStageWait(uint64_t* bar) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(SharedAddress(bar))
        : "memory");
  } while (done == 0);
}

}  // namespace leapcache::kernels
