#include "gpu/format/format.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "gpu/format/crc32c.h"

namespace leapcache {

// Payload scalars (fp32 scales, fp16 factors, fp32 elements) are copied with memcpy; the format
// is little-endian, so a big-endian host would need byte swaps that v1 does not implement.
static_assert(std::endian::native == std::endian::little, "leapcache blobs are little-endian");

size_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
      return 4;
    case DType::kBf16:
    case DType::kFp16:
      return 2;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
      return "fp32";
    case DType::kBf16:
      return "bf16";
    case DType::kFp16:
      return "fp16";
  }
  return "none";
}

const char* StateKindName(StateKind kind) {
  switch (kind) {
    case StateKind::kGdn:
      return "gdn";
    case StateKind::kKda:
      return "kda";
  }
  return "unknown";
}

const char* CodecName(Codec codec) {
  switch (codec) {
    case Codec::kFp32:
      return "fp32";
    case Codec::kBf16:
      return "bf16";
    case Codec::kFp16:
      return "fp16";
    case Codec::kIntRow:
      return "int-row";
    case Codec::kIntCol:
      return "int-col";
    case Codec::kLeap:
      return "leap";
  }
  return "unknown";
}

BlobSpec BlobSpec::Leap(StateKind kind, int bits, int dk, int dv) {
  BlobSpec s;
  s.kind = kind;
  s.dk = dk;
  s.dv = dv;
  s.codec = Codec::kLeap;
  s.bits = bits;
  s.p = 16;
  // r per bit width, from the LeapQuant paper's settings: fewer residual bits need more of the
  // state's energy carried by the fp16 compensators. Other widths get r = 0 and are rejected
  // by ValidateSpec.
  s.r = bits == 8 ? 4 : bits == 6 ? 6 : bits == 4 ? 8 : 0;
  s.smoothing = true;
  return s;
}

uint16_t BlobSpec::flags() const { return smoothing ? kFlagSmoothing : 0; }

std::string BlobSpec::ToString() const {
  std::string s = std::string(CodecName(codec)) + "/" + StateKindName(kind) +
                  " dk=" + std::to_string(dk) + " dv=" + std::to_string(dv) +
                  " bits=" + std::to_string(bits) + " p=" + std::to_string(p) +
                  " r=" + std::to_string(r);
  if (codec == Codec::kLeap) s += smoothing ? " smoothing" : " no-smoothing";
  return s;
}

namespace {

bool KnownKind(uint8_t k) { return k == 1 || k == 2; }
bool KnownCodec(uint8_t c) { return c >= 1 && c <= 6; }

int ElementBits(const BlobSpec& s) { return s.bits; }

}  // namespace

Status ValidateSpec(const BlobSpec& s) {
  if (!KnownKind(static_cast<uint8_t>(s.kind))) {
    return InvalidArgumentError("kind must be gdn or kda (got " +
                                std::to_string(static_cast<int>(s.kind)) + ")");
  }
  for (auto [name, d] : {std::pair{"dk", s.dk}, std::pair{"dv", s.dv}}) {
    if (d < kMinDim || d > kMaxDim || d % 16 != 0) {
      return InvalidArgumentError(std::string(name) +
                                  " must be a multiple of 16 in [16, 256] (got " +
                                  std::to_string(d) + ")");
    }
  }
  if (!KnownCodec(static_cast<uint8_t>(s.codec))) {
    return InvalidArgumentError("unknown codec " + std::to_string(static_cast<int>(s.codec)));
  }
  const int want_bits = s.codec == Codec::kFp32                                ? 32
                        : (s.codec == Codec::kBf16 || s.codec == Codec::kFp16) ? 16
                                                                               : 0;
  if (want_bits != 0 && s.bits != want_bits) {
    return InvalidArgumentError(std::string("bits of codec ") + CodecName(s.codec) + " must be " +
                                std::to_string(want_bits) + " (got " + std::to_string(s.bits) +
                                ")");
  }
  if (want_bits == 0 && s.bits != 8 && s.bits != 6 && s.bits != 4) {
    return InvalidArgumentError("bits must be 8, 6 or 4 (got " + std::to_string(s.bits) + ")");
  }
  if (s.p < 1 || s.p > kMaxWindow) {
    return InvalidArgumentError("p must be in [1, 32] (got " + std::to_string(s.p) + ")");
  }
  if (s.codec == Codec::kLeap) {
    if (s.r < 0 || s.r > kMaxRank) {
      return InvalidArgumentError("r must be in [0, 8] (got " + std::to_string(s.r) + ")");
    }
  } else {
    if (s.r != 0)
      return InvalidArgumentError("r must be 0 for codec " + std::string(CodecName(s.codec)));
    if (s.smoothing) {
      return InvalidArgumentError("smoothing applies to codec leap only (got " +
                                  std::string(CodecName(s.codec)) + ")");
    }
  }
  return OkStatus();
}

