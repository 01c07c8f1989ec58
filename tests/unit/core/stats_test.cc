// Stats(): counters and memory by tier and format add up after a scripted sequence.
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace leapcache::core {
namespace {

using namespace leapcache::core::testing;  // NOLINT

BlobSpec Fp32Spec() {
  BlobSpec s;
  s.codec = Codec::kFp32;
  s.bits = 32;
  s.p = 1;
  s.r = 0;
  s.smoothing = false;
  s.dk = s.dv = 16;
  return s;
}

void ExpectMemoryAddsUp(const StoreStats& s) {
  for (size_t t = 0; t < s.tiers.size(); ++t) {
    uint64_t physical = 0;
    for (const FormatMemoryStats& m : s.memory) {
      if (m.tier == s.tiers[t].name) physical += m.physical_bytes;
    }
    EXPECT_EQ(physical + s.tiers[t].reserved_bytes, s.tiers[t].used_bytes) << s.tiers[t].name;
    EXPECT_LE(s.tiers[t].used_bytes, s.tiers[t].capacity_bytes) << s.tiers[t].name;
  }
}

TEST(StatsTest, ScriptedSequence) {
  auto store = MakeStore({{"gpu", 8 * 4096, 4096}, {"host", 8 * 8192, 8192}}, QuietOptions());
  const NamespaceInfo leap = *store->GetNamespace(*store->RegisterNamespace(SmallSpec()));
  const NamespaceInfo fp32 =
      *store->GetNamespace(*store->RegisterNamespace(SmallSpec("tenant-a", 2, 4, Fp32Spec())));
  ASSERT_EQ(leap.blob_bytes, 704u);
  ASSERT_EQ(fp32.blob_bytes, 1088u);

  StoreStats s = store->Stats();
  ASSERT_EQ(s.tiers.size(), 2u);
  EXPECT_EQ(s.tiers[0].name, "gpu");
  EXPECT_EQ(s.tiers[0].capacity_bytes, 8u * 4096);
  EXPECT_EQ(s.tiers[1].capacity_bytes, 8u * 8192);
  EXPECT_EQ(s.tiers[1].page_bytes, 8192u);
  EXPECT_EQ(s.namespaces, 2u);
  EXPECT_TRUE(s.memory.empty());

  const BlockHash a = HashOf(1), b = HashOf(2), c = HashOf(3);
  ASSERT_TRUE(PutSeeded(*store, leap, a, Position{32, 2}, {0, 4}, 1).ok());
  ASSERT_TRUE(PutSeeded(*store, fp32, b, Position{16, 1}, {0, 4}, 2).ok());
  PutRequest req;
  req.ns = leap.id;
  req.hash = c;
  req.position = Position{16, 1};
  req.heads = {0, 2};
  absl::StatusOr<Reservation> pending = store->Reserve(req);
  ASSERT_TRUE(pending.ok());

  s = store->Stats();
  ExpectMemoryAddsUp(s);
  EXPECT_EQ(s.checkpoints, 2u);
  EXPECT_EQ(s.pending_puts, 1u);
  EXPECT_EQ(s.tiers[0].reserved_bytes, 4096u);  // 4 blobs of 704 B: one page
  EXPECT_EQ(s.tiers[0].checkpoints, 2u);
  ASSERT_EQ(s.memory.size(), 2u);
  const FormatMemoryStats& f = s.memory[0];  // sorted: fp32 before leap8
  EXPECT_EQ(f.tier, "gpu");
  EXPECT_EQ(f.format, "fp32");
  EXPECT_EQ(f.blobs, 8u);
  EXPECT_EQ(f.physical_bytes, 3u * 4096);  // 3 slots of 1,088 B per page
  EXPECT_EQ(f.stored_bytes, 8u * 1088);
  EXPECT_EQ(f.fp32_equivalent_bytes, 8u * 1024);
  const FormatMemoryStats& l = s.memory[1];
  EXPECT_EQ(l.format, "leap8");
  EXPECT_EQ(l.physical_bytes, 2u * 4096);
  EXPECT_EQ(l.stored_bytes, 8u * 704);
  EXPECT_EQ(l.fp32_equivalent_bytes, 8u * 1024);
  EXPECT_EQ(s.bytes_in, 8u * 704 + 8u * 1088);
  EXPECT_EQ(s.puts_reserved, 3u);
  EXPECT_EQ(s.puts_committed, 2u);

  // Lookups: a hit at depth 2 of a 2-block chain, a miss on a 3-block chain (16-token blocks).
  std::vector<BlockHash> chain = {HashOf(100), a};
  LookupRequest q;
  q.ns = leap.id;
  q.chain = chain;
  q.heads = {0, 4};
  q.block_tokens = 16;
  ASSERT_TRUE(store->Lookup(q)->hit);
  std::vector<BlockHash> unknown = {HashOf(200), HashOf(201), HashOf(202)};
  q.chain = unknown;
  ASSERT_FALSE(store->Lookup(q)->hit);
  // A hit at depth 1 of a 2-deep query: 16 tokens served, 16 missed.
  std::vector<BlockHash> deeper = {b, HashOf(300)};
  q.ns = fp32.id;
  q.chain = deeper;
  ASSERT_EQ(store->Lookup(q)->index, 0);

  {
    absl::StatusOr<ReadLease> lease = store->Get(leap.id, a, {0, 4});
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(store->Stats().leases, 1u);
  }
  EXPECT_EQ(store->Get(leap.id, c, {0, 2}).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->Abort(pending->id).ok());
  ASSERT_TRUE(store->Pin(fp32.id, b).ok());
  ASSERT_TRUE(store->Delete(leap.id, a).ok());

  s = store->Stats();
  ExpectMemoryAddsUp(s);
  EXPECT_EQ(s.lookups, 3u);
  EXPECT_EQ(s.lookup_hits, 2u);
  EXPECT_EQ(s.lookup_misses, 1u);
  EXPECT_EQ(s.lookup_hits + s.lookup_misses, s.lookups);
  EXPECT_EQ(s.lookup_hit_tokens, 32u + 16u);
  EXPECT_EQ(s.lookup_miss_tokens, 0u + 48u + 16u);
  EXPECT_EQ(s.gets, 2u);
  EXPECT_EQ(s.get_hits, 1u);
  EXPECT_EQ(s.get_misses, 1u);
  EXPECT_EQ(s.bytes_out, 8u * 704);
  EXPECT_EQ(s.puts_aborted, 1u);
  EXPECT_EQ(s.puts_refused, 0u);
  EXPECT_EQ(s.puts_rejected, 0u);
  EXPECT_EQ(s.puts_expired, 0u);
  EXPECT_EQ(s.deletes, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.spills, 0u);
  EXPECT_EQ(s.promotions, 0u);
  EXPECT_EQ(s.checkpoints, 1u);
  EXPECT_EQ(s.pinned, 1u);
  EXPECT_EQ(s.leases, 0u);
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.tiers[0].reserved_bytes, 0u);
  EXPECT_EQ(s.tiers[0].used_bytes, 3u * 4096);  // only fp32 b remains
  ASSERT_EQ(s.memory.size(), 1u);
  EXPECT_EQ(s.memory[0].format, "fp32");
}

TEST(StatsTest, SpillsAndPromotionsMoveMemoryBetweenTiers) {
  StoreOptions o = QuietOptions();
  o.eviction.policy = EvictionPolicyKind::kLru;
  auto store = MakeStore({{"gpu", 2 * 4096, 4096}, {"host", 4 * 4096, 4096}}, o);
  const NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(SmallSpec()));
  ASSERT_TRUE(PutSeeded(*store, ns, HashOf(1), PositionAt(1), {0, 4}, 1).ok());
  ASSERT_TRUE(PutSeeded(*store, ns, HashOf(2), PositionAt(1), {0, 4}, 2).ok());  // spills 1
  StoreStats s = store->Stats();
  ExpectMemoryAddsUp(s);
  ASSERT_EQ(s.memory.size(), 2u);
  EXPECT_EQ(s.memory[0].tier, "gpu");
  EXPECT_EQ(s.memory[1].tier, "host");
  EXPECT_EQ(s.memory[0].stored_bytes, s.memory[1].stored_bytes);
  EXPECT_EQ(s.spills, 1u);
  ASSERT_TRUE(store->Get(ns.id, HashOf(1), {0, 4}).ok());  // swap: 1 up, 2 down
  s = store->Stats();
  ExpectMemoryAddsUp(s);
  EXPECT_EQ(s.promotions, 1u);
  EXPECT_EQ(s.spills, 2u);
  EXPECT_EQ(s.tiers[0].used_bytes, 2u * 4096);
  EXPECT_EQ(s.tiers[1].used_bytes, 2u * 4096);
}

}  // namespace
}  // namespace leapcache::core
