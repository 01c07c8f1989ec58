#include "load/prefix_tracker.h"

namespace leapcache::load {

int64_t PrefixTracker::ObserveAndFindBranch(std::span<const client::BlockHash> chain) {
  absl::MutexLock lock(&mu_);
  // Chains are prefix-closed (a hash fixes its whole prefix), so the seen part is a prefix.
  int64_t deepest = -1;
  while (deepest + 1 < static_cast<int64_t>(chain.size()) && seen_.contains(chain[deepest + 1])) {
    ++deepest;
  }
  for (size_t i = deepest + 1; i < chain.size(); ++i) seen_.insert(chain[i]);
  return deepest;
}

void PrefixTracker::Clear() {
  absl::MutexLock lock(&mu_);
  seen_.clear();
}

}  // namespace leapcache::load
