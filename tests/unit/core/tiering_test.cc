// Eviction order (LRU and state-aware) through the store, and spill / promotion between tiers.
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace leapcache::core {
namespace {

using namespace leapcache::core::testing;  // NOLINT

std::vector<int> Tiers(CheckpointStore& store, NamespaceId ns, uint64_t i) {
  absl::StatusOr<std::vector<int>> t = store.ResidentTiers(ns, HashOf(i));
  return t.ok() ? *t : std::vector<int>{};
}

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

StoreOptions WithPolicy(EvictionPolicyKind kind, double half_life = 4096) {
  StoreOptions o = QuietOptions();
  o.eviction.policy = kind;
  o.eviction.half_life_accesses = half_life;
  return o;
}

// One tier of 6 pages, three 2-page checkpoints: A deep (8 blocks), B shallow (1), C (4), put in
// that order with no reads. A fourth put must evict one of them.
uint64_t VictimOfFourthPut(StoreOptions options) {
  auto store = MakeStore({{"host", 6 * 4096}}, options);
  const NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(SmallSpec()));
  EXPECT_TRUE(PutSeeded(*store, ns, HashOf(1), PositionAt(8), {0, 4}, 1).ok());
  EXPECT_TRUE(PutSeeded(*store, ns, HashOf(2), PositionAt(1), {0, 4}, 2).ok());
  EXPECT_TRUE(PutSeeded(*store, ns, HashOf(3), PositionAt(4), {0, 4}, 3).ok());
  EXPECT_TRUE(PutSeeded(*store, ns, HashOf(4), PositionAt(2), {0, 4}, 4).ok());
  uint64_t victim = 0;
  for (uint64_t i = 1; i <= 4; ++i) {
    if (Tiers(*store, ns.id, i).empty()) {
      EXPECT_EQ(victim, 0u) << "more than one victim";
      victim = i;
    }
  }
  EXPECT_EQ(store->Stats().evictions, 1u);
  return victim;
}

TEST(EvictionOrderTest, LruEvictsTheOldest) {
  EXPECT_EQ(VictimOfFourthPut(WithPolicy(EvictionPolicyKind::kLru)), 1u);
}

TEST(EvictionOrderTest, StateAwareEvictsTheLeastComputeSavedPerByte) {
  EXPECT_EQ(VictimOfFourthPut(WithPolicy(EvictionPolicyKind::kStateAware)), 2u);
}

TEST(EvictionOrderTest, StateAwareWithFastDecayApproachesLru) {
  // Half-life 0.25 accesses: A is 2 accesses older than B, worth 2^-8 of its value by now,
  // which outweighs being 8x deeper.
  EXPECT_EQ(VictimOfFourthPut(WithPolicy(EvictionPolicyKind::kStateAware, 0.25)), 1u);
}

TEST(EvictionOrderTest, LruReadsRefreshRecency) {
  auto store = MakeStore({{"host", 6 * 4096}}, WithPolicy(EvictionPolicyKind::kLru));
  const NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(SmallSpec()));
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(PutSeeded(*store, ns, HashOf(i), PositionAt(1), {0, 4}, i).ok());
  }
  ASSERT_TRUE(store->Get(ns.id, HashOf(1), {0, 4}).ok());
  ASSERT_TRUE(PutSeeded(*store, ns, HashOf(4), PositionAt(1), {0, 4}, 4).ok());
  EXPECT_FALSE(Tiers(*store, ns.id, 1).empty());
  EXPECT_TRUE(Tiers(*store, ns.id, 2).empty());
}

