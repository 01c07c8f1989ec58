#include "service/core/residency_table.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "service/core/head_range.h"
#include "base/lock.h"
#include "base/status_macros.h"

namespace leapcache::core {

size_t PagesFor(size_t units, size_t slot_bytes, size_t page_bytes) {
  const size_t per_page = page_bytes / slot_bytes;
  return (units + per_page - 1) / per_page;
}

ResidencyTable::ResidencyTable(std::vector<std::unique_ptr<MemoryTier>> tiers,
                               const EvictionOptions& options, StoreCounters* counters,
                               const TenantQuota& quota)
    : tiers_(std::move(tiers)), options_(options), counters_(counters), quota_(quota) {
  LC_CHECK(!tiers_.empty() && tiers_.size() <= kMaxTiers, "1..4 memory tiers");
  base::WriterLock lock(&mu_);
  for (size_t i = 0; i < tiers_.size(); ++i) {
    LC_CHECK(tiers_[i] != nullptr, "null memory tier");
    policies_.push_back(options_.policy == EvictionPolicyKind::kLru
                            ? MakeLruPolicy()
                            : MakeStateAwarePolicy(options_.half_life_accesses));
  }
}

size_t ResidencyTable::min_page_bytes() const {
  size_t m = tiers_[0]->page_bytes();
  for (const auto& t : tiers_) m = std::min(m, t->page_bytes());
  return m;
}

size_t ResidencyTable::FreePages(int tier) const {
  return tiers_[tier]->capacity_pages() - tiers_[tier]->used_pages();
}

Placement ResidencyTable::Layout(int tier, const NamespaceInfo& ns, size_t units) const {
  Placement p;
  p.tier = tier;
  p.units = units;
  p.unit_bytes = ns.unit_bytes;
  p.slot_bytes = ns.slot_bytes;
  p.units_per_page = tiers_[tier]->page_bytes() / ns.slot_bytes;
  return p;
}

ResidencyTable::Resident* ResidencyTable::FindLive(uint64_t id) const {
  auto it = residents_.find(id);
  return it == residents_.end() || it->second->doomed ? nullptr : it->second.get();
}

bool ResidencyTable::Evictable(const Resident& r) const {
  return !r.doomed && r.leases == 0 && r.pins == 0 && r.busy == 0;
}

void ResidencyTable::Account(int sign, const NamespaceInfo& ns, const Placement& p) {
  Usage& u = usage_[{p.tier, ns.format_label}];
  const auto apply = [sign](uint64_t& field, uint64_t amount) {
    field = sign > 0 ? field + amount : field - amount;
  };
  apply(u.blobs, p.units);
  apply(u.physical, p.pages.size() * tiers_[p.tier]->page_bytes());
  apply(u.stored, p.units * p.unit_bytes);
  apply(u.fp32, p.units * ns.fp32_bytes_per_blob);
  apply(tenants_[ns.spec.tenant].bytes, PlacementBytes(p));
}

uint64_t ResidencyTable::EntryBytes(const Resident& r) const {
  uint64_t bytes = 0;
  for (int t = 0; t < num_tiers(); ++t) bytes += r.pages[t] * tiers_[t]->page_bytes();
  return bytes;
}

void ResidencyTable::UnchargePin(Resident* r) {
  tenants_[r->ns->spec.tenant].pinned_bytes -= r->pinned_charge;
  r->pinned_charge = 0;
}

absl::Status ResidencyTable::MakeTenantRoom(const std::string& tenant, uint64_t need,
                                            std::vector<EvictedEntry>* evicted) {
  TenantUsage& usage = tenants_[tenant];
  if (usage.bytes + need <= quota_.bytes) return absl::OkStatus();
  // Plan first, drop second, as MakeRoom does: the coldest of the tenant's own first.
  std::vector<uint64_t> victims;
  uint64_t freed = 0;
  absl::flat_hash_set<uint64_t> picked;
  for (int t = num_tiers() - 1; t >= 0 && usage.bytes - freed + need > quota_.bytes; --t) {
    policies_[t]->ForEachVictim([&](uint64_t id) {
      mu_.AssertHeld();  // for the thread-safety analysis: lambdas do not inherit locks
      const Resident& r = *residents_.at(id);
      if (r.ns->spec.tenant != tenant || !Evictable(r) || !picked.insert(id).second) return true;
      victims.push_back(id);
      freed += EntryBytes(r);
      return usage.bytes - freed + need > quota_.bytes;
    });
  }
  if (usage.bytes - freed + need > quota_.bytes) {
    ++usage.refused_bytes;
    return absl::ResourceExhaustedError(absl::StrCat(
        "tenant ", tenant, ": ", need, " bytes needed, ", usage.bytes, " of its quota of ",
        quota_.bytes, " (tenant_max_bytes) held and ", freed,
        " of them evictable (the rest is leased, pinned or reserved by its puts in flight)"));
  }
  for (uint64_t id : victims) Drop(residents_.at(id).get(), evicted);
  return absl::OkStatus();
}

void ResidencyTable::Touch(Resident* r) {
  r->last_tick = ++tick_;
  for (int t = 0; t < num_tiers(); ++t) {
    if (policies_[t]->Contains(r->id)) policies_[t]->Touch(r->id, r->last_tick);
  }
}

void ResidencyTable::SyncPolicies(Resident* r) {
  for (int t = 0; t < num_tiers(); ++t) {
    const bool want = !r->doomed && r->pages[t] > 0;
    const bool has = policies_[t]->Contains(r->id);
    if (want && !has) policies_[t]->Insert(r->id, r->value, r->last_tick);
    if (!want && has) policies_[t]->Remove(r->id);
  }
}

void ResidencyTable::FreeParts(Resident* r) {
  for (Part& part : r->parts) {
    Account(-1, *r->ns, part.placement);
    tiers_[part.placement.tier]->Free(part.placement.pages);
  }
  r->parts.clear();
  r->pages.fill(0);
}

void ResidencyTable::Drop(Resident* r, std::vector<EvictedEntry>* evicted) {
  LC_CHECK(r->leases == 0 && !r->doomed, "dropping a leased or deleted entry");
  FreeParts(r);
  r->doomed = true;
  SyncPolicies(r);  // removes it from every policy
  --live_;
  if (r->pins > 0) --pinned_;
  UnchargePin(r);
  evicted->push_back(EvictedEntry{r->key, r->id});
  counters_->evictions.Add();
  residents_.erase(r->id);
}

bool ResidencyTable::PlanVictims(int tier, size_t pages, std::vector<uint64_t>* victims) const {
  size_t available = FreePages(tier);
  if (available >= pages) return true;
  policies_[tier]->ForEachVictim([&](uint64_t id) {
    mu_.AssertReaderHeld();  // for the thread-safety analysis: lambdas do not inherit locks
    const Resident& r = *residents_.at(id);
    if (!Evictable(r)) return true;
    victims->push_back(id);
    available += r.pages[tier];
    return available < pages;
  });
  return available >= pages;
}

absl::Status ResidencyTable::MakeRoom(int tier, size_t pages, std::vector<EvictedEntry>* evicted) {
  const MemoryTier& t = *tiers_[tier];
  const size_t free = FreePages(tier);
  if (free >= pages) return absl::OkStatus();
  if (pages > t.capacity_pages()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tier ", t.name(), ": ", pages, " pages needed, the tier has ", t.capacity_pages()));
  }
  // Plan first, evict second: if the evictable entries cannot free enough, nothing is touched.
  std::vector<uint64_t> victims;
  if (!PlanVictims(tier, pages, &victims)) {
    size_t evictable = 0;
    for (uint64_t id : victims) evictable += residents_.at(id)->pages[tier];
    return absl::ResourceExhaustedError(absl::StrCat(
        "tier ", t.name(), ": ", pages, " pages needed, ", free, " free and ", evictable,
        " evictable (the rest is leased, pinned or reserved by puts in flight)"));
  }
  // Busy victims cannot be picked again by the room-making a spill does in the next tier.
  for (uint64_t id : victims) ++residents_.at(id)->busy;
  for (uint64_t id : victims) {
    EvictFromTier(residents_.at(id).get(), tier, evicted);
    if (auto it = residents_.find(id); it != residents_.end()) --it->second->busy;
  }
  if (FreePages(tier) < pages) {  // every victim freed its pages in `tier`: cannot happen
    return absl::InternalError(absl::StrCat("tier ", t.name(), ": eviction freed too little"));
  }
  return absl::OkStatus();
}

void ResidencyTable::EvictFromTier(Resident* r, int tier, std::vector<EvictedEntry>* evicted) {
  if (options_.spill && tier + 1 < num_tiers() && MoveParts(r, tier, tier + 1, evicted)) {
    counters_->spills.Add();
    return;
  }
  Drop(r, evicted);
}

bool ResidencyTable::MoveParts(Resident* r, int from, int to, std::vector<EvictedEntry>* evicted) {
  std::vector<Part*> moving;
  size_t need = 0;
  for (Part& part : r->parts) {
    if (part.placement.tier != from) continue;
    moving.push_back(&part);
    need += PagesFor(part.placement.units, part.placement.slot_bytes, tiers_[to]->page_bytes());
  }
  if (moving.empty()) return true;
  if (!MakeRoom(to, need, evicted).ok()) return false;
  std::vector<PageId> pages;
  if (!tiers_[to]->Allocate(need, &pages).ok()) return false;

  std::vector<Placement> moved;
  size_t next = 0;
  for (Part* part : moving) {
    const Placement& old = part->placement;
    Placement p = Layout(to, *r->ns, old.units);
    const size_t n = PagesFor(old.units, old.slot_bytes, tiers_[to]->page_bytes());
    p.pages.assign(pages.begin() + next, pages.begin() + next + n);
    next += n;
    for (size_t b = 0; b < old.units; ++b) {
      absl::Status st = CopyBetweenTiers(*tiers_[from], old.PageOf(b), old.OffsetOf(b), *tiers_[to],
                                         p.PageOf(b), p.OffsetOf(b), old.unit_bytes);
      if (!st.ok()) {
        tiers_[to]->Free(pages);
        return false;
      }
    }
    moved.push_back(std::move(p));
  }
  for (size_t i = 0; i < moving.size(); ++i) {
    Placement& old = moving[i]->placement;
    Account(-1, *r->ns, old);
    tiers_[from]->Free(old.pages);
    r->pages[from] -= old.pages.size();
    old = std::move(moved[i]);
    Account(+1, *r->ns, old);
    r->pages[to] += old.pages.size();
  }
  SyncPolicies(r);
  return true;
}

size_t ResidencyTable::PagesToMove(const Resident& r, int from, int to) const {
  size_t need = 0;
  for (const Part& part : r.parts) {
    if (part.placement.tier == from) {
      need += PagesFor(part.placement.units, part.placement.slot_bytes, tiers_[to]->page_bytes());
    }
  }
  return need;
}

bool ResidencyTable::Promote(Resident* r, std::vector<EvictedEntry>* evicted) {
  ++r->busy;  // the room-making below must not pick the entry being promoted
  bool promoted = false;
  for (int t = 1; t < num_tiers(); ++t) {
    if (r->pages[t] == 0) continue;
    const size_t need = PagesToMove(*r, t, 0);
    if (FreePages(0) >= need) {
      promoted |= MoveParts(r, t, 0, evicted);
      continue;
    }
    std::vector<uint64_t> victims;
    if (!PlanVictims(0, need, &victims)) continue;  // tier 0 cannot make room: serve from t
    // A swap: stage the entry's bytes and release its pages in tier t first, so that the
    // victims spilling out of tier 0 can take them instead of pushing something out of t.
    std::vector<Part*> moving;
    std::vector<std::vector<uint8_t>> staged;
    bool ok = true;
    for (Part& part : r->parts) {
      if (part.placement.tier != t) continue;
      const Placement& p = part.placement;
      std::vector<uint8_t> bytes(p.units * p.unit_bytes);
      for (size_t b = 0; ok && b < p.units; ++b) {
        ok = tiers_[t]
                 ->CopyOut(p.PageOf(b), p.OffsetOf(b),
                           std::span<uint8_t>(bytes).subspan(b * p.unit_bytes, p.unit_bytes))
                 .ok();
      }
      moving.push_back(&part);
      staged.push_back(std::move(bytes));
    }
    if (!ok) continue;  // nothing changed yet
    for (Part* part : moving) {
      Account(-1, *r->ns, part->placement);
      tiers_[t]->Free(part->placement.pages);
      r->pages[t] -= part->placement.pages.size();
      part->placement.pages.clear();
    }
    SyncPolicies(r);
    // Feasible: the plan above still holds, nothing in tier 0 changed.
    std::vector<PageId> pages;
    absl::Status st = MakeRoom(0, need, evicted);
    if (st.ok()) st = tiers_[0]->Allocate(need, &pages);
    size_t next = 0;
    for (size_t i = 0; st.ok() && i < moving.size(); ++i) {
      Placement p = Layout(0, *r->ns, moving[i]->placement.units);
      const size_t n = PagesFor(p.units, p.slot_bytes, tiers_[0]->page_bytes());
      p.pages.assign(pages.begin() + next, pages.begin() + next + n);
      next += n;
      for (size_t b = 0; st.ok() && b < p.units; ++b) {
        st = tiers_[0]->CopyIn(
            p.PageOf(b), p.OffsetOf(b),
            std::span<const uint8_t>(staged[i]).subspan(b * p.unit_bytes, p.unit_bytes));
      }
      moving[i]->placement = std::move(p);
      Account(+1, *r->ns, moving[i]->placement);
      r->pages[0] += n;
    }
    if (!st.ok()) {
      // The old copy is gone and the new one is incomplete: the checkpoint is lost. Parts that
      // got no pages hold none, so dropping frees exactly what was allocated.
      if (next < pages.size()) {
        tiers_[0]->Free(std::span<const PageId>(pages).subspan(next));
      }
      for (Part* part : moving) {
        if (part->placement.tier != 0) part->placement.units = 0;
      }
      r->busy = 0;
      Drop(r, evicted);
      return false;
    }
    SyncPolicies(r);
    promoted = true;
  }
  --r->busy;
  if (promoted) counters_->promotions.Add();
  return true;
}

absl::StatusOr<Placement> ResidencyTable::Reserve(const NamespaceInfo& ns, size_t units,
                                                  std::vector<EvictedEntry>* evicted) {
  base::WriterLock lock(&mu_);
  if (quota_.bytes > 0) {
    // The most any tier's pages for these units can take (tiers may differ in page size).
    uint64_t need = 0;
    for (int t = 0; t < num_tiers(); ++t) {
      need = std::max<uint64_t>(
          need, PagesFor(units, ns.slot_bytes, tiers_[t]->page_bytes()) * tiers_[t]->page_bytes());
    }
    LC_RETURN_IF_ERROR(MakeTenantRoom(ns.spec.tenant, need, evicted));
  }
  std::string why;
  for (int t = 0; t < num_tiers(); ++t) {
    const size_t need = PagesFor(units, ns.slot_bytes, tiers_[t]->page_bytes());
    absl::Status st = MakeRoom(t, need, evicted);
    if (st.ok()) {
      Placement p = Layout(t, ns, units);
      st = tiers_[t]->Allocate(need, &p.pages);
      if (st.ok()) {
        reserved_pages_[t] += need;
        tenants_[ns.spec.tenant].bytes += PlacementBytes(p);
        return p;
      }
    }
    absl::StrAppend(&why, why.empty() ? "" : "; ", st.message());
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("no tier can hold ", units, " units of ", ns.unit_bytes, " bytes: ", why));
}

void ResidencyTable::ReleaseReservation(const NamespaceInfo& ns, const Placement& placement) {
  base::WriterLock lock(&mu_);
  tenants_[ns.spec.tenant].bytes -= PlacementBytes(placement);
  tiers_[placement.tier]->Free(placement.pages);
  reserved_pages_[placement.tier] -= placement.pages.size();
}

uint64_t ResidencyTable::AddPart(uint64_t entry_id, const CheckpointKey& key,
                                 const Position& position, const NamespaceInfo& ns, HeadRange heads,
                                 Placement placement, std::vector<uint32_t> unit_crcs) {
  base::WriterLock lock(&mu_);
  Resident* r = entry_id != 0 ? FindLive(entry_id) : nullptr;
  if (r == nullptr) {
    auto fresh = std::make_unique<Resident>();
    fresh->id = next_id_++;
    fresh->key = key;
    fresh->position = position;
    fresh->ns = &ns;
    fresh->value = static_cast<double>(position.tokens) * ns.flops_per_token / ns.CheckpointBytes();
    r = fresh.get();
    residents_.emplace(r->id, std::move(fresh));
    ++live_;
  }
  const int tier = placement.tier;
  reserved_pages_[tier] -= placement.pages.size();
  r->pages[tier] += placement.pages.size();
  tenants_[ns.spec.tenant].bytes -= PlacementBytes(placement);  // Account counts it again
  Account(+1, ns, placement);
  if (r->pins > 0) {  // a pinned checkpoint's new heads are pinned too
    r->pinned_charge += PlacementBytes(placement);
    tenants_[ns.spec.tenant].pinned_bytes += PlacementBytes(placement);
  }
  r->parts.push_back(Part{heads, std::move(placement), std::move(unit_crcs)});
  Touch(r);  // a commit is an access
  SyncPolicies(r);
  return r->id;
}

bool ResidencyTable::IsLive(uint64_t entry_id) const {
  base::ReaderLock lock(&mu_);
  return FindLive(entry_id) != nullptr;
}

absl::StatusOr<std::vector<UnitLocation>> ResidencyTable::AcquireLease(
    uint64_t entry_id, HeadRange heads, std::vector<EvictedEntry>* evicted) {
  base::WriterLock lock(&mu_);
  Resident* r = FindLive(entry_id);
  if (r == nullptr) return absl::NotFoundError("checkpoint was evicted or deleted");
  HeadRangeSet held;
  for (const Part& part : r->parts) held.Add(part.heads);
  if (!held.Covers(heads)) {
    return absl::NotFoundError(absl::StrCat("checkpoint holds heads ", held.ToString(), ", not ",
                                            HeadRangeToString(heads)));
  }
  if (options_.promote_on_hit && r->leases == 0) {
    bool slower = false;
    for (int t = 1; t < num_tiers(); ++t) slower |= r->pages[t] > 0;
    if (slower && !Promote(r, evicted)) {
      return absl::DataLossError("checkpoint was lost while moving between tiers");
    }
  }
  ++r->leases;
  ++leases_;
  Touch(r);

  const int layers = r->ns->spec.model.linear_layers;
  std::vector<UnitLocation> units;
  units.reserve(static_cast<size_t>(layers) * heads.size());
  for (int layer = 0; layer < layers; ++layer) {
    for (int h = heads.begin; h < heads.end; ++h) {
      const Part* part = nullptr;
      for (const Part& p : r->parts) {
        if (p.heads.Contains(h)) part = &p;
      }
      const Placement& pl = part->placement;
      const size_t i = static_cast<size_t>(layer) * part->heads.size() + (h - part->heads.begin);
      UnitLocation loc;
      loc.tier = tiers_[pl.tier].get();
      loc.page = pl.PageOf(i);
      loc.offset = pl.OffsetOf(i);
      loc.crc32c = part->unit_crcs[i];
      if (const uint8_t* base = loc.tier->HostAddress(loc.page); base != nullptr) {
        loc.host = base + loc.offset;
      }
      units.push_back(loc);
    }
  }
  return units;
}

void ResidencyTable::ReleaseLease(uint64_t entry_id) {
  base::WriterLock lock(&mu_);
  auto it = residents_.find(entry_id);
  LC_CHECK(it != residents_.end() && it->second->leases > 0, "release of a lease not held");
  Resident* r = it->second.get();
  --r->leases;
  --leases_;
  if (r->doomed && r->leases == 0) {
    FreeParts(r);
    residents_.erase(it);
  }
}

bool ResidencyTable::Remove(uint64_t entry_id) {
  base::WriterLock lock(&mu_);
  Resident* r = FindLive(entry_id);
  if (r == nullptr) return false;
  r->doomed = true;
  SyncPolicies(r);
  --live_;
  if (r->pins > 0) --pinned_;
  UnchargePin(r);
  if (r->leases == 0) {
    FreeParts(r);
    residents_.erase(entry_id);
  }
  return true;
}

absl::Status ResidencyTable::Pin(uint64_t entry_id) {
  base::WriterLock lock(&mu_);
  Resident* r = FindLive(entry_id);
  if (r == nullptr) return absl::NotFoundError("checkpoint was evicted or deleted");
  if (r->pins == 0) {
    TenantUsage& usage = tenants_[r->ns->spec.tenant];
    const uint64_t bytes = EntryBytes(*r);
    if (quota_.pinned_bytes > 0 && usage.pinned_bytes + bytes > quota_.pinned_bytes) {
      ++usage.refused_pinned_bytes;
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant ", r->ns->spec.tenant, ": pinning ", bytes, " bytes would pass its quota of ",
          quota_.pinned_bytes, " pinned bytes (tenant_max_pinned_bytes); ", usage.pinned_bytes,
          " are pinned"));
    }
    usage.pinned_bytes += bytes;
    r->pinned_charge = bytes;
    ++pinned_;
  }
  ++r->pins;
  return absl::OkStatus();
}

