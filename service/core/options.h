// Options of the cache core, every default with its reason. Memory budgets are not here: each
// tier is built from its own budget (host_tier.h) and handed to CheckpointStore::Create.
#pragma once

#include <cstddef>

#include "absl/time/time.h"

namespace leapcache::core {

enum class EvictionPolicyKind {
  kLru,         // baseline
  kStateAware,  // compute saved per byte with recency decay (eviction_policy.h)
};

struct EvictionOptions {
  EvictionPolicyKind policy = EvictionPolicyKind::kStateAware;
  // State-aware only: an untouched entry's worth halves every this many store-wide accesses.
  // 4096 lets a checkpoint 2x deeper outlive a shallower one by 4096 accesses, a few seconds at
  // the request rates of one engine fleet; smaller values approach LRU, larger ones pure value.
  double half_life_accesses = 4096;
  // Evicting from tier i moves the checkpoint to tier i + 1 (when there is one and it fits)
  // instead of dropping it: a spilled state is still a hit, one copy away.
  bool spill = true;
  // A hit in a slower tier moves the checkpoint to tier 0 (evicting there as needed), unless
  // it is leased. The read is served from wherever the bytes are if promotion cannot happen.
  bool promote_on_hit = true;
};

// What one tenant (NamespaceSpec::tenant) may hold, so that tenants sharing a server can neither
// evict each other's checkpoints by filling the memory, nor lock each other out with pins,
// reservations or namespaces. 0: no limit beyond the store's own. A put that would take its
// tenant past `bytes` first evicts that tenant's own checkpoints (coldest tier first, in the
// tier's eviction order), never another's; what cannot be made to fit, and any other quota
// passed, is RESOURCE_EXHAUSTED naming the quota, with nothing changed.
struct TenantQuota {
  // Memory held by the tenant's checkpoints and reservations in every tier (whole pages).
  uint64_t bytes = 0;
  // Of which in pinned checkpoints (a checkpoint counts whole while pinned at least once).
  uint64_t pinned_bytes = 0;
  // Reserved, uncommitted puts.
  size_t pending_puts = 0;
  // Registered namespaces.
  size_t namespaces = 0;
};

struct StoreOptions {
  EvictionOptions eviction;
  // Time a put may stay uncommitted when the caller does not say. Long enough for a few
  // hundred MiB over a slow link, short enough that a crashed writer's memory comes back soon
  // (Mooncake uses 30 s for its put lease).
  absl::Duration default_put_ttl = absl::Seconds(30);
  // Upper bound on a requested put TTL: a reservation cannot pin memory indefinitely.
  absl::Duration max_put_ttl = absl::Minutes(10);
  // How often the background reaper reclaims expired puts. ZeroDuration() runs no thread (tests
  // call ReapExpiredPuts themselves); Reserve also reaps before reporting RESOURCE_EXHAUSTED.
  absl::Duration reaper_interval = absl::Seconds(1);
  // In-flight puts at once. Each holds memory until commit or expiry; the bound keeps a flood
  // of reservations from turning into a flood of allocations.
  size_t max_pending_puts = 4096;
  // Every tenant's limits (the same for each).
  TenantQuota tenant_quota;
};

}  // namespace leapcache::core
