#include "gpu/reference/packing.h"

#include <cassert>

namespace leapcache::reference {

void PackCodes(const int8_t* codes, size_t n, int bits, uint8_t* out) {
  assert(n * bits % 8 == 0);
  const uint32_t mask = (1u << bits) - 1u;
  uint64_t acc = 0;
  int filled = 0;
  for (size_t i = 0; i < n; ++i) {
    acc |= static_cast<uint64_t>(static_cast<uint32_t>(codes[i]) & mask) << filled;
    filled += bits;
    while (filled >= 8) {
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      filled -= 8;
    }
  }
}

void UnpackCodes(const uint8_t* in, size_t n, int bits, int8_t* codes) {
  assert(n * bits % 8 == 0);
  const uint32_t mask = (1u << bits) - 1u;
  const uint32_t sign = 1u << (bits - 1);
  uint64_t acc = 0;
  int filled = 0;
  for (size_t i = 0; i < n; ++i) {
    while (filled < bits) {
      acc |= static_cast<uint64_t>(*in++) << filled;
      filled += 8;
    }
    const uint32_t c = static_cast<uint32_t>(acc) & mask;
    acc >>= bits;
    filled -= bits;
    codes[i] = static_cast<int8_t>(static_cast<int32_t>(c ^ sign) - static_cast<int32_t>(sign));
  }
}

}  // namespace leapcache::reference
