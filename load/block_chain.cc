#include "load/block_chain.h"

namespace leapcache::load {

absl::StatusOr<std::vector<client::BlockHash>> ChainFromBlockIds(std::span<const uint64_t> ids) {
  std::vector<uint32_t> words;
  words.reserve(2 * ids.size());
  for (uint64_t id : ids) {
    words.push_back(static_cast<uint32_t>(id));
    words.push_back(static_cast<uint32_t>(id >> 32));
  }
  return client::ChainHashes(words, /*block_tokens=*/2);
}

uint64_t HashSeed(const client::BlockHash& hash) {
  uint64_t seed = 0;
  for (int i = 7; i >= 0; --i) seed = (seed << 8) | hash[i];
  return seed;
}

}  // namespace leapcache::load
