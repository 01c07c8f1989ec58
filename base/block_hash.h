// Prefix block hashes: the keys of the cache, and part of the wire contract (client and service
// must compute the same chain).
//
//   h_0's parent = 32 zero bytes
//   h_i = SHA-256(h_{i-1} || tokens of block i, each a little-endian u32 || extras)
//
// `extras` are opaque salt bytes the engine mixes into every block (cache salt, LoRA id, ...);
// two chains that differ in any token, in the block size or in the extras share no hash. Only
// full blocks are hashed: a checkpoint sits at a block boundary. The same bytes in, the same
// hash out, on every host (the token encoding is fixed little-endian). Engines may also bring
// their own 32-byte hashes; the store only requires them to be collision-resistant.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace leapcache::base {

// A prefix block hash. Compared in full, all 32 bytes, everywhere.
inline constexpr size_t kBlockHashBytes = 32;
using BlockHash = std::array<uint8_t, kBlockHashBytes>;

// Longest chain a Lookup accepts, and deepest block a checkpoint may sit at: 1M tokens at
// 16-token blocks (vLLM's smallest default) is 65,536 blocks. Bounds the work of one Lookup.
inline constexpr int kMaxChainBlocks = 1 << 16;
// Largest block an engine may declare, in tokens. Engines use 16..1024; 65,536 leaves room and
// keeps tokens = blocks x block_tokens within 2^32.
inline constexpr int64_t kMaxBlockTokens = 1 << 16;

// Salt bytes per block are bounded so that a request cannot make hashing arbitrarily slow.
inline constexpr size_t kMaxExtrasBytes = 4096;

// The parent of the first block.
inline constexpr BlockHash kRootParentHash{};

// One link of the chain. REQUIRES: extras.size() <= kMaxExtrasBytes.
BlockHash HashBlock(const BlockHash& parent, std::span<const uint32_t> block_tokens,
                    std::span<const uint8_t> extras = {});

// The hashes of every full block of `tokens` (a trailing partial block is ignored).
// INVALID_ARGUMENT if block_tokens is outside [1, kMaxBlockTokens], the chain would be longer
// than kMaxChainBlocks, or extras is longer than kMaxExtrasBytes.
absl::StatusOr<std::vector<BlockHash>> ChainHashes(std::span<const uint32_t> tokens,
                                                   int64_t block_tokens,
                                                   std::span<const uint8_t> extras = {});

// 64 lowercase hex digits.
std::string HashToHex(const BlockHash& hash);

}  // namespace leapcache::base
