#include "gpu/format/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace leapcache {
namespace {

// Slicing-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

uint32_t TableExtend(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);  // little-endian hosts only (checked in format.cc)
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^
        kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xffu];
  return ~c;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes exactly this polynomial, 8 bytes per instruction: about
// 4x the tables' speed. Every checkpoint byte is checksummed several times on its way (engine,
// transfer, store), so this is on every transfer's critical path.
__attribute__((target("sse4.2"))) uint32_t HardwareExtend(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

using ExtendFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);
const ExtendFn kExtend = [] {
  __builtin_cpu_init();  // this runs as a static initializer, maybe before libgcc's own
  return __builtin_cpu_supports("sse4.2") ? HardwareExtend : TableExtend;
}();
#endif

}  // namespace

namespace {

// A 32 x 32 matrix over GF(2) as its columns; times() applies it to a vector.
uint32_t Times(const uint32_t* matrix, uint32_t v) {
  uint32_t sum = 0;
  for (int n = 0; v != 0; ++n, v >>= 1) {
    if (v & 1) sum ^= matrix[n];
  }
  return sum;
}

// out = a after b.
void Compose(const uint32_t* a, const uint32_t* b, uint32_t* out) {
  uint32_t r[32];
  for (int n = 0; n < 32; ++n) r[n] = Times(a, b[n]);
  std::memcpy(out, r, sizeof(r));
}

}  // namespace

Crc32cCombiner::Crc32cCombiner(size_t b_bytes) {
  // One zero bit through the reflected register: bit 0 feeds the polynomial back, the others
  // move down one place. Eight of them make one zero byte.
  uint32_t power[32];
  power[0] = 0x82F63B78u;
  for (int n = 1; n < 32; ++n) power[n] = 1u << (n - 1);
  for (int i = 0; i < 3; ++i) Compose(power, power, power);
  uint32_t shift[32];  // column n: the image of CRC bit n after b_bytes zero bytes
  for (int n = 0; n < 32; ++n) shift[n] = 1u << n;  // identity
  for (size_t k = b_bytes; k != 0; k >>= 1) {
    if (k & 1) Compose(power, shift, shift);
    if (k > 1) Compose(power, power, power);
  }
  // Combine: the pre- and post-inversions of A and B cancel with those of A || B but for B's
  // part, which crc_b carries: the register after A, moved across |B| zero bytes, plus crc_b.
  // The move is linear, so it is the XOR of each register byte's image, tabulated here.
  for (int j = 0; j < 4; ++j) {
    by_byte_[j][0] = 0;
    for (int v = 1; v < 256; ++v) {
      by_byte_[j][v] = by_byte_[j][v & (v - 1)] ^ shift[8 * j + __builtin_ctz(v)];
    }
  }
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  return kExtend(crc, p, n);
#else
  return TableExtend(crc, p, n);
#endif
}

}  // namespace leapcache
