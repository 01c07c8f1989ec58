#include "service/core/checkpoint_index.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/lock.h"

namespace leapcache::core {

CheckpointIndex::Shard& CheckpointIndex::ShardOf(const CheckpointKey& key) const {
  // The high half of the hash: flat_hash_map uses the low bits inside the shard, so the shard
  // choice stays independent of the bucket choice.
  const size_t h = absl::Hash<CheckpointKey>{}(key);
  return shards_[(static_cast<uint64_t>(h) >> 32) % kNumShards];
}

absl::Status CheckpointIndex::BeginPut(const CheckpointKey& key, const Position& position,
                                       HeadRange heads, absl::FunctionRef<bool(uint64_t)> is_live) {
  Shard& shard = ShardOf(key);
  base::WriterLock lock(&shard.mu);
  Slot& slot = shard.slots[key];  // created if absent; erased below if the put is refused
  if (slot.entry_id != 0 && !is_live(slot.entry_id)) {
    slot.entry_id = 0;  // evicted but not yet unlinked: forget it now
    slot.committed.Clear();
  }
  absl::Status st;
  if (!slot.unused() && !(slot.position == position)) {
    st = absl::InvalidArgumentError(
        absl::StrCat("block hash is already held at position (", slot.position.tokens, " tokens, ",
                     slot.position.blocks, " blocks), not (", position.tokens, " tokens, ",
                     position.blocks, " blocks)"));
  } else if (slot.entry_id != 0 && slot.committed.Covers(heads)) {
    st = absl::AlreadyExistsError(
        absl::StrCat("heads ", HeadRangeToString(heads), " of this checkpoint are committed"));
  } else if (slot.committed.Overlaps(heads)) {
    st = absl::FailedPreconditionError(absl::StrCat("heads ", HeadRangeToString(heads),
                                                    " overlap committed heads ",
                                                    slot.committed.ToString()));
  } else if (auto it = std::find_if(slot.pending.begin(), slot.pending.end(),
                                    [&](const HeadRange& p) { return p.Overlaps(heads); });
             it != slot.pending.end()) {
    st = absl::FailedPreconditionError(absl::StrCat("heads ", HeadRangeToString(heads),
                                                    " overlap a put in flight for heads ",
                                                    HeadRangeToString(*it)));
  }
  if (!st.ok()) {
    if (slot.unused()) shard.slots.erase(key);
    return st;
  }
  slot.position = position;
  slot.pending.push_back(heads);
  return absl::OkStatus();
}

void CheckpointIndex::EndPut(const CheckpointKey& key, HeadRange heads) {
  Shard& shard = ShardOf(key);
  base::WriterLock lock(&shard.mu);
  auto it = shard.slots.find(key);
  if (it == shard.slots.end()) return;
  std::vector<HeadRange>& pending = it->second.pending;
  if (auto p = std::find(pending.begin(), pending.end(), heads); p != pending.end()) {
    pending.erase(p);
  }
  if (it->second.unused()) shard.slots.erase(it);
}

void CheckpointIndex::CommitPut(const CheckpointKey& key, HeadRange heads,
                                absl::FunctionRef<uint64_t(uint64_t)> publish) {
  Shard& shard = ShardOf(key);
  base::WriterLock lock(&shard.mu);
  auto it = shard.slots.find(key);
  LC_CHECK(it != shard.slots.end(), "CheckpointIndex::CommitPut without BeginPut");
  Slot& slot = it->second;
  auto p = std::find(slot.pending.begin(), slot.pending.end(), heads);
  LC_CHECK(p != slot.pending.end(), "CheckpointIndex::CommitPut of a range not in flight");
  slot.pending.erase(p);
  const uint64_t id = publish(slot.entry_id);
  if (id != slot.entry_id) {
    slot.entry_id = id;
    slot.committed.Clear();
  }
  // A range in flight never overlaps committed heads of a live entry (BeginPut), and a new entry
  // starts empty, so this cannot overlap.
  slot.committed.Add(heads);
}

std::optional<IndexHit> CheckpointIndex::Find(const CheckpointKey& key, HeadRange heads) const {
  Shard& shard = ShardOf(key);
  base::ReaderLock lock(&shard.mu);
  auto it = shard.slots.find(key);
  if (it == shard.slots.end() || it->second.entry_id == 0 || !it->second.committed.Covers(heads)) {
    return std::nullopt;
  }
  return IndexHit{it->second.entry_id, it->second.position};
}

std::optional<uint64_t> CheckpointIndex::FindEntry(const CheckpointKey& key) const {
  Shard& shard = ShardOf(key);
  base::ReaderLock lock(&shard.mu);
  auto it = shard.slots.find(key);
  if (it == shard.slots.end() || it->second.entry_id == 0) return std::nullopt;
  return it->second.entry_id;
}

std::optional<uint64_t> CheckpointIndex::Remove(const CheckpointKey& key) {
  Shard& shard = ShardOf(key);
  base::WriterLock lock(&shard.mu);
  auto it = shard.slots.find(key);
  if (it == shard.slots.end() || it->second.entry_id == 0) return std::nullopt;
  const uint64_t id = it->second.entry_id;
  it->second.entry_id = 0;
  it->second.committed.Clear();
  if (it->second.unused()) shard.slots.erase(it);
  return id;
}

void CheckpointIndex::Unlink(const CheckpointKey& key, uint64_t entry_id) {
  Shard& shard = ShardOf(key);
  base::WriterLock lock(&shard.mu);
  auto it = shard.slots.find(key);
  if (it == shard.slots.end() || it->second.entry_id != entry_id) return;
  it->second.entry_id = 0;
  it->second.committed.Clear();
  if (it->second.unused()) shard.slots.erase(it);
}

size_t CheckpointIndex::committed_keys() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    base::ReaderLock lock(&shard.mu);
    for (const auto& [key, slot] : shard.slots) n += slot.entry_id != 0 ? 1 : 0;
  }
  return n;
}

}  // namespace leapcache::core
