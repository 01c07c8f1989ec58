// The two-phase put of CheckpointStore: Reserve, Upload, Commit, Abort and the reaper.
//
// A put's life: Reserve claims its heads in the index (pending) and its pages in the residency
// table (reserved), then it is kOpen in puts_. Upload copies into the pages with the put marked
// busy (uploads > 0), outside every lock. Commit moves it to kCommitting, validates outside every
// lock, then publishes under the shard lock (index) and the memory lock (residency) at once.
// Abort, expiry and Commit's deadline check move it to kDead and out of puts_; its pages and
// pending heads are reclaimed by whoever sees it dead with no upload running, exactly once.
// A put's outcome is counted in the same critical section that takes it out of puts_, so a
// Stats() that shows one pending put fewer also shows its outcome (its pages may still be on
// their way back).
#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "service/core/blob_check.h"
#include "service/core/checkpoint_store.h"
#include "base/lock.h"
#include "base/status_macros.h"

namespace leapcache::core {
namespace {

absl::Status CheckPosition(const Position& p) {
  if (p.blocks < 1 || p.blocks > kMaxChainBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("position.blocks must be in [1, ", kMaxChainBlocks, "] (got ", p.blocks, ")"));
  }
  if (p.tokens < p.blocks || p.tokens > p.blocks * kMaxBlockTokens) {
    return absl::InvalidArgumentError(absl::StrCat("position.tokens must be in [blocks, blocks x ",
                                                   kMaxBlockTokens, "] (got ", p.tokens,
                                                   " tokens for ", p.blocks, " blocks)"));
  }
  return absl::OkStatus();
}

absl::Status UnknownPut(PutId id) {
  return absl::NotFoundError(absl::StrCat(
      "unknown put ", id, " (never reserved, or already committed, aborted or expired)"));
}

}  // namespace

absl::StatusOr<Reservation> CheckpointStore::Reserve(const PutRequest& request) {
  absl::StatusOr<Reservation> r = ReserveImpl(request);
  (r.ok() ? counters_.puts_reserved : counters_.puts_refused).Add();
  return r;
}

absl::StatusOr<Reservation> CheckpointStore::ReserveImpl(const PutRequest& request) {
  LC_ASSIGN_OR_RETURN(const NamespaceInfo* ns, CheckHeads(request.ns, request.heads));
  LC_RETURN_IF_ERROR(CheckPosition(request.position));
  absl::Duration ttl = request.ttl == absl::ZeroDuration() ? options_.default_put_ttl : request.ttl;
  if (ttl <= absl::ZeroDuration() || ttl > options_.max_put_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("ttl must be in (0, ",
                                                   absl::FormatDuration(options_.max_put_ttl),
                                                   "] (got ", absl::FormatDuration(ttl), ")"));
  }
  {
    base::WriterLock lock(&puts_mu_);
    LC_RETURN_IF_ERROR(CheckPendingLocked(ns->spec.tenant));
  }
  const CheckpointKey key{request.ns, request.hash};
  LC_RETURN_IF_ERROR(index_.BeginPut(key, request.position, request.heads,
                                     [this](uint64_t id) { return residency_.IsLive(id); }));

  const size_t units = ns->Units(request.heads);
  std::vector<EvictedEntry> evicted;
  const uint64_t reclaimed_before = reclaimed_puts_.load();
  absl::StatusOr<Placement> placement = residency_.Reserve(*ns, units, &evicted);
  if (!placement.ok() && absl::IsResourceExhausted(placement.status())) {
    // Expired puts, reaped here or by anyone since the first try, may have given memory back.
    ReapExpiredPuts();
    if (reclaimed_puts_.load() != reclaimed_before) {
      placement = residency_.Reserve(*ns, units, &evicted);
    }
  }
  Unlink(evicted);
  if (!placement.ok()) {
    index_.EndPut(key, request.heads);
    return placement.status();
  }

  auto put = std::make_shared<PendingPut>();
  put->key = key;
  put->ns = ns;
  put->position = request.position;
  put->heads = request.heads;
  put->placement = std::move(placement).value();
  put->deadline = clock_.Now() + ttl;
  // The spans are built before the put is published: from then on Commit may take its pages.
  Reservation r;
  r.deadline = put->deadline;
  r.heads = request.heads;
  r.layers = ns->spec.model.linear_layers;
  r.unit_bytes = ns->unit_bytes;
  r.side_bytes = ns->side_bytes;
  const MemoryTier& tier = residency_.tier(put->placement.tier);
  if (tier.HostAddress(put->placement.pages.front()) != nullptr) {
    r.units.reserve(units);
    for (size_t b = 0; b < units; ++b) {
      uint8_t* base = tier.HostAddress(put->placement.PageOf(b));
      r.units.emplace_back(base + put->placement.OffsetOf(b), ns->unit_bytes);
    }
  }
  absl::Status admitted;
  {
    base::WriterLock lock(&puts_mu_);
    admitted = CheckPendingLocked(ns->spec.tenant);
    if (admitted.ok()) {
      put->id = next_put_id_++;
      puts_.emplace(put->id, put);
      ++tenant_puts_[ns->spec.tenant].pending;
    }
  }
  if (!admitted.ok()) {  // lost a race for the last slot
    Reclaim(*put);
    return admitted;
  }
  r.id = put->id;
  return r;
}

