#include "service/core/host_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "service/core/checkpoint_store.h"
#include "test_util.h"

namespace leapcache::core {
namespace {

using namespace leapcache::core::testing;  // NOLINT

TEST(HostTierTest, CapacityIsWholePagesWithinTheBudget) {
  auto tier = HostTier::Create("host", 10 * 4096 + 100, 4096);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->capacity_pages(), 10u);
  EXPECT_LE((*tier)->capacity_bytes(), 10u * 4096 + 100);
  EXPECT_EQ((*tier)->used_pages(), 0u);
  EXPECT_EQ((*tier)->name(), "host");
}

TEST(HostTierTest, RejectsBadConfigurations) {
  EXPECT_EQ(HostTier::Create("h", 1 << 20, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostTier::Create("h", 1 << 20, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostTier::Create("h", 4095, 4096).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostTierTest, AllocationIsAllOrNothingAndPagesAreDistinctAndAligned) {
  auto tier = std::move(HostTier::Create("host", 8 * 8192, 8192)).value();
  std::vector<PageId> a;
  ASSERT_TRUE(tier->Allocate(5, &a).ok());
  EXPECT_EQ(a.size(), 5u);
  std::vector<PageId> b;
  EXPECT_EQ(tier->Allocate(4, &b).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(tier->used_pages(), 5u);
  ASSERT_TRUE(tier->Allocate(3, &b).ok());
  std::set<PageId> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 8u);
  for (PageId p : all) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tier->HostAddress(p)) % kHostPageAlignment, 0u);
  }
  tier->Free(a);
  EXPECT_EQ(tier->used_pages(), 3u);
  std::vector<PageId> c;
  ASSERT_TRUE(tier->Allocate(5, &c).ok());
  EXPECT_EQ(tier->used_pages(), tier->capacity_pages());
  tier->Free(b);
  tier->Free(c);
  EXPECT_EQ(tier->used_pages(), 0u);
}

TEST(HostTierTest, CopiesStayInsideThePage) {
  auto tier = std::move(HostTier::Create("host", 2 * 4096, 4096)).value();
  std::vector<PageId> pages;
  ASSERT_TRUE(tier->Allocate(2, &pages).ok());
  std::vector<uint8_t> data(100);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 3);
  ASSERT_TRUE(tier->CopyIn(pages[1], 4096 - 100, data).ok());
  std::vector<uint8_t> back(100);
  ASSERT_TRUE(tier->CopyOut(pages[1], 4096 - 100, back).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(std::memcmp(tier->HostAddress(pages[1]) + 4096 - 100, data.data(), 100), 0);
  EXPECT_EQ(tier->CopyIn(pages[1], 4096 - 99, data).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->CopyOut(pages[0], 5000, back).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->CopyIn(7, 0, data).code(), absl::StatusCode::kInvalidArgument);
  tier->Free(pages);
}

TEST(HostTierTest, CopyBetweenTiers) {
  auto a = std::move(HostTier::Create("a", 4096, 4096)).value();
  auto b = std::move(HostTier::Create("b", 8192, 8192)).value();
  std::vector<PageId> pa, pb;
  ASSERT_TRUE(a->Allocate(1, &pa).ok());
  ASSERT_TRUE(b->Allocate(1, &pb).ok());
  std::vector<uint8_t> data(64, 0x5A);
  ASSERT_TRUE(a->CopyIn(pa[0], 128, data).ok());
  ASSERT_TRUE(CopyBetweenTiers(*a, pa[0], 128, *b, pb[0], 4000, 64).ok());
  std::vector<uint8_t> back(64);
  ASSERT_TRUE(b->CopyOut(pb[0], 4000, back).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(CopyBetweenTiers(*a, pa[0], 4090, *b, pb[0], 0, 64).code(),
            absl::StatusCode::kInvalidArgument);
  a->Free(pa);
  b->Free(pb);
}

TEST(HostTierTest, UnmappedTiersHaveNoDeviceAddresses) {
  auto tier = std::move(HostTier::Create("host", 4 * 4096, 4096)).value();
  EXPECT_EQ(tier->cuda_device(), -1);
  EXPECT_EQ(tier->DeviceAddress(0), nullptr);
  EXPECT_EQ(tier->arena(), tier->HostAddress(0));
  EXPECT_EQ(tier->arena_bytes(), 4u * 4096);
}

TEST(HostTierTest, AMappedTierReportsEachPagesDeviceAddressAndUnmapsBeforeItsMemoryGoes) {
  // The device base stands in for cudaHostGetDevicePointer's; the core never dereferences it.
  static uint8_t device_view[1];
  int unmapped = 0;
  {
    auto tier = std::move(HostTier::Create("host", 4 * 8192, 8192)).value();
    tier->MapOnDevice(3, device_view, [&] {
      ++unmapped;
      // Still the tier's memory: the unmap runs before it is freed.
    });
    EXPECT_EQ(tier->cuda_device(), 3);
    EXPECT_EQ(tier->DeviceAddress(0), device_view);
    EXPECT_EQ(tier->DeviceAddress(2), device_view + 2 * 8192);
    EXPECT_EQ(tier->DeviceAddress(4), nullptr);  // past the last page
    EXPECT_NE(tier->HostAddress(2), nullptr);    // still host memory too
    EXPECT_EQ(unmapped, 0);
  }
  EXPECT_EQ(unmapped, 1);
}

TEST(HostTierTest, ALeaseOverAMappedTierGivesDeviceAddressesOfTheSameBytes) {
  static uint8_t device_view[1];
  auto tier = std::move(HostTier::Create("host", 64 * 4096, 4096)).value();
  const uint8_t* const arena = tier->arena();
  tier->MapOnDevice(0, device_view, [] {});
  std::vector<std::unique_ptr<MemoryTier>> tiers;
  tiers.push_back(std::move(tier));
  auto store = std::move(CheckpointStore::Create(QuietOptions(), std::move(tiers))).value();
  const NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(SmallSpec()));
  ASSERT_TRUE(PutSeeded(*store, ns, HashOf(1), PositionAt(2), {0, 4}, 7).ok());
  absl::StatusOr<ReadLease> lease = store->Get(ns.id, HashOf(1), {1, 3});
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->cuda_device(), 0);
  EXPECT_TRUE(lease->host_addressable());
  for (int layer = 0; layer < lease->layers(); ++layer) {
    for (int head = 1; head < 3; ++head) {
      EXPECT_EQ(lease->DeviceUnit(layer, head) - device_view,
                lease->Unit(layer, head).data() - arena)
          << layer << " " << head;
    }
  }
}

}  // namespace
}  // namespace leapcache::core
