// Value types of the cache core's API: identities (namespace, block hash, put id), checkpoint
// positions and head ranges. Plain data; validation lives with the code that accepts them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "base/block_hash.h"

namespace leapcache::core {

// Namespace ids are derived from the namespace's tag (namespace_registry.h); 0 is never valid.
using NamespaceId = uint32_t;
// Puts are numbered from 1 in reservation order; 0 is never a valid id.
using PutId = uint64_t;

// A prefix block hash and the chain's bounds (base/block_hash.h: they are part of the wire
// contract).
using base::BlockHash;
using base::kBlockHashBytes;
using base::kMaxBlockTokens;
using base::kMaxChainBlocks;

// Where a checkpoint sits in its prompt: after `blocks` full blocks holding `tokens` tokens.
// A state hit is exact-position only: the state after block i serves a resume at block i.
struct Position {
  int64_t tokens = 0;
  int64_t blocks = 0;
  friend bool operator==(const Position&, const Position&) = default;
};

// Heads [begin, end) of every linear layer. Engines with tensor-parallel degree T put and get
// total_heads / T heads per rank, so ranks of different degrees share one checkpoint.
struct HeadRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool Contains(int head) const { return head >= begin && head < end; }
  bool Overlaps(HeadRange o) const { return begin < o.end && o.begin < end; }
  friend bool operator==(const HeadRange&, const HeadRange&) = default;
};

// Identity of a checkpoint: a block hash means nothing outside its namespace.
struct CheckpointKey {
  NamespaceId ns = 0;
  BlockHash hash{};
  friend bool operator==(const CheckpointKey&, const CheckpointKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const CheckpointKey& k) {
    // absl::Hash is seeded per process, so engine-chosen hashes cannot flood one bucket.
    return H::combine(std::move(h), k.ns, k.hash);
  }
};

}  // namespace leapcache::core
