// A pool region's offsets (gpu/format/pool_layout.h) as a plain struct passed by value to kernels.
#pragma once

#include <cstdint>

#include "gpu/format/pool_layout.h"

namespace leapcache::kernels {

// Region sections and shared-memory staging areas start on 16-byte boundaries (vector loads,
// cp.async and bulk copies).
__host__ __device__ constexpr int RoundUp16(int bytes) { return (bytes + 15) / 16 * 16; }

struct RegionView {
  int num_slots, num_heads, p, r, gate, smoothing;
  int bits;        // of the codes: 8 (int8), or 6 and 4 packed (FORMAT.md section 3)
  float code_max;  // the largest code, 2^(bits - 1) - 1
  uint32_t region_bytes, codes, row_scale, col_scale, comp, window, rec_k, rec_u, rec_w, rec_g;
};

// The first 8 bytes of a region's window header (pool_layout.h): the record count n and the
// refit mark, 1 from a boundary refit until the next step. Stored and loaded as one 64-bit word:
// the CTAs of one refit launch read the head of requests that other CTAs refit, and must see
// both words of one write.
struct WindowHead {
  int32_t n, refitted;
};
__device__ __forceinline__ WindowHead LoadWindowHead(const uint8_t* head) {
  const unsigned long long w = *reinterpret_cast<const volatile unsigned long long*>(head);
  return {static_cast<int32_t>(w & 0xffffffffu), static_cast<int32_t>(w >> 32)};
}
__device__ __forceinline__ void StoreWindowHead(uint8_t* head, int32_t n, int32_t refitted) {
  *reinterpret_cast<volatile unsigned long long*>(head) =
      static_cast<uint32_t>(n) | static_cast<unsigned long long>(static_cast<uint32_t>(refitted))
                                     << 32;
}

inline RegionView MakeRegionView(const PoolLayout& l) {
  RegionView v;
  v.num_slots = l.num_slots();
  v.num_heads = l.num_heads();
  v.p = l.spec().p;
  v.r = l.spec().r;
  v.gate = l.gate();
  v.smoothing = l.spec().smoothing ? 1 : 0;
  v.bits = l.spec().bits;
  v.code_max = static_cast<float>(MaxCode(l.spec().bits));
  v.region_bytes = static_cast<uint32_t>(l.region_bytes());
  v.codes = static_cast<uint32_t>(l.payload().codes_offset);
  v.row_scale = static_cast<uint32_t>(l.payload().row_scale_offset);
  v.col_scale = static_cast<uint32_t>(l.payload().col_scale_offset);
  v.comp = static_cast<uint32_t>(l.payload().comp_offset);
  v.window = static_cast<uint32_t>(l.window_offset());
  v.rec_k = static_cast<uint32_t>(l.rec_k_offset());
  v.rec_u = static_cast<uint32_t>(l.rec_u_offset());
  v.rec_w = static_cast<uint32_t>(l.rec_w_offset());
  v.rec_g = static_cast<uint32_t>(l.rec_g_offset());
  return v;
}

}  // namespace leapcache::kernels
