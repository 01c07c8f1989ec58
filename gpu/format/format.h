// The v1 state-blob format: what one stored (layer, head) checkpoint looks like in bytes.
// gpu/FORMAT.md is the specification; this header is its executable form. Everything here is
// plain data and pure functions so the kernels, the store and the tools share one definition.
//
// A blob is a 64-byte header followed by the payload. All multi-byte fields are little-endian.
// The payload's matrices are value-major ([dv][dk], dk contiguous) whatever the input layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gpu/format/status.h"

namespace leapcache {

// How the recurrent state decays: one scalar per head (GDN) or one factor per key channel (KDA).
enum class StateKind : uint8_t { kGdn = 1, kKda = 2 };

// How a state's matrix is stored. The integer codecs share one payload shape (codes, then the
// scales the codec uses, then compensators); they differ in how the encoder picks the scales.
enum class Codec : uint8_t {
  kFp32 = 1,    // raw fp32, lossless
  kBf16 = 2,    // bfloat16, round to nearest even
  kFp16 = 3,    // binary16, round to nearest even, saturating at +-65504
  kIntRow = 4,  // b-bit codes, per-key-row absmax scale
  kIntCol = 5,  // b-bit codes, per-value-column absmax scale
  kLeap = 6,    // LeapQuant boundary: r fp16 compensator pairs + smoothed residual, per-value scale
};

// Layout of a dense state matrix handed to encode or asked of decode.
enum class Orientation : uint8_t {
  kKV = 0,  // [dk][dv], value index contiguous (the math's S)
  kVK = 1,  // [dv][dk], key index contiguous (vLLM/FlashInfer/TRT-LLM pools; the blob's own)
};

// Element type of the dense arrays around stored states: dense states, decode-step vectors,
// conv states. Little-endian IEEE binary32, bfloat16 (the high half of a binary32) or binary16.
// The one element-type vocabulary below the wire; the numbers are types.proto's (DType,
// ConvDType), and 0 (DType{}) means none, as there.
enum class DType : uint8_t {
  kFp32 = 1,
  kBf16 = 2,
  kFp16 = 3,
};
// 4 or 2; 0 for a value that names no type (DType{}).
size_t DTypeBytes(DType dtype);
// "fp32", "bf16", "fp16"; "none" otherwise.
const char* DTypeName(DType dtype);

// Header flag bits.
inline constexpr uint16_t kFlagSmoothing = 1u << 0;  // kLeap: per-key-row smoothing scales stored
inline constexpr uint16_t kKnownFlags = kFlagSmoothing;

inline constexpr uint32_t kBlobMagic = 0x5453434Cu;  // "LCST" in file order
inline constexpr uint16_t kFormatVersion = 1;
inline constexpr size_t kHeaderBytes = 64;
inline constexpr int kMaxRank = 8;     // compensator pairs
inline constexpr int kMaxWindow = 32;  // records per window
inline constexpr int kMinDim = 16;
inline constexpr int kMaxDim = 256;

const char* StateKindName(StateKind kind);
const char* CodecName(Codec codec);

// Everything that determines a blob's bytes other than the state itself.
struct BlobSpec {
  StateKind kind = StateKind::kGdn;
  int dk = 128;
  int dv = 128;
  Codec codec = Codec::kLeap;
  int bits = 8;           // element width: 32 (fp32), 16 (bf16/fp16), 8/6/4 (integer codecs)
  int p = 16;             // window length the checkpoint was produced with (1 for per-step codecs)
  int r = 4;              // compensator pairs (kLeap only; 0 otherwise)
  bool smoothing = true;  // kLeap only