bool HasRowScales(const BlobSpec& s) {
  return s.codec == Codec::kIntRow || (s.codec == Codec::kLeap && s.smoothing);
}

bool HasColScales(const BlobSpec& s) {
  return s.codec == Codec::kIntCol || s.codec == Codec::kLeap;
}

PayloadLayout ComputeLayout(const BlobSpec& s) {
  PayloadLayout l;
  size_t off = 0;
  l.codes_offset = off;
  l.codes_bytes = static_cast<size_t>(s.dk) * s.dv * ElementBits(s) / 8;
  off += l.codes_bytes;
  if (HasRowScales(s)) {
    l.row_scale_offset = off;
    l.row_scale_bytes = 4 * static_cast<size_t>(s.dk);
    off += l.row_scale_bytes;
  }
  if (HasColScales(s)) {
    l.col_scale_offset = off;
    l.col_scale_bytes = 4 * static_cast<size_t>(s.dv);
    off += l.col_scale_bytes;
  }
  if (s.codec == Codec::kLeap && s.r > 0) {
    l.comp_offset = off;
    l.comp_bytes = 2 * static_cast<size_t>(s.r) * (s.dk + s.dv);
    off += l.comp_bytes;
  }
  l.payload_bytes = off;
  return l;
}

uint32_t LayoutFingerprint(const BlobSpec& s) {
  uint8_t b[12] = {};
  b[0] = static_cast<uint8_t>(s.codec);
  b[1] = static_cast<uint8_t>(s.kind);
  b[2] = static_cast<uint8_t>(s.bits);
  b[3] = 0;  // p does not change the layout: windows of any length share checkpoints
  b[4] = static_cast<uint8_t>(s.r);
  b[5] = static_cast<uint8_t>(Orientation::kVK);
  StoreU16(b + 6, s.flags());
  StoreU16(b + 8, static_cast<uint16_t>(s.dk));
  StoreU16(b + 10, static_cast<uint16_t>(s.dv));
  return Crc32c(b, sizeof b);
}

void SealBlob(const BlobSpec& s, std::span<uint8_t> blob) {
  const PayloadLayout l = ComputeLayout(s);
  uint8_t* h = blob.data();
  std::memset(h, 0, kHeaderBytes);
  StoreU32(h + header::kMagic, kBlobMagic);
  StoreU16(h + header::kVersion, kFormatVersion);
  StoreU16(h + header::kHeaderSize, static_cast<uint16_t>(kHeaderBytes));
  h[header::kCodec] = static_cast<uint8_t>(s.codec);
  h[header::kKind] = static_cast<uint8_t>(s.kind);
  h[header::kBits] = static_cast<uint8_t>(s.bits);
  h[header::kWindow] = static_cast<uint8_t>(s.p);
  h[header::kRank] = static_cast<uint8_t>(s.r);
  h[header::kOrientation] = static_cast<uint8_t>(Orientation::kVK);
  StoreU16(h + header::kFlags, s.flags());
  StoreU16(h + header::kDk, static_cast<uint16_t>(s.dk));
  StoreU16(h + header::kDv, static_cast<uint16_t>(s.dv));
  StoreU32(h + header::kPayloadBytes, static_cast<uint32_t>(l.payload_bytes));
  StoreU32(h + header::kFingerprint, LayoutFingerprint(s));
  StoreU32(h + header::kPayloadCrc, Crc32c(h + kHeaderBytes, l.payload_bytes));
  StoreU32(h + header::kHeaderCrc, Crc32c(h, header::kHeaderCrc));
}

Status CheckStoredValues(const BlobSpec& spec, std::span<const uint8_t> payload) {
  const PayloadLayout l = ComputeLayout(spec);
  const auto scales = [&](size_t offset, size_t bytes, const char* name) -> Status {
    for (size_t at = offset; at < offset + bytes; at += 4) {
      const float x = std::bit_cast<float>(LoadU32(payload.data() + at));
      if (!(x > 0.0f) || x == std::numeric_limits<float>::infinity()) {
        return DataLossError(std::string(name) + " " + std::to_string((at - offset) / 4) +
                             " is not finite and positive");
      }
    }
    return OkStatus();
  };
  LEAPCACHE_RETURN_IF_ERROR(scales(l.row_scale_offset, l.row_scale_bytes, "row scale"));
  LEAPCACHE_RETURN_IF_ERROR(scales(l.col_scale_offset, l.col_scale_bytes, "column scale"));
  // Float codecs store the state itself: an all-ones exponent (infinity or NaN) in any element.
  if (spec.codec == Codec::kFp32) {
    for (size_t at = l.codes_offset; at < l.codes_offset + l.codes_bytes; at += 4) {
      if ((LoadU32(payload.data() + at) & 0x7F800000u) == 0x7F800000u) {
        return DataLossError("element " + std::to_string((at - l.codes_offset) / 4) +
                             " is not finite");
      }
    }
  } else if (spec.codec == Codec::kBf16 || spec.codec == Codec::kFp16) {
    const uint16_t exponent = spec.codec == Codec::kBf16 ? 0x7F80 : 0x7C00;
    for (size_t at = l.codes_offset; at < l.codes_offset + l.codes_bytes; at += 2) {
      if ((LoadU16(payload.data() + at) & exponent) == exponent) {
        return DataLossError("element " + std::to_string((at - l.codes_offset) / 2) +
                             " is not finite");
      }
    }
  }
  for (size_t at = l.comp_offset; at < l.comp_offset + l.comp_bytes; at += 2) {
    // fp16 with an all-ones exponent: infinity or NaN.
    if ((LoadU16(payload.data() + at) & 0x7C00) == 0x7C00) {
      return DataLossError("compensator " + std::to_string((at - l.comp_offset) / 2) +
                           " is not finite");
    }
  }
  return OkStatus();
}

