// IEEE binary16 (fp16) and bfloat16 conversions, bit-exact with the CUDA intrinsics
// __float2half_rn / __float2bfloat16_rn (round to nearest, ties to even; overflow to infinity;
// NaN stays NaN). Host and device use the same functions so the CPU reference and the kernels
// agree to the bit on every stored 16-bit value.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define LEAPCACHE_HD __host__ __device__ __forceinline__
#else
#define LEAPCACHE_HD inline
#endif

namespace leapcache {

LEAPCACHE_HD uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

LEAPCACHE_HD float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

LEAPCACHE_HD uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even on the 16 dropped bits
  return static_cast<uint16_t>(u >> 16);
}

LEAPCACHE_HD float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

LEAPCACHE_HD uint16_t FloatToHalf(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));  // the same IEEE rounding, one instruction
#else
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (a < 0x38800000u) {                        // below 2^-14: subnormal half (or zero)
    // Value = a_float; half subnormal unit is 2^-24. Round a_float / 2^-24 to nearest even.
    if (a < 0x33000000u) return sign;  // < 2^-25: rounds to zero (ties at 2^-25 go to even 0)
    const uint32_t exp = a >> 23;      // biased fp32 exponent, 102..112
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24: mant * 2^(exp-150) / 2^-24 = mant >> shift
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((a - 0x38000000u) >> 13);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: ok
  return sign | static_cast<uint16_t>(h);
#endif
}

LEAPCACHE_HD float HalfToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Subnormal or zero: mant * 2^-24, exact in fp32.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (exp == 31) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
}

// Round-trips through the 16-bit type: the value a stored 16-bit field holds.
LEAPCACHE_HD float RoundToHalf(float f) { return HalfToFloat(FloatToHalf(f)); }
LEAPCACHE_HD float RoundToBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

}  // namespace leapcache
