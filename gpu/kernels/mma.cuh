// Tensor-core helpers shared by the step and the refit: mma.sync tiles (fp16 and int8) and the
// power-of-two scaling that lets an fp32 operand be split exactly enough into fp16 hi + lo parts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace leapcache::kernels {

// D += A B for one m16n8k16 tile: A row-major fp16 (4 regs), B column-major fp16 (2 regs),
// D fp32 (4 regs), in the PTX fragment layout.
__device__ __forceinline__ void MmaF16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A B for one m16n8k32 tile of signed 8-bit integers: A row-major (4 regs of 4 int8), B
// column-major (2 regs of 4 int8), D int32 (4 regs), in the PTX fragment layout. Exact.
__device__ __forceinline__ void MmaS8(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 matrices of b16 elements from shared memory, transposed: lanes 8 i .. 8 i + 7 give
// the shared-space addresses of matrix i's rows (16 bytes each, 16-byte aligned), and r[i]
// receives, in the fragment layout, elements (2 (lane % 4), lane / 4) and
// (2 (lane % 4) + 1, lane / 4) of it.
__device__ __forceinline__ void LoadMatrixX4Trans(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same for two matrices (lanes 0-15 give the addresses).
__device__ __forceinline__ void LoadMatrixX2Trans(uint32_t r[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// 8 x 8 transpose of b16 elements across the warp, in the fragment layout (row lane / 4,
// columns 2 (lane % 4) and 2 (lane % 4) + 1 in each thread's word).
__device__ __forceinline__ uint32_t Transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The power of two that brings max_abs into [2^14, 2^15) (fp16 hi + lo split without overflow,
// and without losing small vectors to fp16 underflow); clamped to a normal float.
__device__ __forceinline__ int SplitExponent(float max_abs) {
  if (!(max_abs > 0.0f)) return 0;
  int e = 0;
  frexpf(max_abs, &e);  // max_abs in [2^(e-1), 2^e)
  return max(-120, min(120, 15 - e));
}

// 2^e for e in [-126, 127], exactly, without the ldexpf library sequence.
__device__ __forceinline__ float PowerOfTwo(int e) { return __int_as_float((e + 127) << 23); }

}  // namespace leapcache::kernels
