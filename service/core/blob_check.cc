#include "service/core/blob_check.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/format_status.h"
#include "base/status_macros.h"
#include "gpu/format/crc32c.h"
#include "gpu/format/format.h"

namespace leapcache::core {
namespace {

// The index of the first element of a conv state whose exponent bits are all ones (an infinity
// or a NaN, which would poison every later output of the engine that resumes from it), or -1.
int64_t FirstNonFiniteConv(std::span<const uint8_t> conv, DType dtype) {
  const size_t width = DTypeBytes(dtype);
  if (width == 0) return -1;  // no conv state
  for (size_t i = 0; i + width <= conv.size(); i += width) {
    const uint8_t* e = conv.data() + i;
    bool finite = true;
    switch (dtype) {
      case DType::kFp32:
        finite = (LoadU32(e) & 0x7f800000u) != 0x7f800000u;
        break;
      case DType::kBf16:
        finite = (LoadU16(e) & 0x7f80u) != 0x7f80u;
        break;
      case DType::kFp16:
        finite = (LoadU16(e) & 0x7c00u) != 0x7c00u;
        break;
      case DType{}:
        break;
    }
    if (!finite) return static_cast<int64_t>(i / width);
  }
  return -1;
}

}  // namespace

absl::Status CheckPutUnits(const NamespaceInfo& ns, const MemoryTier& tier,
                           const Placement& placement, HeadRange heads, uint32_t expected_crc,
                           std::vector<uint32_t>* unit_crcs) {
  // Memory that is not host-addressable (device memory) is copied out once, a page's run of
  // units per copy, and both passes below read the copy.
  std::vector<uint8_t> copy;
  if (placement.units > 0 && tier.HostAddress(placement.PageOf(0)) == nullptr) {
    copy.resize(placement.units * placement.unit_bytes);
    for (size_t pos = 0; pos < copy.size();) {
      const size_t b = pos / placement.unit_bytes;
      const size_t n = placement.ContiguousFrom(pos);
      LC_RETURN_IF_ERROR(tier.CopyOut(placement.PageOf(b),
                                      placement.OffsetOf(b) + pos % placement.unit_bytes,
                                      std::span<uint8_t>(copy).subspan(pos, n)));
      pos += n;
    }
  }
  const auto unit_at = [&](size_t i) -> absl::StatusOr<std::span<const uint8_t>> {
    if (!copy.empty()) {
      return std::span<const uint8_t>(copy).subspan(i * placement.unit_bytes, placement.unit_bytes);
    }
    return std::span<const uint8_t>(tier.HostAddress(placement.PageOf(i)) + placement.OffsetOf(i),
                                    placement.unit_bytes);
  };
  const auto where = [&](const char* part, size_t i) {
    return absl::StrCat(part, " (layer ", i / heads.size(), ", head ",
                        heads.begin + static_cast<int>(i % heads.size()), ")");
  };

  // Each unit's own CRC, and the upload's folded from them (one pass over the bytes).
  const Crc32cCombiner fold(placement.unit_bytes);
  std::vector<uint32_t> crcs(placement.units);
  uint32_t crc = 0;
  for (size_t i = 0; i < placement.units; ++i) {
    LC_ASSIGN_OR_RETURN(std::span<const uint8_t> unit, unit_at(i));
    crcs[i] = Crc32c(unit.data(), unit.size());
    crc = fold.Combine(crc, crcs[i]);
  }
  if (crc != expected_crc) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch: the %d uploaded bytes have CRC-32C 0x%08x, the commit says 0x%08x",
        placement.units * placement.unit_bytes, crc, expected_crc));
  }
  for (size_t i = 0; i < placement.units; ++i) {
    LC_ASSIGN_OR_RETURN(std::span<const uint8_t> unit, unit_at(i));
    const std::span<const uint8_t> blob = unit.first(ns.blob_bytes);
    if (leapcache::StatusOr<BlobSpec> declared = ParseHeader(blob);
        declared.ok() && !SameBlobSpec(*declared, ns.spec.format)) {
      return absl::InvalidArgumentError(absl::StrCat(where("blob", i), " is ",
                                                     declared->ToString(),
                                                     "; the namespace stores ",
                                                     ns.spec.format.ToString()));
    }
    leapcache::StatusOr<BlobSpec> parsed = ParseBlob(blob);
    absl::Status st = base::FromFormatStatus(parsed.status());
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat(where("blob", i), ": ", st.message()));
    }
    // Values no reader would accept, under a valid checksum: the put's own bad content.
    st = base::FromFormatStatus(CheckStoredValues(*parsed, blob.subspan(kHeaderBytes)));
    if (!st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where("blob", i), ": ", st.message()));
    }
    if (const int64_t bad = FirstNonFiniteConv(unit.subspan(ns.blob_bytes, ns.conv_bytes),
                                               ns.spec.model.conv.dtype);
        bad >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(where("conv state", i), ": element ", bad,
                                                     " is not finite (",
                                                     DTypeName(ns.spec.model.conv.dtype), ")"));
    }
  }
  *unit_crcs = std::move(crcs);
  return absl::OkStatus();
}

}  // namespace leapcache::core
