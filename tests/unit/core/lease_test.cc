// Read leases against eviction and Delete; pins.
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace leapcache::core {
namespace {

using namespace leapcache::core::testing;  // NOLINT

// One tier of 6 pages: a full SmallSpec checkpoint (8 blobs of 704 B, 5 per page) takes 2, so
// three fit.
class LeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o = QuietOptions();
    o.eviction.policy = EvictionPolicyKind::kLru;
    store_ = MakeStore({{"host", 6 * 4096}}, o);
    ns_ = *store_->GetNamespace(*store_->RegisterNamespace(SmallSpec()));
  }
  absl::Status Put(uint64_t i) {
    return PutSeeded(*store_, ns_, HashOf(i), PositionAt(1), {0, 4}, i);
  }
  bool Present(uint64_t i) { return store_->ResidentTiers(ns_.id, HashOf(i)).ok(); }
  std::vector<uint8_t> Expected(uint64_t i) { return CheckpointBytes(ns_, i, {0, 4}); }

  std::unique_ptr<CheckpointStore> store_;
  NamespaceInfo ns_;
};

TEST_F(LeaseTest, LeasedCheckpointsAreNeverEvicted) {
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Put(i).ok());
  absl::StatusOr<ReadLease> lease = store_->Get(ns_.id, HashOf(1), {0, 4});  // the LRU one
  ASSERT_TRUE(lease.ok());
  std::vector<uint8_t> seen_before = LeaseBytes(*lease);
  // Churn: every new put must evict something, and never checkpoint 1.
  for (uint64_t i = 4; i <= 20; ++i) {
    ASSERT_TRUE(Put(i).ok()) << i;
    EXPECT_TRUE(Present(1));
    EXPECT_EQ(LeaseBytes(*lease), Expected(1)) << "bytes under a lease changed at put " << i;
  }
  EXPECT_EQ(seen_before, Expected(1));
  EXPECT_GT(store_->Stats().evictions, 0u);
  lease->Release();
  EXPECT_FALSE(lease->valid());
  lease->Release();  // idempotent
  ASSERT_TRUE(Put(21).ok());
  ASSERT_TRUE(Put(22).ok());
  EXPECT_FALSE(Present(1));  // unleased, least recently used: gone now
}

TEST_F(LeaseTest, WhenEverythingIsLeasedPutsFailAndChangeNothing) {
  std::vector<ReadLease> leases;
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(Put(i).ok());
    leases.push_back(std::move(store_->Get(ns_.id, HashOf(i), {0, 4})).value());
  }
  const StoreStats before = store_->Stats();
  absl::Status st = Put(4);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("leased"), std::string::npos) << st;
  const StoreStats after = store_->Stats();
  EXPECT_EQ(after.checkpoints, 3u);
  EXPECT_EQ(after.evictions, before.evictions);
  EXPECT_EQ(after.tiers[0].used_bytes, before.tiers[0].used_bytes);
  EXPECT_EQ(after.pending_puts, 0u);
  for (uint64_t i = 1; i <= 3; ++i) EXPECT_EQ(LeaseBytes(leases[i - 1]), Expected(i));
  // Reads are still served while writes are refused.
  EXPECT_TRUE(store_->Get(ns_.id, HashOf(2), {0, 4}).ok());
  leases.clear();
  EXPECT_TRUE(Put(4).ok());
}

