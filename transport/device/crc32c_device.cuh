// The device side of CRC-32C, shared by the kernels that compute it (crc32c_kernel.cu, and the
// store's unit digests in service/cuda): the byte table, the update over a range, and the
// carry of a CRC across zero bytes, which makes CRCs of pieces computed in parallel combine:
// CRC(A || B) = Carry(CRC(A), |B|) ^ CRC(B). Each kernel's translation unit keeps its own
// __constant__ copy of the carry matrices (filled from ShiftTables with cudaMemcpyToSymbol) and
// passes it in.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace leapcache::transport::crc32c_device {

// Powers of two up to 2^39 bytes: more than any device buffer.
inline constexpr int kPowers = 40;
inline constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected

// m (32 columns) times v over GF(2).
__device__ inline uint32_t Times(const uint32_t* m, uint32_t v) {
  uint32_t sum = 0;
#pragma unroll
  for (int n = 0; n < 32; ++n) sum ^= (0u - ((v >> n) & 1u)) & m[n];
  return sum;
}

// `crc` carried across `bytes` zero bytes; shift[k] carries across 2^k.
__device__ inline uint32_t Carry(const uint32_t (*shift)[32], uint32_t crc, uint64_t bytes) {
  for (int k = 0; k < kPowers; ++k) {
    if ((bytes >> k) & 1) crc = Times(shift[k], crc);
  }
  return crc;
}

// The byte table, filled by the block's threads together (the caller syncs after).
__device__ inline void FillTable(uint32_t* table) {
  for (int t = threadIdx.x; t < 256; t += blockDim.x) {
    uint32_t c = t;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPolynomial & (0u - (c & 1u)));
    table[t] = c;
  }
}

// CRC-32C of data[begin, end) (the plain checksum: initial and final inversion). Reads 16 bytes
// at a time where data + begin is 16-byte aligned, bytes otherwise.
__device__ inline uint32_t RangeCrc(const uint32_t* table, const uint8_t* data, size_t begin,
                                    size_t end) {
  uint32_t c = ~0u;
  size_t at = begin;
  if (((reinterpret_cast<uintptr_t>(data) + begin) & 15) == 0) {
    for (; at + 16 <= end; at += 16) {
      const uint4 v = *reinterpret_cast<const uint4*>(data + at);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t w = words[j];
#pragma unroll
        for (int k = 0; k < 4; ++k, w >>= 8) c = table[(c ^ w) & 0xFF] ^ (c >> 8);
      }
    }
  }
  for (; at < end; ++at) c = table[(c ^ data[at]) & 0xFF] ^ (c >> 8);
  return ~c;
}

// The carry matrices, built on the host: m[k] carries a CRC register across 2^k zero bytes.
struct ShiftTables {
  uint32_t m[kPowers][32];

  ShiftTables() {
    // One zero bit through the reflected register: bit 0 feeds the polynomial back, the others
    // move down one place; eight of them make one zero byte, then each power squares the last.
    uint32_t bit[32];
    bit[0] = kPolynomial;
    for (int n = 1; n < 32; ++n) bit[n] = 1u << (n - 1);
    for (int i = 0; i < 3; ++i) Compose(bit, bit, bit);
    for (int n = 0; n < 32; ++n) m[0][n] = bit[n];
    for (int k = 1; k < kPowers; ++k) Compose(m[k - 1], m[k - 1], m[k]);
  }

 private:
  // out = a after b (columns).
  static void Compose(const uint32_t* a, const uint32_t* b, uint32_t* out) {
    uint32_t r[32];
    for (int n = 0; n < 32; ++n) {
      uint32_t sum = 0;
      for (int j = 0; j < 32; ++j) {
        if ((b[n] >> j) & 1) sum ^= a[j];
      }
      r[n] = sum;
    }
    for (int n = 0; n < 32; ++n) out[n] = r[n];
  }
};

}  // namespace leapcache::transport::crc32c_device
