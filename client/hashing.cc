// The client's free helpers: block-hash chains (base/block_hash.h, so client and server
// hash identically), hex spelling of hashes, CRC-32C, the published format presets and the
// conv dtypes' names.
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/block_hash.h"
#include "gpu/format/crc32c.h"
#include "gpu/format/format.h"
#include "leapcache/client.h"

namespace leapcache::client {

static_assert(sizeof(BlockHash) == sizeof(base::BlockHash));

StorageFormat StorageFormat::Leap(int bits) {
  // r and p do not depend on the kind; the format's presets are the one source of them.
  const BlobSpec s = BlobSpec::Leap(leapcache::StateKind::kGdn, bits);
  StorageFormat f;
  f.codec = Codec::kLeap;
  f.bits = s.bits;
  f.p = s.p;
  f.r = s.r;
  f.smoothing = s.smoothing;
  return f;
}

absl::StatusOr<ConvDType> ConvDTypeFromName(std::string_view name) {
  if (name == "bf16") return ConvDType::kBf16;
  if (name == "fp16") return ConvDType::kFp16;
  if (name == "fp32") return ConvDType::kFp32;
  return absl::InvalidArgumentError(
      absl::StrCat("a conv dtype is bf16, fp16 or fp32 (got \"", std::string(name), "\")"));
}

absl::StatusOr<std::vector<BlockHash>> ChainHashes(std::span<const uint32_t> tokens,
                                                   int64_t block_tokens,
                                                   std::span<const uint8_t> extras) {
  absl::StatusOr<std::vector<base::BlockHash>> chain =
      base::ChainHashes(tokens, block_tokens, extras);
  if (!chain.ok()) return chain.status();
  return std::vector<BlockHash>(chain->begin(), chain->end());
}

std::string HashToHex(const BlockHash& hash) { return base::HashToHex(hash); }

absl::StatusOr<BlockHash> HashFromHex(const std::string& hex) {
  if (hex.size() != 2 * sizeof(BlockHash) ||
      hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("a block hash is 64 hex digits (got \"", hex, "\")"));
  }
  const std::string bytes = absl::HexStringToBytes(hex);
  BlockHash h;
  std::copy(bytes.begin(), bytes.end(), h.begin());
  return h;
}

uint32_t Crc32c(std::span<const uint8_t> bytes) {
  return leapcache::Crc32c(bytes.data(), bytes.size());
}

}  // namespace leapcache::client
