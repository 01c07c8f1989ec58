// Bit packing of b-bit symmetric integer codes (b in {8, 6, 4}).
//
// Codes are two's complement in b bits, in [-(2^(b-1)-1), 2^(b-1)-1]. A row of n codes is one
// little-endian bit stream: code i occupies stream bits [i*b, (i+1)*b), and stream bit t is bit
// (t % 8) of byte t / 8. So 8-bit codes are plain int8; two 4-bit codes share a byte (even index
// in the low nibble); four 6-bit codes fill three bytes (c0 | c1 << 6 | c2 << 12 | c3 << 18).
#pragma once

#include <cstddef>
#include <cstdint>

namespace leapcache::reference {

// REQUIRES: n * bits is a multiple of 8 (true for rows of dk % 16 == 0).
void PackCodes(const int8_t* codes, size_t n, int bits, uint8_t* out);
void UnpackCodes(const uint8_t* in, size_t n, int bits, int8_t* codes);

}  // namespace leapcache::reference
