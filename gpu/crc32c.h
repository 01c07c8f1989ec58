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
// carries a CRC across `b_bytes` bytes is built once (GF(2) matrix powers), then each Combine
// costs 32 steps. Lets a checksum of many stored blobs be formed from their recorded CRCs
// without reading their bytes.
class Crc32cCombiner {
 public:
  explicit Crc32cCombiner(size_t b_bytes);
  uint32_t Combine(uint32_t crc_a, uint32_t crc_b) const;

 private:
  uint32_t shift_[32];  // column n: the image of CRC bit n after b_bytes zero bytes
};

}  // namespace leapcache