absl::Status CheckpointStore::CheckPendingLocked(const std::string& tenant) {
  if (puts_.size() >= options_.max_pending_puts) {
    return absl::ResourceExhaustedError(
        absl::StrCat(options_.max_pending_puts, " puts are already in flight"));
  }
  const size_t quota = options_.tenant_quota.pending_puts;
  TenantPuts& t = tenant_puts_[tenant];
  if (quota > 0 && t.pending >= quota) {
    ++t.refused;
    return absl::ResourceExhaustedError(absl::StrCat("tenant ", tenant, " has ", t.pending,
                                                     " puts in flight, its quota "
                                                     "(tenant_max_pending_puts)"));
  }
  return absl::OkStatus();
}

void CheckpointStore::ErasePutLocked(const PendingPut& put) {
  puts_.erase(put.id);
  --tenant_puts_[put.ns->spec.tenant].pending;
}

bool CheckpointStore::KillLocked(PendingPut& put) {
  put.state = PendingPut::State::kDead;
  ErasePutLocked(put);
  return put.uploads == 0;
}

void CheckpointStore::Reclaim(PendingPut& put) {
  index_.EndPut(put.key, put.heads);
  residency_.ReleaseReservation(*put.ns, put.placement);
  reclaimed_puts_.fetch_add(1);
}

// Holds a put's pages for a write into them (Upload, WriteInPlace): the put, or why not.
absl::StatusOr<std::shared_ptr<CheckpointStore::PendingPut>> CheckpointStore::BeginWrite(
    PutId id, size_t offset, size_t bytes) {
  const absl::Time now = clock_.Now();
  std::shared_ptr<PendingPut> put;
  bool reclaim = false;
  {
    base::WriterLock lock(&puts_mu_);
    auto it = puts_.find(id);
    if (it == puts_.end()) return UnknownPut(id);
    put = it->second;
    if (put->state == PendingPut::State::kCommitting) {
      return absl::FailedPreconditionError(absl::StrCat("put ", id, " is being committed"));
    }
    const size_t total = put->placement.units * put->placement.unit_bytes;
    if (offset > total || bytes > total - offset) {
      return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + bytes,
                                                ") leave put ", id, " of ", total, " bytes"));
    }
    if (now < put->deadline) {
      ++put->uploads;  // the pages stay ours until EndWrite
      return put;
    }
    reclaim = KillLocked(*put);
    counters_.puts_expired.Add();
  }
  if (reclaim) Reclaim(*put);
  return absl::DeadlineExceededError(absl::StrCat("put ", id, " passed its deadline"));
}

void CheckpointStore::EndWrite(PendingPut& put) {
  bool reclaim = false;
  {
    base::WriterLock lock(&puts_mu_);
    --put.uploads;
    // An Abort or the reaper killed the put while we copied: the last one out reclaims.
    reclaim = put.state == PendingPut::State::kDead && put.uploads == 0;
  }
  if (reclaim) Reclaim(put);
}

absl::Status CheckpointStore::Upload(PutId id, size_t offset, std::span<const uint8_t> bytes) {
  LC_ASSIGN_OR_RETURN(const std::shared_ptr<PendingPut> put, BeginWrite(id, offset, bytes.size()));
  MemoryTier& tier = residency_.mutable_tier(put->placement.tier);
  const Placement& pl = put->placement;
  absl::Status st;
  for (size_t done = 0; st.ok() && done < bytes.size();) {
    const size_t pos = offset + done;
    const size_t b = pos / pl.unit_bytes;
    const size_t within = pos % pl.unit_bytes;
    const size_t n = std::min(bytes.size() - done, pl.ContiguousFrom(pos));
    st = tier.CopyIn(pl.PageOf(b), pl.OffsetOf(b) + within, bytes.subspan(done, n));
    done += n;
  }
  EndWrite(*put);
  return st;
}