StatusOr<BlobSpec> ParseHeader(std::span<const uint8_t> blob) {
  if (blob.size() < kHeaderBytes) {
    return DataLossError("blob is " + std::to_string(blob.size()) +
                         " bytes, shorter than its 64-byte header");
  }
  const uint8_t* h = blob.data();
  if (LoadU32(h + header::kMagic) != kBlobMagic) return DataLossError("bad blob magic");
  if (LoadU32(h + header::kHeaderCrc) != Crc32c(h, header::kHeaderCrc)) {
    return DataLossError("blob header checksum mismatch");
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

namespace {

// Every check of ParseBlob but the payload's CRC, from the header and the blob's size.
StatusOr<BlobSpec> CheckBlobFields(std::span<const uint8_t> blob_start, size_t blob_bytes,
                                   PayloadLayout* layout) {
  StatusOr<BlobSpec> declared = ParseHeader(blob_start);
  if (!declared.ok()) return declared.status();
  const uint8_t* h = blob_start.data();
  if (const uint16_t v = LoadU16(h + header::kVersion); v != kFormatVersion) {
    return InvalidArgumentError("unsupported blob version " + std::to_string(v) +
                                " (this build reads 1)");
  }
  if (LoadU16(h + header::kHeaderSize) != kHeaderBytes)
    return DataLossError("bad header size field");
  for (size_t i = header::kReserved; i < header::kHeaderCrc; ++i) {
    if (h[i] != 0)
      return InvalidArgumentError("reserved header byte " + std::to_string(i) + " is not zero");
  }
  if (h[header::kOrientation] != static_cast<uint8_t>(Orientation::kVK)) {
    return InvalidArgumentError("blob orientation must be value-major (1)");
  }
  const uint16_t flags = LoadU16(h + header::kFlags);
  if ((flags & ~kKnownFlags) != 0) return InvalidArgumentError("unknown header flags");
  const BlobSpec s = *declared;
  LEAPCACHE_RETURN_IF_ERROR(ValidateSpec(s));
  const PayloadLayout l = ComputeLayout(s);
  if (LoadU32(h + header::kPayloadBytes) != l.payload_bytes) {
    return DataLossError("payload size field disagrees with the header's shape");
  }
  if (blob_bytes != l.blob_bytes()) {
    return DataLossError("blob is " + std::to_string(blob_bytes) + " bytes, header says " +
                         std::to_string(l.blob_bytes()));
  }
  if (LoadU32(h + header::kFingerprint) != LayoutFingerprint(s)) {
    return DataLossError("layout fingerprint mismatch");
  }
  *layout = l;
  return s;
}

Status CheckPayloadCrc(std::span<const uint8_t> blob_start, uint32_t payload_crc) {
  if (LoadU32(blob_start.data() + header::kPayloadCrc) != payload_crc) {
    return DataLossError("blob payload checksum mismatch");
  }
  return OkStatus();
}

}  // namespace

StatusOr<BlobSpec> ParseBlob(std::span<const uint8_t> blob) {
  PayloadLayout l;
  StatusOr<BlobSpec> s = CheckBlobFields(blob, blob.size(), &l);
  if (!s.ok()) return s;
  LEAPCACHE_RETURN_IF_ERROR(
      CheckPayloadCrc(blob, Crc32c(blob.data() + kHeaderBytes, l.payload_bytes)));
  return s;
}

StatusOr<BlobSpec> ParseBlobHeader(std::span<const uint8_t> header, size_t blob_bytes,
                                   uint32_t payload_crc) {
  PayloadLayout l;
  StatusOr<BlobSpec> s =
      CheckBlobFields(header.first(std::min(header.size(), kHeaderBytes)), blob_bytes, &l);
  if (!s.ok()) return s;
  LEAPCACHE_RETURN_IF_ERROR(CheckPayloadCrc(header, payload_crc));
  return s;
}

}  // namespace leapcache
