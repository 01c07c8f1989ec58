// What prompts the simulated engines have seen: the set of block hashes of every earlier chain.
// An engine can find its branch point with it (the deepest block an earlier prompt reached,
// where this prompt's radix-tree path leaves the tree), as SGLang-style radix caches do, without
// asking the service. Thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "leapcache/client.h"

namespace leapcache::load {

class PrefixTracker {
 public:
  // The deepest index of `chain` seen in an earlier Observe (-1: none), then records `chain`.
  int64_t ObserveAndFindBranch(std::span<const client::BlockHash> chain);
  void Clear();

 private:
  struct HashOfHash {
    size_t operator()(const client::BlockHash& h) const {
      size_t v = 0;
      for (int i = 0; i < 8; ++i) v = (v << 8) | h[i];
      return v;
    }
  };
  absl::Mutex mu_;
  absl::flat_hash_set<client::BlockHash, HashOfHash> seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::load