TEST(EvictionOrderTest, StateAwarePrefersCompactFormatsAtEqualDepth) {
  // Same model and depth: an fp32 checkpoint (8 x 1,088 B) saves the same compute as a leap8 one
  // (8 x 704 B) in more bytes, so it goes first even though it is newer.
  auto store = MakeStore({{"host", 9 * 4096}}, WithPolicy(EvictionPolicyKind::kStateAware));
  const NamespaceInfo leap = *store->GetNamespace(*store->RegisterNamespace(SmallSpec()));
  const NamespaceInfo fp32 =
      *store->GetNamespace(*store->RegisterNamespace(SmallSpec("tenant-a", 2, 4, Fp32Spec())));
  ASSERT_TRUE(PutSeeded(*store, leap, HashOf(1), PositionAt(3), {0, 4}, 1).ok());  // 2 pages
  ASSERT_TRUE(PutSeeded(*store, fp32, HashOf(2), PositionAt(3), {0, 4}, 2).ok());  // 3 pages
  ASSERT_TRUE(PutSeeded(*store, leap, HashOf(3), PositionAt(3), {0, 4}, 3).ok());  // 2 pages
  ASSERT_TRUE(PutSeeded(*store, fp32, HashOf(4), PositionAt(3), {0, 4}, 4).ok());  // needs 3
  EXPECT_FALSE(Tiers(*store, leap.id, 1).empty());
  EXPECT_TRUE(Tiers(*store, fp32.id, 2).empty());
  EXPECT_FALSE(Tiers(*store, leap.id, 3).empty());
  EXPECT_FALSE(Tiers(*store, fp32.id, 4).empty());
}

// Tier 0 ("gpu", 4 pages of 4 KiB: two checkpoints) over tier 1 ("host", 3 pages of 8 KiB: one
// checkpoint per page, three in all). Different page sizes force a re-layout on every move.
class TieringTest : public ::testing::Test {
 protected:
  void Make(StoreOptions options) {
    store_ = MakeStore({{"gpu", 4 * 4096, 4096}, {"host", 3 * 8192, 8192}}, options);
    ns_ = *store_->GetNamespace(*store_->RegisterNamespace(SmallSpec()));
  }
  void SetUp() override { Make(WithPolicy(EvictionPolicyKind::kLru)); }
  absl::Status Put(uint64_t i) {
    return PutSeeded(*store_, ns_, HashOf(i), PositionAt(1), {0, 4}, i);
  }
  std::vector<int> TiersOf(uint64_t i) { return Tiers(*store_, ns_.id, i); }
  void ExpectBytes(uint64_t i) {
    absl::StatusOr<ReadLease> lease = store_->Get(ns_.id, HashOf(i), {0, 4});
    ASSERT_TRUE(lease.ok()) << i;
    EXPECT_EQ(LeaseBytes(*lease), CheckpointBytes(ns_, i, {0, 4})) << i;
  }

  std::unique_ptr<CheckpointStore> store_;
  NamespaceInfo ns_;
};

TEST_F(TieringTest, EvictionSpillsToTheNextTierAndAHitPromotesBack) {
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(2).ok());
  EXPECT_EQ(TiersOf(1), std::vector<int>{0});
  ASSERT_TRUE(Put(3).ok());  // tier 0 full: 1 (LRU) spills
  EXPECT_EQ(TiersOf(1), std::vector<int>{1});
  EXPECT_EQ(TiersOf(3), std::vector<int>{0});
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.spills, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.tiers[1].checkpoints, 1u);

  // A lookup still hits a spilled checkpoint; the Get promotes it (2, now LRU, spills).
  const BlockHash h1 = HashOf(1);
  LookupRequest q;
  q.ns = ns_.id;
  q.chain = std::span<const BlockHash>(&h1, 1);
  q.heads = {0, 4};
  q.block_tokens = 16;
  EXPECT_TRUE(store_->Lookup(q)->hit);
  ExpectBytes(1);
  EXPECT_EQ(TiersOf(1), std::vector<int>{0});
  EXPECT_EQ(TiersOf(2), std::vector<int>{1});
  s = store_->Stats();
  EXPECT_EQ(s.promotions, 1u);
  EXPECT_EQ(s.spills, 2u);
  ExpectBytes(2);  // promoted again, 3 spills; bytes survive every round trip
  ExpectBytes(3);
  ExpectBytes(1);
  for (uint64_t i = 1; i <= 3; ++i) EXPECT_EQ(TiersOf(i).size(), 1u);
}

TEST_F(TieringTest, TheLastTierDropsForReal) {
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(Put(i).ok());  // 2 in tier 0, 3 in tier 1
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.tiers[0].checkpoints, 2u);
  EXPECT_EQ(s.tiers[1].checkpoints, 3u);
  ASSERT_TRUE(Put(6).ok());  // 3 spills, tier 1 must drop its LRU (1)
  s = store_->Stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_TRUE(TiersOf(1).empty());
  for (uint64_t i = 2; i <= 6; ++i) EXPECT_EQ(TiersOf(i).size(), 1u) << i;
  EXPECT_EQ(s.checkpoints, 5u);
  // Each hit below promotes from a full tier 1 into a full tier 0: a swap, so nothing is lost.
  for (uint64_t i = 2; i <= 6; ++i) ExpectBytes(i);
  s = store_->Stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.checkpoints, 5u);
  EXPECT_GE(s.promotions, 3u);
}

