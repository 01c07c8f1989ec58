#include "service/core/blob_check.h"

#include <cstring>
#include <string>
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

std::string Where(HeadRange heads, const char* part, size_t i) {
  return absl::StrCat(part, " (layer ", i / heads.size(), ", head ",
                      heads.begin + static_cast<int>(i % heads.size()), ")");
}

absl::Status CheckCrc(const Placement& placement, uint32_t crc, uint32_t expected_crc) {
  if (crc == expected_crc) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "checksum mismatch: the %d uploaded bytes have CRC-32C 0x%08x, the commit says 0x%08x",
      placement.units * placement.unit_bytes, crc, expected_crc));
}

// Check 2 of blob_check.h, from the unit's first bytes.
absl::Status CheckDeclaredSpec(const NamespaceInfo& ns, HeadRange heads,
                               std::span<const uint8_t> blob_start, size_t i) {
  if (leapcache::StatusOr<BlobSpec> declared = ParseHeader(blob_start);
      declared.ok() && !SameBlobSpec(*declared, ns.spec.format)) {
    return absl::InvalidArgumentError(absl::StrCat(Where(heads, "blob", i), " is ",
                                                   declared->ToString(), "; the namespace stores ",
                                                   ns.spec.format.ToString()));
  }
  return absl::OkStatus();
}

absl::Status Located(HeadRange heads, size_t i, const leapcache::Status& parsed) {
  const absl::Status st = base::FromFormatStatus(parsed);
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(Where(heads, "blob", i), ": ", st.message()));
}

absl::Status BadConv(const NamespaceInfo& ns, HeadRange heads, size_t i, int64_t element) {
  return absl::InvalidArgumentError(absl::StrCat(Where(heads, "conv state", i), ": element ",
                                                 element, " is not finite (",
                                                 DTypeName(ns.spec.model.conv.dtype), ")"));
}

// The value ranges a digest checks, in CheckStoredValues' order and then the conv state, each
// with the words CheckStoredValues' message gives it (nullptr: the conv state).
struct DigestRanges {
  UnitLayout layout;
  const char* names[kMaxValueRanges] = {};
  const char* reasons[kMaxValueRanges] = {};
};

DigestRanges DigestRangesOf(const NamespaceInfo& ns) {
  DigestRanges d;
  d.layout.unit_bytes = ns.unit_bytes;
  d.layout.blob_bytes = ns.blob_bytes;
  const BlobSpec& spec = ns.spec.format;
  const PayloadLayout l = ComputeLayout(spec);
  const auto add = [&](uint64_t offset, uint64_t bytes, ValueRule rule, const char* name,
                       const char* reason) {
    if (bytes == 0) return;
    const int r = d.layout.num_ranges++;
    d.layout.ranges[r] = {offset, bytes, rule};
    d.names[r] = name;
    d.reasons[r] = reason;
  };
  add(kHeaderBytes + l.row_scale_offset, l.row_scale_bytes, ValueRule::kPositiveFp32, "row scale",
      " is not finite and positive");
  add(kHeaderBytes + l.col_scale_offset, l.col_scale_bytes, ValueRule::kPositiveFp32,
      "column scale", " is not finite and positive");
  if (spec.codec == Codec::kFp32) {
    add(kHeaderBytes + l.codes_offset, l.codes_bytes, ValueRule::kFiniteFp32, "element",
        " is not finite");
  } else if (spec.codec == Codec::kBf16) {
    add(kHeaderBytes + l.codes_offset, l.codes_bytes, ValueRule::kFiniteBf16, "element",
        " is not finite");
  } else if (spec.codec == Codec::kFp16) {
    add(kHeaderBytes + l.codes_offset, l.codes_bytes, ValueRule::kFiniteFp16, "element",
        " is not finite");
  }
  add(kHeaderBytes + l.comp_offset, l.comp_bytes, ValueRule::kFiniteFp16, "compensator",
      " is not finite");
  const DType conv = ns.spec.model.conv.dtype;
  const ValueRule conv_rule = conv == DType::kFp32   ? ValueRule::kFiniteFp32
                              : conv == DType::kBf16 ? ValueRule::kFiniteBf16
                                                     : ValueRule::kFiniteFp16;
  if (DTypeBytes(conv) > 0) add(ns.blob_bytes, ns.conv_bytes, conv_rule, nullptr, nullptr);
  return d;
}