  // The documented defaults of the window format at 8, 6 and 4 bits.
  static BlobSpec Leap(StateKind kind, int bits, int dk = 128, int dv = 128);
  uint16_t flags() const;
  std::string ToString() const;
};

// Rejects shapes and parameter combinations the format does not define, naming the bad field.
Status ValidateSpec(const BlobSpec& spec);

// Byte offsets of the payload sections (relative to the payload start); absent sections have
// size 0. Each present section starts on a 16-byte boundary because dk, dv are multiples of 16.
struct PayloadLayout {
  size_t codes_offset = 0, codes_bytes = 0;          // [dv][dk] elements or packed codes
  size_t row_scale_offset = 0, row_scale_bytes = 0;  // fp32 [dk]
  size_t col_scale_offset = 0, col_scale_bytes = 0;  // fp32 [dv]
  size_t comp_offset = 0, comp_bytes = 0;            // fp16 [r][dk + dv]
  size_t payload_bytes = 0;
  size_t blob_bytes() const { return kHeaderBytes + payload_bytes; }
};

// REQUIRES: ValidateSpec(spec).ok().
PayloadLayout ComputeLayout(const BlobSpec& spec);
bool HasRowScales(const BlobSpec& spec);
bool HasColScales(const BlobSpec& spec);
inline bool IsIntegerCodec(Codec c) {
  return c == Codec::kIntRow || c == Codec::kIntCol || c == Codec::kLeap;
}
// Largest code magnitude at `bits`: 127, 31 or 7 (symmetric; -2^(b-1) is never written).
inline int MaxCode(int bits) { return (1 << (bits - 1)) - 1; }

// CRC-32C of the fields that fix the payload's layout (codec, kind, bits, r, orientation, flags,
// dk, dv; the byte of p is zero). Equal fingerprints mean interchangeable blobs.
uint32_t LayoutFingerprint(const BlobSpec& spec);

// Header field offsets (bytes from the blob start).
namespace header {
inline constexpr size_t kMagic = 0;          // u32
inline constexpr size_t kVersion = 4;        // u16
inline constexpr size_t kHeaderSize = 6;     // u16, 64
inline constexpr size_t kCodec = 8;          // u8
inline constexpr size_t kKind = 9;           // u8
inline constexpr size_t kBits = 10;          // u8
inline constexpr size_t kWindow = 11;        // u8, p
inline constexpr size_t kRank = 12;          // u8, r
inline constexpr size_t kOrientation = 13;   // u8, always kVK in v1
inline constexpr size_t kFlags = 14;         // u16
inline constexpr size_t kDk = 16;            // u16
inline constexpr size_t kDv = 18;            // u16
inline constexpr size_t kPayloadBytes = 20;  // u32
inline constexpr size_t kFingerprint = 24;   // u32
inline constexpr size_t kPayloadCrc = 28;    // u32, CRC-32C of the payload
inline constexpr size_t kReserved = 32;      // 28 bytes, zero
inline constexpr size_t kHeaderCrc = 60;     // u32, CRC-32C of bytes [0, 60)
}  // namespace header

// Writes the header for `spec` into blob[0, 64) and seals it: computes the payload CRC over
// blob[64, 64 + payload_bytes) and the header CRC. REQUIRES: blob.size() == blob_bytes().
void SealBlob(const BlobSpec& spec, std::span<uint8_t> blob);

// The spec a blob's header declares, read from the header alone: DATA_LOSS unless the blob holds
// a header whose magic and header CRC are intact. Nothing else is checked (version, fields, the
// spec's validity, the payload): what a caller that must say which format a damaged or foreign
// blob claims to be reads, before ParseBlob says what is wrong with it.
StatusOr<BlobSpec> ParseHeader(std::span<const uint8_t> blob);

// Parses and checks a whole blob: size, magic, version, header CRC, known codec/kind/flags, a
// valid spec, payload size, payload CRC. Any failure is DATA_LOSS or INVALID_ARGUMENT with the
// field named; never reads outside `blob`. The one parser of the v1 header (with ParseHeader).
StatusOr<BlobSpec> ParseBlob(std::span<const uint8_t> blob);
// ParseBlob's answer for a blob of `blob_bytes` of which only the first kHeaderBytes are at
// hand (`header`) and whose payload's CRC-32C was computed elsewhere (on the device that holds
// it): the same status, message and spec as ParseBlob of the whole blob.
StatusOr<BlobSpec> ParseBlobHeader(std::span<const uint8_t> header, size_t blob_bytes,
                                   uint32_t payload_crc);

// The stored values a reader refuses even under a valid checksum (section 2): a row or column
// scale that is not finite and positive, a compensator that is not finite, an element of the
// fp32/bf16/fp16 codecs that is not finite. DATA_LOSS naming the field. REQUIRES: payload.size() ==
// ComputeLayout(spec).payload_bytes.
Status CheckStoredValues(const BlobSpec& spec, std::span<const uint8_t> payload);

// Little-endian field access (the format is little-endian on every host).
inline void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void StoreU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t LoadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace leapcache