TEST_F(TieringTest, WithoutSpillEvictionDrops) {
  StoreOptions o = WithPolicy(EvictionPolicyKind::kLru);
  o.eviction.spill = false;
  Make(o);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Put(i).ok());
  EXPECT_TRUE(TiersOf(1).empty());
  EXPECT_EQ(store_->Stats().evictions, 1u);
  EXPECT_EQ(store_->Stats().spills, 0u);
}

TEST_F(TieringTest, WithoutPromotionHitsAreServedFromTheSlowTier) {
  StoreOptions o = WithPolicy(EvictionPolicyKind::kLru);
  o.eviction.promote_on_hit = false;
  Make(o);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Put(i).ok());
  ASSERT_EQ(TiersOf(1), std::vector<int>{1});
  absl::StatusOr<ReadLease> lease = store_->Get(ns_.id, HashOf(1), {0, 4});
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(lease->host_addressable());
  EXPECT_EQ(LeaseBytes(*lease), CheckpointBytes(ns_, 1, {0, 4}));
  EXPECT_EQ(TiersOf(1), std::vector<int>{1});
  EXPECT_EQ(store_->Stats().promotions, 0u);
}

TEST_F(TieringTest, LeasedCheckpointsAreNeitherSpilledNorPromoted) {
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Put(i).ok());              // 1 spilled to tier 1
  absl::StatusOr<ReadLease> one = store_->Get(ns_.id, HashOf(1), {0, 4});  // promotes 1
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(TiersOf(1), std::vector<int>{0});
  // 1 is leased in tier 0: the next puts spill the others, never 1.
  for (uint64_t i = 4; i <= 6; ++i) ASSERT_TRUE(Put(i).ok());
  EXPECT_EQ(TiersOf(1), std::vector<int>{0});
  EXPECT_EQ(TiersOf(6), std::vector<int>{0});
  ASSERT_EQ(TiersOf(5), std::vector<int>{1});
  EXPECT_EQ(LeaseBytes(*one), CheckpointBytes(ns_, 1, {0, 4}));

  // Tier 0 is now leased (1) and pinned (6): a hit on 5 cannot be promoted and is served from
  // tier 1 under a lease ...
  ASSERT_TRUE(store_->Pin(ns_.id, HashOf(6)).ok());
  absl::StatusOr<ReadLease> five = store_->Get(ns_.id, HashOf(5), {0, 4});
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(TiersOf(5), std::vector<int>{1});
  // ... and while that lease is held, a second reader does not move it either, even with room.
  ASSERT_TRUE(store_->Unpin(ns_.id, HashOf(6)).ok());
  absl::StatusOr<ReadLease> five_again = store_->Get(ns_.id, HashOf(5), {0, 4});
  ASSERT_TRUE(five_again.ok());
  EXPECT_EQ(TiersOf(5), std::vector<int>{1});
  EXPECT_EQ(LeaseBytes(*five), CheckpointBytes(ns_, 5, {0, 4}));
  EXPECT_EQ(LeaseBytes(*five_again), CheckpointBytes(ns_, 5, {0, 4}));
  five->Release();
  five_again->Release();
  ExpectBytes(5);  // unleased now: promoted
  EXPECT_EQ(TiersOf(5), std::vector<int>{0});
}

TEST_F(TieringTest, PutsLandInTheNextTierWhenTheFirstIsPinnedFull) {
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(Put(2).ok());
  ASSERT_TRUE(store_->Pin(ns_.id, HashOf(1)).ok());
  ASSERT_TRUE(store_->Pin(ns_.id, HashOf(2)).ok());
  ASSERT_TRUE(Put(3).ok());
  EXPECT_EQ(TiersOf(3), std::vector<int>{1});
  EXPECT_EQ(TiersOf(1), std::vector<int>{0});
  // Its hit cannot be promoted (tier 0 is pinned full) and is served from tier 1.
  ExpectBytes(3);
  EXPECT_EQ(TiersOf(3), std::vector<int>{1});
  EXPECT_EQ(store_->Stats().promotions, 0u);
}

}  // namespace
}  // namespace leapcache::core
