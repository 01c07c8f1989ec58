// Packed codes (FORMAT.md section 3) to and from the int8 codes every window kernel computes
// with. A b-bit row of kD codes is one little-endian bit stream: code i at stream bits
// [i b, (i + 1) b), stream bit t = bit t % 8 of byte t / 8. 4-bit codes are two to a byte (low
// nibble first), 6-bit codes four to a 24-bit little-endian group.
#pragma once

#include <cstdint>

#include "gpu/kernels/kernels.h"

namespace leapcache::kernels {

// Each byte of v holds a b-bit field (b = 4 or 6, m = 2^(b-1)); returns the fields as int8
// bytes: ((v ^ m) + (128 - m)) ^ 128 per byte, where no carry crosses a byte since
// (v ^ m) + 128 - m < 256.
__device__ __forceinline__ uint32_t SignExtendBytes(uint32_t v, uint32_t m) {
  return ((v ^ (m * 0x01010101u)) + (128u - m) * 0x01010101u) ^ 0x80808080u;
}

// 16 4-bit codes (two words) as 16 int8 codes (four words, code i in byte i % 4 of word i / 4).
__device__ __forceinline__ uint4 WidenNibbles(uint32_t w0, uint32_t w1) {
  auto two = [](uint32_t w, uint32_t& lo, uint32_t& hi) {
    const uint32_t even = w & 0x0f0f0f0fu, odd = (w >> 4) & 0x0f0f0f0fu;
    lo = SignExtendBytes(__byte_perm(even, odd, 0x5140), 8);  // codes 0-3
    hi = SignExtendBytes(__byte_perm(even, odd, 0x7362), 8);  // codes 4-7
  };
  uint4 out;
  two(w0, out.x, out.y);
  two(w1, out.z, out.w);
  return out;
}

// 16 4-bit codes (two words) at the top of 16 bytes: 16 times the codes, exact int8 values for
// an integer product whose sum is scaled by 1/16 after (no sign extension needed: a field's
// sign bit lands on its byte's).
__device__ __forceinline__ uint4 WidenNibblesHigh(uint32_t w0, uint32_t w1) {
  auto two = [](uint32_t w, uint32_t& lo, uint32_t& hi) {
    const uint32_t even = (w << 4) & 0xf0f0f0f0u, odd = w & 0xf0f0f0f0u;
    lo = __byte_perm(even, odd, 0x5140);  // codes 0-3
    hi = __byte_perm(even, odd, 0x7362);  // codes 4-7
  };
  uint4 out;
  two(w0, out.x, out.y);
  two(w1, out.z, out.w);
  return out;
}

// Four 6-bit fields at bits [kAt + 6 i, +6) of w (the bits outside them arbitrary) moved to
// bits [kAt + 8 i, +6), into byte i: at its bottom (kAt = 0) or its top (kAt = 2). Two
// multiply-adds move them: x + (x & m) (2^s - 1) lifts the fields under m by s where the bits
// above them are clear; fields 2 and 3 go up by 4, then fields 1 and 3 by 2. Five operations per
// four codes where a shift and a mask per field took seven.
template <int kAt>
__device__ __forceinline__ uint32_t SpreadSixes(uint32_t w) {
  const uint32_t low = w & (0x00000fffu << kAt);
  const uint32_t y = (w & (0x00fff000u << kAt)) * 16u + low;
  return (y & (0x0fc00fc0u << kAt)) * 3u + y;
}

// 16 6-bit codes (three words) as 16 int8 codes.
__device__ __forceinline__ uint4 WidenSixes(uint32_t o0, uint32_t o1, uint32_t o2) {
  auto four = [](uint32_t v) { return SignExtendBytes(SpreadSixes<0>(v), 32); };
  return make_uint4(four(o0), four(__funnelshift_r(o0, o1, 24)), four(__funnelshift_r(o1, o2, 16)),
                    four(o2 >> 8));
}

// 16 6-bit codes at the top of 16 bytes: 4 times the codes, as WidenNibblesHigh. Each group of
// four codes is taken two bits below its stream offset, so it arrives at kAt = 2.
__device__ __forceinline__ uint4 WidenSixesHigh(uint32_t o0, uint32_t o1, uint32_t o2) {
  return make_uint4(SpreadSixes<2>(o0 << 2), SpreadSixes<2>(__funnelshift_r(o0, o1, 22)),
                    SpreadSixes<2>(__funnelshift_r(o1, o2, 14)), SpreadSixes<2>(o2 >> 6));
}

// One packed row to int8 and back, one thread per row: `row` is kD int8 codes (16-byte
// aligned); the packed row is kD * bits / 8 bytes (96 or 64, 16-byte aligned).
__device__ __forceinline__ void PackCodeRow(const int8_t* row, int bits, uint8_t* out) {
  constexpr int kD = kKernelDim;
  const uint4* in = reinterpret_cast<const uint4*>(row);
  uint4* dst = reinterpret_cast<uint4*>(out);
  if (bits == 4) {
#pragma unroll
    for (int i = 0; i < kD / 32; ++i) {  // 32 codes -> 16 bytes
      const uint4 a = in[2 * i], b = in[2 * i + 1];
      // Bytes b0..b3 of a word -> nibbles: x | x >> 4 puts n0 | n1 << 4 in byte 0 and
      // n2 | n3 << 4 in byte 2.
      auto two = [](uint32_t w0, uint32_t w1) {
        const uint32_t x0 = w0 & 0x0f0f0f0fu, x1 = w1 & 0x0f0f0f0fu;
        return __byte_perm(x0 | (x0 >> 4), x1 | (x1 >> 4), 0x6420);
      };
      dst[i] = make_uint4(two(a.x, a.y), two(a.z, a.w), two(b.x, b.y), two(b.z, b.w));
    }
  } else {  // 6
#pragma unroll
    for (int i = 0; i < kD / 16; ++i) {  // 16 codes -> 12 bytes, three words
      const uint4 a = in[i];
      auto v24 = [](uint32_t w) {
        return (w & 0x3fu) | ((w >> 8) & 0x3fu) << 6 | ((w >> 16) & 0x3fu) << 12 |
               ((w >> 24) & 0x3fu) << 18;
      };
      const uint32_t v0 = v24(a.x), v1 = v24(a.y), v2 = v24(a.z), v3 = v24(a.w);
      uint32_t* o = reinterpret_cast<uint32_t*>(out) + 3 * i;
      o[0] = v0 | v1 << 24;
      o[1] = v1 >> 8 | v2 << 16;
      o[2] = v2 >> 16 | v3 << 8;
    }
  }
}

// The inverse, in place: the packed row occupies the first kD * bits / 8 bytes of `row`, which
// this thread alone reads and then overwrites with kD int8 codes.
__device__ __forceinline__ void UnpackCodeRow(int8_t* row, int bits) {
  constexpr int kD = kKernelDim;
  const uint32_t* in = reinterpret_cast<const uint32_t*>(row);
  uint4 out[kD / 16];
  if (bits == 4) {
#pragma unroll
    for (int i = 0; i < kD / 16; ++i) out[i] = WidenNibbles(in[2 * i], in[2 * i + 1]);
  } else {  // 6
#pragma unroll
    for (int i = 0; i < kD / 16; ++i) out[i] = WidenSixes(in[3 * i], in[3 * i + 1], in[3 * i + 2]);
  }
#pragma unroll
  for (int i = 0; i < kD / 16; ++i) reinterpret_cast<uint4*>(row)[i] = out[i];
}

}  // namespace leapcache::kernels
