// The C API's functions that need no connection: the ABI version, the last error, what this
// build has, the format presets, block-hash chains and CRC-32C.
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "client/c_api/c_api_support.h"
#include "transport/backend.h"
#include "transport/transport.h"

using leapcache::c_api::Fail;
using leapcache::c_api::Guard;

extern "C" {

uint32_t leapcache_abi_version(void) { return LEAPCACHE_C_ABI_VERSION; }

const char* leapcache_last_error(void) { return leapcache::c_api::LastError(); }

int32_t leapcache_transport_built(int32_t transport) {
  if (transport < LEAPCACHE_TRANSPORT_KIND_INLINE || transport > LEAPCACHE_TRANSPORT_KIND_CUDA_IPC) return 0;
  return leapcache::transport::FindBackend(
             static_cast<leapcache::transport::TransportKind>(transport)) != nullptr
             ? 1
             : 0;
}

int leapcache_format_preset(int32_t codec, int32_t bits, leapcache_storage_format* out) {
  return Guard([&] {
    if (absl::Status st = leapcache::c_api::CheckNotNull(out, "out"); !st.ok()) return Fail(st);
    namespace lc = leapcache::client;
    // The codec's defaults as leapcache-cli applies them: fixed widths for the float codecs, 8
    // bits for the integer ones; the window format's p, r and smoothing from its presets.
    int32_t want = 0;
    switch (codec) {
      case LEAPCACHE_CODEC_FP32:
        want = 32;
        break;
      case LEAPCACHE_CODEC_BF16:
      case LEAPCACHE_CODEC_FP16:
        want = 16;
        break;
      case LEAPCACHE_CODEC_INT_ROW:
      case LEAPCACHE_CODEC_INT_COL:
      case LEAPCACHE_CODEC_LEAP:
        break;
      default:
        return Fail(absl::InvalidArgumentError(absl::StrCat("codec ", codec, " is unknown")));
    }
    if (bits == 0) bits = want != 0 ? want : 8;
    if (want != 0 ? bits != want : (bits != 8 && bits != 6 && bits != 4)) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("codec ", codec, " has no ", bits, "-bit variant (",
                       want != 0 ? absl::StrCat(want) : std::string("8, 6 or 4"), ")")));
    }
    leapcache_storage_format f{codec, bits, 1, 0, 0};
    if (codec == LEAPCACHE_CODEC_LEAP) f = leapcache::c_api::FromFormat(lc::StorageFormat::Leap(bits));
    *out = f;
    return 0;
  });
}

int leapcache_chain_hashes(const uint32_t* tokens, size_t n_tokens, int64_t block_tokens,
                           const uint8_t* extras, size_t extras_bytes, uint8_t* out,
                           size_t out_capacity, size_t* n_out) {
  return Guard([&] {
    if (n_out == nullptr) return Fail(absl::InvalidArgumentError("n_out is NULL"));
    if (tokens == nullptr && n_tokens > 0) return Fail(absl::InvalidArgumentError("tokens is NULL"));
    if (extras == nullptr && extras_bytes > 0) {
      return Fail(absl::InvalidArgumentError("extras is NULL"));
    }
    absl::StatusOr<std::vector<leapcache::client::BlockHash>> chain =
        leapcache::client::ChainHashes(std::span<const uint32_t>(tokens, n_tokens), block_tokens,
                                       std::span<const uint8_t>(extras, extras_bytes));
    if (!chain.ok()) return Fail(chain.status());
    if (chain->size() > out_capacity) {
      *n_out = chain->size();
      return Fail(absl::OutOfRangeError(absl::StrCat(
          "the chain has ", chain->size(), " hashes, out holds ", out_capacity)));
    }
    if (!chain->empty()) {
      if (out == nullptr) return Fail(absl::InvalidArgumentError("out is NULL"));
      std::memcpy(out, chain->data(), chain->size() * LEAPCACHE_HASH_BYTES);
    }
    *n_out = chain->size();
    return 0;
  });
}

uint32_t leapcache_crc32c(const void* bytes, size_t n) {
  if (bytes == nullptr) return 0;
  return leapcache::client::Crc32c(std::span<const uint8_t>(static_cast<const uint8_t*>(bytes), n));
}

}  // extern "C"