absl::Status ResidencyTable::Unpin(uint64_t entry_id) {
  base::WriterLock lock(&mu_);
  Resident* r = FindLive(entry_id);
  if (r == nullptr) return absl::NotFoundError("checkpoint was evicted or deleted");
  if (r->pins == 0) return absl::FailedPreconditionError("checkpoint is not pinned");
  if (--r->pins == 0) {
    --pinned_;
    UnchargePin(r);
  }
  return absl::OkStatus();
}

std::vector<int> ResidencyTable::TiersOf(uint64_t entry_id) const {
  base::ReaderLock lock(&mu_);
  std::vector<int> tiers;
  if (const Resident* r = FindLive(entry_id); r != nullptr) {
    for (int t = 0; t < num_tiers(); ++t) {
      if (r->pages[t] > 0) tiers.push_back(t);
    }
  }
  return tiers;
}

void ResidencyTable::FillStats(StoreStats* out) const {
  base::ReaderLock lock(&mu_);
  out->tiers.clear();
  for (int t = 0; t < num_tiers(); ++t) {
    const MemoryTier& tier = *tiers_[t];
    TierStats s;
    s.name = tier.name();
    s.page_bytes = tier.page_bytes();
    s.capacity_bytes = tier.capacity_bytes();
    s.used_bytes = tier.used_bytes();
    s.reserved_bytes = reserved_pages_[t] * tier.page_bytes();
    s.checkpoints = policies_[t]->size();
    out->tiers.push_back(std::move(s));
  }
  out->memory.clear();
  for (const auto& [key, u] : usage_) {
    if (u.blobs == 0) continue;
    FormatMemoryStats m;
    m.tier = tiers_[key.first]->name();
    m.format = key.second;
    m.blobs = u.blobs;
    m.physical_bytes = u.physical;
    m.stored_bytes = u.stored;
    m.fp32_equivalent_bytes = u.fp32;
    out->memory.push_back(std::move(m));
  }
  out->checkpoints = live_;
  out->leases = leases_;
  out->pinned = pinned_;
}

void ResidencyTable::FillTenants(std::map<std::string, TenantStats>* tenants) const {
  base::ReaderLock lock(&mu_);
  for (const auto& [name, usage] : tenants_) {
    TenantStats& t = (*tenants)[name];
    t.bytes += usage.bytes;
    t.pinned_bytes += usage.pinned_bytes;
    t.refused_bytes += usage.refused_bytes;
    t.refused_pinned_bytes += usage.refused_pinned_bytes;
  }
}

}  // namespace leapcache::core
