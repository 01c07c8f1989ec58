// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every stored blob's
// header and payload. Chosen over a 64-bit hash because it is the storage-field standard
// (iSCSI, ext4, LevelDB/RocksDB), has hardware support on x86 (SSE4.2) and Arm (CRC32), and is
// simple enough to recompute in any client. Check value: Crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace leapcache {

// Extends `crc` (0 for a fresh checksum) over `n` bytes.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// The CRC-32C of A || B from the CRCs of A and B, where B has a fixed length: the operator that
// carries a CRC across `b_bytes` bytes is built once (GF(2) matrix powers, then one table per
// byte of the register), so each Combine costs four lookups. Lets a checksum of many stored
// blobs be formed from their recorded CRCs without reading their bytes: a thousand blobs'
// checksum in microseconds.
class Crc32cCombiner {
 public:
  explicit Crc32cCombiner(size_t b_bytes);
  uint32_t Combine(uint32_t crc_a, uint32_t crc_b) const {
    return by_byte_[0][crc_a & 0xFF] ^ by_byte_[1][(crc_a >> 8) & 0xFF] ^
           by_byte_[2][(crc_a >> 16) & 0xFF] ^ by_byte_[3][crc_a >> 24] ^ crc_b;
  }

 private:
  // by_byte_[j][v]: the image, after b_bytes zero bytes, of a register holding v in byte j.
  uint32_t by_byte_[4][256];
};

}  // namespace leapcache
