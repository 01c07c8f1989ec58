#include "service/core/checkpoint_store.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "service/core/head_range.h"
#include "base/lock.h"
#include "base/status_macros.h"

namespace leapcache::core {
namespace {

absl::Status CheckOptions(const StoreOptions& o, size_t tiers) {
  if (tiers == 0 || tiers > ResidencyTable::kMaxTiers) {
    return absl::InvalidArgumentError(
        absl::StrCat("1..", ResidencyTable::kMaxTiers, " memory tiers required (got ", tiers, ")"));
  }
  if (o.default_put_ttl <= absl::ZeroDuration() || o.max_put_ttl < o.default_put_ttl) {
    return absl::InvalidArgumentError("need 0 < default_put_ttl <= max_put_ttl");
  }
  if (o.reaper_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("reaper_interval must be >= 0");
  }
  if (o.max_pending_puts == 0) return absl::InvalidArgumentError("max_pending_puts must be > 0");
  if (!(o.eviction.half_life_accesses > 0)) {
    return absl::InvalidArgumentError("eviction.half_life_accesses must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Create(
    const StoreOptions& options, std::vector<std::unique_ptr<MemoryTier>> tiers,
    const Clock* clock) {
  LC_RETURN_IF_ERROR(CheckOptions(options, tiers.size()));
  for (const auto& t : tiers) {
    if (t == nullptr) return absl::InvalidArgumentError("null memory tier");
  }
  return std::unique_ptr<CheckpointStore>(
      new CheckpointStore(options, std::move(tiers), clock != nullptr ? *clock : MonotonicClock()));
}

CheckpointStore::CheckpointStore(const StoreOptions& options,
                                 std::vector<std::unique_ptr<MemoryTier>> tiers, const Clock& clock)
    : options_(options),
      clock_(clock),
      residency_(std::move(tiers), options.eviction, &counters_, options.tenant_quota),
      registry_(residency_.min_page_bytes(), options.tenant_quota.namespaces) {
  if (options_.reaper_interval > absl::ZeroDuration()) {
    reaper_ = std::thread([this] { ReaperLoop(); });
  }
}

CheckpointStore::~CheckpointStore() {
  stop_reaper_.Notify();
  if (reaper_.joinable()) reaper_.join();
  StoreStats s;
  residency_.FillStats(&s);
  LC_CHECK(s.leases == 0, "CheckpointStore destroyed while read leases are held");
}

void CheckpointStore::ReaperLoop() {
  while (!stop_reaper_.WaitForNotificationWithTimeout(options_.reaper_interval)) {
    ReapExpiredPuts();
  }
}

absl::StatusOr<NamespaceId> CheckpointStore::RegisterNamespace(const NamespaceSpec& spec) {
  return registry_.Register(spec);
}

absl::StatusOr<NamespaceInfo> CheckpointStore::GetNamespace(NamespaceId id) const {
  LC_ASSIGN_OR_RETURN(const NamespaceInfo* info, registry_.Find(id));
  return *info;
}

absl::Status CheckpointStore::CheckNamespaceTag(NamespaceId id, uint64_t tag) const {
  return registry_.FindTagged(id, tag).status();
}

absl::StatusOr<const NamespaceInfo*> CheckpointStore::CheckHeads(NamespaceId ns,
                                                                 HeadRange heads) const {
  LC_ASSIGN_OR_RETURN(const NamespaceInfo* info, registry_.Find(ns));
  const int total = info->spec.model.total_heads;
  if (heads.begin < 0 || heads.end > total || heads.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("head range ", HeadRangeToString(heads),
                                                   " is not a non-empty range within [0, ", total,
                                                   ")"));
  }
  return info;
}

void CheckpointStore::Unlink(const std::vector<EvictedEntry>& evicted) {
  for (const EvictedEntry& e : evicted) index_.Unlink(e.key, e.entry_id);
}

absl::StatusOr<LookupResult> CheckpointStore::Lookup(const LookupRequest& request) {
  LC_RETURN_IF_ERROR(CheckHeads(request.ns, request.heads).status());
  if (request.chain.empty() || request.chain.size() > static_cast<size_t>(kMaxChainBlocks)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chain must have 1..", kMaxChainBlocks, " block hashes (got ", request.chain.size(), ")"));
  }
  if (request.max_depth < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_depth must be >= 0 (got ", request.max_depth, ")"));
  }
  if (request.block_tokens < 1 || request.block_tokens > kMaxBlockTokens) {
    return absl::InvalidArgumentError(absl::StrCat("block_tokens must be in [1, ", kMaxBlockTokens,
                                                   "] (got ", request.block_tokens, ")"));
  }
  const int depth = request.max_depth > 0
                        ? std::min<int>(request.max_depth, static_cast<int>(request.chain.size()))
                        : static_cast<int>(request.chain.size());
  counters_.lookups.Add();
  LookupResult result;
  for (int i = depth - 1; i >= 0; --i) {
    std::optional<IndexHit> hit =
        index_.Find(CheckpointKey{request.ns, request.chain[i]}, request.heads);
    // A checkpoint found at chain index i must sit after block i + 1: anything else is a chain
    // that does not start at the prompt's first block, and its state cannot resume here.
    if (hit.has_value() && hit->position.blocks == i + 1) {
      result.hit = true;
      result.index = i;
      result.position = hit->position;
      break;
    }
  }
  const int64_t queried = static_cast<int64_t>(depth) * request.block_tokens;
  if (result.hit) {
    counters_.lookup_hits.Add();
    counters_.lookup_hit_tokens.Add(static_cast<uint64_t>(result.position.tokens));
    counters_.lookup_miss_tokens.Add(
        static_cast<uint64_t>(std::max<int64_t>(0, queried - result.position.tokens)));
  } else {
    counters_.lookup_misses.Add();
    counters_.lookup_miss_tokens.Add(static_cast<uint64_t>(queried));
  }
  return result;
}

absl::StatusOr<ReadLease> CheckpointStore::Get(NamespaceId ns, const BlockHash& hash,
                                               HeadRange heads) {
  LC_ASSIGN_OR_RETURN(const NamespaceInfo* info, CheckHeads(ns, heads));
  counters_.gets.Add();
  const CheckpointKey key{ns, hash};
  std::optional<IndexHit> hit = index_.Find(key, heads);
  if (!hit.has_value()) {
    counters_.get_misses.Add();
    return absl::NotFoundError(absl::StrCat("no committed checkpoint holds heads ",
                                            HeadRangeToString(heads), " at this hash"));
  }
  std::vector<EvictedEntry> evicted;
  absl::StatusOr<std::vector<UnitLocation>> units =
      residency_.AcquireLease(hit->entry_id, heads, &evicted);
  Unlink(evicted);
  if (!units.ok()) {
    counters_.get_misses.Add();
    return units.status();
  }
  counters_.get_hits.Add();
  counters_.bytes_out.Add(units->size() * info->unit_bytes);
  return ReadLease(&residency_, hit->entry_id, key, hit->position, heads,
                   info->spec.model.linear_layers, info->unit_bytes, std::move(units).value());
}

absl::Status CheckpointStore::Delete(NamespaceId ns, const BlockHash& hash) {
  LC_RETURN_IF_ERROR(registry_.Find(ns).status());
  std::optional<uint64_t> id = index_.Remove(CheckpointKey{ns, hash});
  if (!id.has_value() || !residency_.Remove(*id)) {
    return absl::NotFoundError("no committed checkpoint at this hash");
  }
  counters_.deletes.Add();
  return absl::OkStatus();
}

absl::Status CheckpointStore::Pin(NamespaceId ns, const BlockHash& hash) {
  LC_RETURN_IF_ERROR(registry_.Find(ns).status());
  std::optional<uint64_t> id = index_.FindEntry(CheckpointKey{ns, hash});
  if (!id.has_value()) return absl::NotFoundError("no committed checkpoint at this hash");
  return residency_.Pin(*id);
}

absl::Status CheckpointStore::Unpin(NamespaceId ns, const BlockHash& hash) {
  LC_RETURN_IF_ERROR(registry_.Find(ns).status());
  std::optional<uint64_t> id = index_.FindEntry(CheckpointKey{ns, hash});
  if (!id.has_value()) return absl::NotFoundError("no committed checkpoint at this hash");
  return residency_.Unpin(*id);
}

absl::StatusOr<std::vector<int>> CheckpointStore::ResidentTiers(NamespaceId ns,
                                                                const BlockHash& hash) const {
  LC_RETURN_IF_ERROR(registry_.Find(ns).status());
  std::optional<uint64_t> id = index_.FindEntry(CheckpointKey{ns, hash});
  std::vector<int> tiers;
  if (id.has_value()) tiers = residency_.TiersOf(*id);
  if (tiers.empty()) return absl::NotFoundError("no committed checkpoint at this hash");
  return tiers;
}

StoreStats CheckpointStore::Stats() const {
  StoreStats s;
  {
    // Outcomes are counted under the same lock that takes a put out of puts_, so the pending
    // count and the put counters read here agree (checkpoint_store_put.cc).
    base::ReaderLock lock(&puts_mu_);
    s.pending_puts = puts_.size();
    CopyCounters(counters_, &s);
  }
  residency_.FillStats(&s);
  s.namespaces = registry_.size();
  std::map<std::string, TenantStats> tenants;
  registry_.FillTenants(&tenants);
  residency_.FillTenants(&tenants);
  {
    base::ReaderLock lock(&puts_mu_);
    for (const auto& [name, puts] : tenant_puts_) {
      tenants[name].pending_puts = puts.pending;
      tenants[name].refused_pending_puts = puts.refused;
    }
  }
  for (auto& [name, t] : tenants) {
    t.tenant = name;
    s.tenants.push_back(std::move(t));
  }
  return s;
}

}  // namespace leapcache::core
