#include "service/core/unit_digest.h"

#include <cmath>
#include <cstring>

#include "gpu/format/crc32c.h"

namespace leapcache::core {
namespace {

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint32_t Load16(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8; }

bool Breaks(ValueRule rule, const uint8_t* p) {
  switch (rule) {
    case ValueRule::kPositiveFp32: {
      float x;
      std::memcpy(&x, p, 4);
      return !(x > 0.0f) || std::isinf(x);
    }
    case ValueRule::kFiniteFp32:
      return (Load32(p) & 0x7F800000u) == 0x7F800000u;
    case ValueRule::kFiniteBf16:
      return (Load16(p) & 0x7F80u) == 0x7F80u;
    case ValueRule::kFiniteFp16:
      return (Load16(p) & 0x7C00u) == 0x7C00u;
  }
  return false;
}

}  // namespace

UnitDigest DigestUnit(std::span<const uint8_t> unit, const UnitLayout& layout) {
  UnitDigest d;
  d.unit_crc = Crc32c(unit.data(), layout.unit_bytes);
  d.payload_crc = Crc32c(unit.data() + kDigestHeaderBytes, layout.blob_bytes - kDigestHeaderBytes);
  std::memcpy(d.header, unit.data(), kDigestHeaderBytes);
  for (int r = 0; r < layout.num_ranges && d.first_bad == kNoBadValue; ++r) {
    const ValueRange& range = layout.ranges[r];
    const uint64_t width =
        range.rule == ValueRule::kFiniteBf16 || range.rule == ValueRule::kFiniteFp16 ? 2 : 4;
    for (uint64_t e = 0; e < range.bytes / width; ++e) {
      if (Breaks(range.rule, unit.data() + range.offset + e * width)) {
        d.first_bad = uint64_t(r) << kBadElementBits | e;
        break;
      }
    }
  }
  return d;
}

}  // namespace leapcache::core
