#include "service/core/blob_check.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpu/crc32c.h"
#include "gpu/format.h"
#include "base/format_status.h"
#include "base/status_macros.h"

namespace leapcache::core {
namespace {

// The spec a blob's header declares, if the header itself is intact (magic and header CRC).
std::optional<BlobSpec> PeekSpec(std::span<const uint8_t> blob) {
  if (blob.size() < kHeaderBytes) return std::nullopt;
  const uint8_t* h = blob.data();
  if (LoadU32(h + header::kMagic) != kBlobMagic ||
      LoadU32(h + header::kHeaderCrc) != Crc32c(h, header::kHeaderCrc)) {
    return std::nullopt;
  }
  BlobSpec s;
  s.codec = static_cast<Codec>(h[header::kCodec]);
  s.kind = static_cast<StateKind>(h[header::kKind]);
  s.bits = h[header::kBits];
  s.p = h[header::kWindow];
  s.r = h[header::kRank];
  s.smoothing = (LoadU16(h + header::kFlags) & kFlagSmoothing) != 0;
  s.dk = LoadU16(h + header::kDk);
  s.dv = LoadU16(h + header::kDv);
  return s;
}

}  // namespace

absl::Status CheckPutBlobs(const NamespaceInfo& ns, const MemoryTier& tier,
                           const Placement& placement, HeadRange heads, uint32_t expected_crc,
                           std::vector<uint32_t>* blob_crcs) {
  // Memory that is not host-addressable (device memory) is copied out once, a page's run of
  // blobs per copy, and both passes below read the copy.
  std::vector<uint8_t> copy;
  if (placement.blobs > 0 && tier.HostAddress(placement.PageOf(0)) == nullptr) {
    copy.resize(placement.blobs * placement.blob_bytes);
    for (size_t pos = 0; pos < copy.size();) {
      const size_t b = pos / placement.blob_bytes;
      const size_t n = placement.ContiguousFrom(pos);
      LC_RETURN_IF_ERROR(tier.CopyOut(placement.PageOf(b),
                                      placement.OffsetOf(b) + pos % placement.blob_bytes,
                                      std::span<uint8_t>(copy).subspan(pos, n)));
      pos += n;
    }
  }
  const auto blob_at = [&](size_t i) -> absl::StatusOr<std::span<const uint8_t>> {
    if (!copy.empty()) {
      return std::span<const uint8_t>(copy).subspan(i * placement.blob_bytes, placement.blob_bytes);
    }
    return std::span<const uint8_t>(tier.HostAddress(placement.PageOf(i)) + placement.OffsetOf(i),
                                    placement.blob_bytes);
  };
  const auto where = [&](size_t i) {
    return absl::StrCat("blob (layer ", i / heads.size(), ", head ",
                        heads.begin + static_cast<int>(i % heads.size()), ")");
  };

  // Each blob's own CRC, and the upload's folded from them (one pass over the bytes).
  const Crc32cCombiner fold(placement.blob_bytes);
  std::vector<uint32_t> crcs(placement.blobs);
  uint32_t crc = 0;
  for (size_t i = 0; i < placement.blobs; ++i) {
    LC_ASSIGN_OR_RETURN(std::span<const uint8_t> blob, blob_at(i));
    crcs[i] = Crc32c(blob.data(), blob.size());
    crc = fold.Combine(crc, crcs[i]);
  }
  if (crc != expected_crc) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch: the %d uploaded bytes have CRC-32C 0x%08x, the commit says 0x%08x",
        placement.blobs * placement.blob_bytes, crc, expected_crc));
  }
  for (size_t i = 0; i < placement.blobs; ++i) {
    LC_ASSIGN_OR_RETURN(std::span<const uint8_t> blob, blob_at(i));
    if (std::optional<BlobSpec> declared = PeekSpec(blob);
        declared.has_value() && !SameBlobSpec(*declared, ns.spec.format)) {
      return absl::InvalidArgumentError(absl::StrCat(where(i), " is ", declared->ToString(),
                                                     "; the namespace stores ",
                                                     ns.spec.format.ToString()));
    }
    leapcache::StatusOr<BlobSpec> parsed = ParseBlob(blob);
    absl::Status st = base::FromFormatStatus(parsed.status());
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(where(i), ": ", st.message()));
    // Values no reader would accept, under a valid checksum: the put's own bad content.
    st = base::FromFormatStatus(CheckStoredValues(*parsed, blob.subspan(kHeaderBytes)));
    if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(where(i), ": ", st.message()));
  }
  *blob_crcs = std::move(crcs);
  return absl::OkStatus();
}

}  // namespace leapcache::core
