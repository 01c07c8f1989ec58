// Block ids (a trace's integers, a generator's counters) to the service's 32-byte block hashes.
//
//   h_0's parent = 32 zero bytes;  h_i = SHA-256(h_{i-1} || id_i as little-endian u64)
//
// computed by the client's ChainHashes over the ids as (low, high) u32 pairs with two "tokens"
// per block, so the load tester hashes exactly as an engine using the client library does. The
// i-th hash depends on the whole prefix of ids, as the service's chains must: two requests share
// a hash only where they share every block before it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "leapcache/client.h"

namespace leapcache::load {

// INVALID_ARGUMENT for more than the service's longest chain (65,536 blocks).
absl::StatusOr<std::vector<client::BlockHash>> ChainFromBlockIds(std::span<const uint64_t> ids);

// The first 8 bytes of a hash as a little-endian integer: a per-checkpoint seed.
uint64_t HashSeed(const client::BlockHash& hash);

}  // namespace leapcache::load