absl::Status CheckpointStore::WriteInPlace(
    PutId id, absl::FunctionRef<absl::Status(const UnitAddresses&)> write) {
  LC_ASSIGN_OR_RETURN(const std::shared_ptr<PendingPut> put, BeginWrite(id, 0, 0));
  const MemoryTier& tier = residency_.tier(put->placement.tier);
  const Placement& pl = put->placement;
  UnitAddresses at;
  at.units.reserve(pl.units);
  const bool on_host = pl.units == 0 || tier.HostAddress(pl.PageOf(0)) != nullptr;
  at.cuda_device = on_host ? -1 : tier.cuda_device();
  absl::Status st;
  for (size_t b = 0; b < pl.units; ++b) {
    // The core never dereferences a device address; the writer copies into it on its device.
    uint8_t* page = on_host ? tier.HostAddress(pl.PageOf(b))
                            : const_cast<uint8_t*>(tier.DeviceAddress(pl.PageOf(b)));
    if (page == nullptr) {
      st = absl::FailedPreconditionError(
          absl::StrCat("put ", id, " lies in tier ", tier.name(), ", which gives no addresses"));
      break;
    }
    at.units.push_back(page + pl.OffsetOf(b));
  }
  if (st.ok()) st = write(at);
  EndWrite(*put);
  return st;
}

absl::Status CheckpointStore::Commit(PutId id, uint32_t crc32c) {
  const absl::Time now = clock_.Now();
  std::shared_ptr<PendingPut> put;
  bool expired = false;
  bool reclaim = false;
  {
    base::WriterLock lock(&puts_mu_);
    auto it = puts_.find(id);
    if (it == puts_.end()) return UnknownPut(id);
    put = it->second;
    if (put->state == PendingPut::State::kCommitting) {
      return absl::FailedPreconditionError(absl::StrCat("put ", id, " is already being committed"));
    }
    if (put->uploads > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("put ", id, " has ", put->uploads, " uploads in progress"));
    }
    if (now >= put->deadline) {
      expired = true;
      reclaim = KillLocked(*put);
      counters_.puts_expired.Add();
    } else {
      // Abort, Upload and the reaper leave a committing put alone, so the checks and the
      // publication below need no lock on it.
      put->state = PendingPut::State::kCommitting;
    }
  }
  if (expired) {
    if (reclaim) Reclaim(*put);
    return absl::DeadlineExceededError(absl::StrCat("put ", id, " passed its deadline"));
  }

  std::vector<uint32_t> unit_crcs;
  absl::Status st = CheckPutUnits(*put->ns, residency_.tier(put->placement.tier), put->placement,
                                  put->heads, crc32c, &unit_crcs);
  if (!st.ok()) {
    base::WriterLock lock(&puts_mu_);
    put->state = PendingPut::State::kOpen;  // unchanged: the caller may fix and retry, or Abort
    counters_.puts_rejected.Add();
    return st;
  }

  const size_t bytes = put->placement.units * put->placement.unit_bytes;
  index_.CommitPut(put->key, put->heads, [&](uint64_t current_entry_id) {
    return residency_.AddPart(current_entry_id, put->key, put->position, *put->ns, put->heads,
                              std::move(put->placement), std::move(unit_crcs));
  });
  {
    base::WriterLock lock(&puts_mu_);
    put->state = PendingPut::State::kDead;
    ErasePutLocked(*put);
    counters_.puts_committed.Add();
    counters_.bytes_in.Add(bytes);
  }
  return absl::OkStatus();
}

absl::Status CheckpointStore::Abort(PutId id) {
  std::shared_ptr<PendingPut> put;
  bool reclaim = false;
  {
    base::WriterLock lock(&puts_mu_);
    auto it = puts_.find(id);
    if (it == puts_.end()) return UnknownPut(id);
    put = it->second;
    if (put->state == PendingPut::State::kCommitting) {
      return absl::FailedPreconditionError(absl::StrCat("put ", id, " is being committed"));
    }
    reclaim = KillLocked(*put);
    counters_.puts_aborted.Add();
  }
  if (reclaim) Reclaim(*put);
  return absl::OkStatus();
}

size_t CheckpointStore::ReapExpiredPuts() {
  // Held across the reclaims below: a concurrent reap waits for them instead of returning while
  // puts it would have reaped still hold their pages.
  base::WriterLock reaping(&reap_mu_);
  const absl::Time now = clock_.Now();
  std::vector<std::shared_ptr<PendingPut>> expired;
  std::vector<std::shared_ptr<PendingPut>> reclaim;
  {
    base::WriterLock lock(&puts_mu_);
    for (const auto& [id, put] : puts_) {
      if (put->state == PendingPut::State::kOpen && now >= put->deadline) expired.push_back(put);
    }
    for (const auto& put : expired) {
      if (KillLocked(*put)) reclaim.push_back(put);
    }
    counters_.puts_expired.Add(expired.size());
  }
  for (const auto& put : reclaim) Reclaim(*put);
  return expired.size();
}

}  // namespace leapcache::core