// The checks of blob_check.h from digests the tier computed where the units lie: the same
// answers, in the same order, as the checks over the units' bytes.
absl::Status CheckDigests(const NamespaceInfo& ns, const Placement& placement, HeadRange heads,
                          uint32_t expected_crc, const DigestRanges& ranges,
                          std::span<const UnitDigest> digests, std::vector<uint32_t>* unit_crcs) {
  const Crc32cCombiner fold(placement.unit_bytes);
  std::vector<uint32_t> crcs(placement.units);
  uint32_t crc = 0;
  for (size_t i = 0; i < placement.units; ++i) {
    crcs[i] = digests[i].unit_crc;
    crc = fold.Combine(crc, crcs[i]);
  }
  LC_RETURN_IF_ERROR(CheckCrc(placement, crc, expected_crc));
  // A put's headers differ only in their two checksums, and the header checks read nothing
  // else but the blob's size (the same for every unit): a header equal to one that passed but
  // for those eight bytes, whose checksums hold, passes too. Only the others are parsed (about
  // 0.3 us each; 1,024 units would spend 300 us on parsing the same header).
  uint8_t passed[kDigestHeaderBytes];
  bool any_passed = false;
  const auto same_but_checksums = [&](const uint8_t* h) {
    return std::memcmp(h, passed, header::kPayloadCrc) == 0 &&
           std::memcmp(h + header::kPayloadCrc + 4, passed + header::kPayloadCrc + 4,
                       header::kHeaderCrc - header::kPayloadCrc - 4) == 0;
  };
  for (size_t i = 0; i < placement.units; ++i) {
    const UnitDigest& d = digests[i];
    const uint8_t* const h = d.header;
    const bool known = any_passed && same_but_checksums(h) &&
                       LoadU32(h + header::kHeaderCrc) == Crc32c(h, header::kHeaderCrc) &&
                       LoadU32(h + header::kPayloadCrc) == d.payload_crc;
    if (!known) {
      const std::span<const uint8_t> header(h, kDigestHeaderBytes);
      LC_RETURN_IF_ERROR(CheckDeclaredSpec(ns, heads, header, i));
      LC_RETURN_IF_ERROR(
          Located(heads, i, ParseBlobHeader(header, ns.blob_bytes, d.payload_crc).status()));
      std::memcpy(passed, h, kDigestHeaderBytes);
      any_passed = true;
    }
    if (d.first_bad == kNoBadValue) continue;
    const int r = static_cast<int>(d.first_bad >> kBadElementBits);
    const int64_t element =
        static_cast<int64_t>(d.first_bad & ((uint64_t{1} << kBadElementBits) - 1));
    if (r < 0 || r >= ranges.layout.num_ranges) {
      return absl::InternalError(
          absl::StrCat("a unit digest names value range ", r, " of ", ranges.layout.num_ranges));
    }
    if (ranges.names[r] == nullptr) return BadConv(ns, heads, i, element);
    return absl::InvalidArgumentError(absl::StrCat(Where(heads, "blob", i), ": ", ranges.names[r],
                                                   " ", element, ranges.reasons[r]));
  }
  *unit_crcs = std::move(crcs);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPutUnits(const NamespaceInfo& ns, const MemoryTier& tier,
                           const Placement& placement, HeadRange heads, uint32_t expected_crc,
                           std::vector<uint32_t>* unit_crcs) {
  const bool host_addressable =
      placement.units == 0 || tier.HostAddress(placement.PageOf(0)) != nullptr;
  if (!host_addressable) {
    // Device memory: digests computed where the units lie, if the tier can.
    std::vector<MemoryTier::UnitPlace> places(placement.units);
    for (size_t i = 0; i < placement.units; ++i) {
      places[i] = {placement.PageOf(i), placement.OffsetOf(i)};
    }
    const DigestRanges ranges = DigestRangesOf(ns);
    std::vector<UnitDigest> digests(placement.units);
    const absl::Status digested = tier.DigestUnits(places, ranges.layout, digests);
    if (digested.ok()) {
      return CheckDigests(ns, placement, heads, expected_crc, ranges, digests, unit_crcs);
    }
    if (!absl::IsUnimplemented(digested)) return digested;
  }
  // Memory that is not host-addressable and computes no digests is copied out once, a page's
  // run of units per copy, and both passes below read the copy.
  std::vector<uint8_t> copy;
  if (!host_addressable) {
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
  const auto unit_at = [&](size_t i) -> std::span<const uint8_t> {
    if (!copy.empty()) {
      return std::span<const uint8_t>(copy).subspan(i * placement.unit_bytes, placement.unit_bytes);
    }
    return std::span<const uint8_t>(tier.HostAddress(placement.PageOf(i)) + placement.OffsetOf(i),
                                    placement.unit_bytes);
  };

  // Each unit's own CRC, and the upload's folded from them (one pass over the bytes).
  const Crc32cCombiner fold(placement.unit_bytes);
  std::vector<uint32_t> crcs(placement.units);
  uint32_t crc = 0;
  for (size_t i = 0; i < placement.units; ++i) {
    const std::span<const uint8_t> unit = unit_at(i);
    crcs[i] = Crc32c(unit.data(), unit.size());
    crc = fold.Combine(crc, crcs[i]);
  }
  LC_RETURN_IF_ERROR(CheckCrc(placement, crc, expected_crc));
  for (size_t i = 0; i < placement.units; ++i) {
    const std::span<const uint8_t> unit = unit_at(i);
    const std::span<const uint8_t> blob = unit.first(ns.blob_bytes);
    LC_RETURN_IF_ERROR(CheckDeclaredSpec(ns, heads, blob, i));
    leapcache::StatusOr<BlobSpec> parsed = ParseBlob(blob);
    LC_RETURN_IF_ERROR(Located(heads, i, parsed.status()));
    // Values no reader would accept, under a valid checksum: the put's own bad content.
    const absl::Status values =
        base::FromFormatStatus(CheckStoredValues(*parsed, blob.subspan(kHeaderBytes)));
    if (!values.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(heads, "blob", i), ": ", values.message()));
    }
    if (const int64_t bad = FirstNonFiniteConv(unit.subspan(ns.blob_bytes, ns.conv_bytes),
                                               ns.spec.model.conv.dtype);
        bad >= 0) {
      return BadConv(ns, heads, i, bad);
    }
  }
  *unit_crcs = std::move(crcs);
  return absl::OkStatus();
}

}  // namespace leapcache::core