TEST_F(LeaseTest, DeleteHidesAtOnceAndFreesWhenTheLastLeaseDrops) {
  ASSERT_TRUE(Put(1).ok());
  const uint64_t used = store_->Stats().tiers[0].used_bytes;
  absl::StatusOr<ReadLease> a = store_->Get(ns_.id, HashOf(1), {0, 4});
  absl::StatusOr<ReadLease> b = store_->Get(ns_.id, HashOf(1), {1, 3});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(store_->Stats().leases, 2u);
  ASSERT_TRUE(store_->Delete(ns_.id, HashOf(1)).ok());
  EXPECT_FALSE(Present(1));
  EXPECT_EQ(store_->Get(ns_.id, HashOf(1), {0, 4}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(ns_.id, HashOf(1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Pin(ns_.id, HashOf(1)).code(), absl::StatusCode::kNotFound);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.checkpoints, 0u);
  EXPECT_EQ(s.tiers[0].used_bytes, used);  // still held by the leases
  EXPECT_EQ(LeaseBytes(*a), Expected(1));
  a->Release();
  EXPECT_EQ(store_->Stats().tiers[0].used_bytes, used);
  EXPECT_EQ(LeaseBytes(*b), CheckpointBytes(ns_, 1, {1, 3}));
  ReadLease moved = std::move(*b);  // moving a lease does not release it
  EXPECT_FALSE(b->valid());
  EXPECT_EQ(store_->Stats().tiers[0].used_bytes, used);
  moved.Release();
  s = store_->Stats();
  EXPECT_EQ(s.tiers[0].used_bytes, 0u);
  EXPECT_EQ(s.leases, 0u);
  EXPECT_TRUE(s.memory.empty());
  // The key can be stored again, with new bytes.
  ASSERT_TRUE(PutSeeded(*store_, ns_, HashOf(1), PositionAt(1), {0, 4}, 99).ok());
  EXPECT_EQ(LeaseBytes(*store_->Get(ns_.id, HashOf(1), {0, 4})), CheckpointBytes(ns_, 99, {0, 4}));
}

TEST_F(LeaseTest, DeleteWithoutLeasesFreesAtOnce) {
  ASSERT_TRUE(Put(1).ok());
  ASSERT_TRUE(store_->Delete(ns_.id, HashOf(1)).ok());
  EXPECT_EQ(store_->Stats().tiers[0].used_bytes, 0u);
  EXPECT_EQ(store_->Stats().deletes, 1u);
  EXPECT_EQ(store_->Delete(99, HashOf(1)).code(), absl::StatusCode::kNotFound);
}

TEST_F(LeaseTest, LeaseAccessors) {
  ASSERT_TRUE(Put(3).ok());
  absl::StatusOr<ReadLease> lease = store_->Get(ns_.id, HashOf(3), {2, 4});
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->ns(), ns_.id);
  EXPECT_EQ(lease->hash(), HashOf(3));
  EXPECT_EQ(lease->heads(), (HeadRange{2, 4}));
  EXPECT_EQ(lease->layers(), 2);
  EXPECT_EQ(lease->num_units(), 4u);
  EXPECT_EQ(lease->unit_bytes(), ns_.unit_bytes);
  std::vector<uint8_t> blob(ns_.blob_bytes);
  ASSERT_TRUE(lease->CopyUnit(1, 2, blob).ok());
  EXPECT_EQ(blob, MakeBlob(ns_.spec.format, BlobSeed(3, 1, 2)));
  EXPECT_EQ(lease->CopyUnit(1, 1, blob).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease->CopyUnit(2, 2, blob).code(), absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> small(10);
  EXPECT_EQ(lease->CopyUnit(0, 2, small).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease->CopyAll(small).code(), absl::StatusCode::kInvalidArgument);
  // Blobs 1..3 in (layer, head) order: (0, 3), (1, 2), (1, 3).
  std::vector<uint8_t> three(3 * ns_.blob_bytes), want;
  ASSERT_TRUE(lease->CopyUnits(1, 3, three).ok());
  for (auto [layer, head] : {std::pair{0, 3}, std::pair{1, 2}, std::pair{1, 3}}) {
    const std::vector<uint8_t> b = MakeBlob(ns_.spec.format, BlobSeed(3, layer, head));
    want.insert(want.end(), b.begin(), b.end());
  }
  EXPECT_EQ(three, want);
  EXPECT_EQ(lease->CopyUnits(2, 3, three).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lease->CopyUnits(0, 2, three).code(), absl::StatusCode::kInvalidArgument);
  lease->Release();
  EXPECT_EQ(lease->CopyAll(small).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lease->CopyUnits(0, 1, blob).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LeaseTest, PinnedCheckpointsAreNeverEvicted) {
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Put(i).ok());
  ASSERT_TRUE(store_->Pin(ns_.id, HashOf(1)).ok());
  ASSERT_TRUE(store_->Pin(ns_.id, HashOf(1)).ok());  // pins nest
  EXPECT_EQ(store_->Stats().pinned, 1u);
  for (uint64_t i = 4; i <= 12; ++i) ASSERT_TRUE(Put(i).ok());
  EXPECT_TRUE(Present(1));
  EXPECT_EQ(LeaseBytes(*store_->Get(ns_.id, HashOf(1), {0, 4})), Expected(1));
  ASSERT_TRUE(store_->Unpin(ns_.id, HashOf(1)).ok());
  for (uint64_t i = 13; i <= 16; ++i) ASSERT_TRUE(Put(i).ok());
  EXPECT_TRUE(Present(1));  // still pinned once
  ASSERT_TRUE(store_->Unpin(ns_.id, HashOf(1)).ok());
  EXPECT_EQ(store_->Unpin(ns_.id, HashOf(1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Stats().pinned, 0u);
  for (uint64_t i = 17; i <= 20; ++i) ASSERT_TRUE(Put(i).ok());
  EXPECT_FALSE(Present(1));
  EXPECT_EQ(store_->Pin(ns_.id, HashOf(1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Unpin(ns_.id, HashOf(1)).code(), absl::StatusCode::kNotFound);
}

TEST_F(LeaseTest, AllPinnedMeansResourceExhausted) {
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(Put(i).ok());
    ASSERT_TRUE(store_->Pin(ns_.id, HashOf(i)).ok());
  }
  EXPECT_EQ(Put(4).code(), absl::StatusCode::kResourceExhausted);
  // A smaller put fits in what the pinned ones leave? No: every page is taken.
  EXPECT_EQ(PutSeeded(*store_, ns_, HashOf(5), PositionAt(1), {0, 1}, 5).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store_->Delete(ns_.id, HashOf(2)).ok());  // Delete overrides a pin
  EXPECT_TRUE(Put(4).ok());
  EXPECT_EQ(store_->Stats().pinned, 2u);
}

}  // namespace
}  // namespace leapcache::core
