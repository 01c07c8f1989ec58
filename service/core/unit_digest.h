// What the commit's checks (blob_check.h) need to know of each unit of a put, computed by a tier
// where the units lie: a GPU tier runs one kernel over the put instead of copying every unit
// out to the host (a 20 MB checkpoint: about 10 ms of copies and host CRCs at commit). Plain
// types, no Abseil, so that the CUDA kernel computing them (service/cuda) includes this too;
// DigestUnit is the CPU reference the kernel is tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace leapcache::core {

// A rule every element of a byte range of a unit must keep.
enum class ValueRule : uint8_t {
  kPositiveFp32,  // fp32, finite and > 0 (scales)
  kFiniteFp32,    // fp32 whose exponent is not all ones
  kFiniteBf16,
  kFiniteFp16,
};

struct ValueRange {
  uint64_t offset = 0;  // from the unit's first byte
  uint64_t bytes = 0;   // a multiple of the element's size
  ValueRule rule = ValueRule::kFiniteFp32;
};

inline constexpr int kMaxValueRanges = 8;

// The units' common shape: a v1 blob of blob_bytes (its 64-byte header, then the payload up to
// blob_bytes), then the side state up to unit_bytes; and the ranges whose values are checked, in
// the order the checks are reported.
struct UnitLayout {
  uint64_t unit_bytes = 0;
  uint64_t blob_bytes = 0;
  int num_ranges = 0;
  ValueRange ranges[kMaxValueRanges];
};

inline constexpr size_t kDigestHeaderBytes = 64;
// UnitDigest::first_bad when every value keeps its range's rule.
inline constexpr uint64_t kNoBadValue = ~uint64_t{0};
inline constexpr int kBadElementBits = 40;

struct UnitDigest {
  uint32_t unit_crc = 0;     // CRC-32C of the unit's unit_bytes
  uint32_t payload_crc = 0;  // CRC-32C of the blob's payload, bytes [64, blob_bytes)
  // (range << kBadElementBits) | element of the first element (lowest range, then lowest
  // element) that breaks its range's rule; kNoBadValue if none does.
  uint64_t first_bad = kNoBadValue;
  uint8_t header[kDigestHeaderBytes] = {};  // the unit's first 64 bytes
};

// The digest of one unit (unit.size() == layout.unit_bytes), as the kernel computes it.
// REQUIRES: 64 <= layout.blob_bytes <= layout.unit_bytes; every range inside the unit.
UnitDigest DigestUnit(std::span<const uint8_t> unit, const UnitLayout& layout);

}  // namespace leapcache::core
