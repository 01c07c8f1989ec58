// Eviction order of one memory tier: which resident checkpoint goes first.
//
// Two policies, both a total order on (priority, last access tick, id):
//
//  LRU:          priority = last access tick. Oldest access first.
//
//  State-aware:  priority = log2(value) + tick / H, where
//                  value = prefix tokens x model FLOPs per token / checkpoint bytes
//                the compute a hit saves per byte it occupies (Marconi, MLSys'25: for hybrid
//                models a state's size is fixed, so deep prefixes and compact formats are worth
//                more per byte), and H = half-life in accesses. This ranks entries exactly as
//                value x 2^-(now - tick) / H would at any instant (the common decay factor
//                cancels), so keys never need recomputing: an entry's worth halves every H
//                store-wide accesses it goes untouched. Lowest priority is evicted first; the
//                tick and then the id (insertion order) break ties, so equal-value entries fall
//                back to LRU.
//
// Ticks are a logical clock (one per access store-wide) rather than time, which makes orders
// reproducible in tests and independent of request rate. Not thread-safe: the store calls a
// policy under its memory lock.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"

namespace leapcache::core {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // REQUIRES: !Contains(id); value > 0 (ignored by LRU).
  virtual void Insert(uint64_t id, double value, uint64_t tick) = 0;
  // Records an access. REQUIRES: Contains(id).
  virtual void Touch(uint64_t id, uint64_t tick) = 0;
  // No-op if absent.
  virtual void Remove(uint64_t id) = 0;
  virtual bool Contains(uint64_t id) const = 0;
  virtual size_t size() const = 0;
  // Visits ids from the first to evict to the last, while `visit` returns true.
  // REQUIRES: `visit` does not modify the policy.
  virtual void ForEachVictim(absl::FunctionRef<bool(uint64_t id)> visit) const = 0;
};

std::unique_ptr<EvictionPolicy> MakeLruPolicy();
// REQUIRES: half_life_accesses > 0.
std::unique_ptr<EvictionPolicy> MakeStateAwarePolicy(double half_life_accesses);

// The state-aware priority above (exposed for tests and documentation).
double StateAwarePriority(double value, uint64_t tick, double half_life_accesses);

}  // namespace leapcache::core
