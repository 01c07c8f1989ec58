// The GPU memory tier on the device: page bookkeeping and copies, and a CheckpointStore whose
// fastest tier is device memory: puts land on the GPU, overflow spills to the host tier, gets
// return every checkpoint byte for byte, a hit on a spilled checkpoint promotes it back, and the
// GPU tier never holds more than its budget.
#include "service/cuda/device_tier.h"

#include <gtest/gtest.h>

#include <random>

#include "service/core/checkpoint_store.h"
#include "service/core/host_tier.h"
#include "tests/unit/core/test_util.h"

namespace leapcache::cuda {
namespace {

using namespace leapcache::core::testing;  // NOLINT

TEST(DeviceTierTest, PagesAndCopies) {
  auto tier = std::move(DeviceTier::Create("gpu", 0, 8 * 65536 + 100, 65536)).value();
  EXPECT_EQ(tier->capacity_pages(), 8u);
  EXPECT_EQ(tier->HostAddress(0), nullptr);
  std::vector<core::PageId> pages;
  ASSERT_TRUE(tier->Allocate(8, &pages).ok());
  EXPECT_EQ(tier->Allocate(1, &pages).code(), absl::StatusCode::kResourceExhausted);
  std::mt19937 rng(1);
  std::vector<uint8_t> in(65536), out(65536, 0xEE);
  for (uint8_t& b : in) b = static_cast<uint8_t>(rng());
  for (core::PageId p : pages) ASSERT_TRUE(tier->CopyIn(p, 0, in).ok());
  ASSERT_TRUE(tier->CopyOut(pages[5], 0, out).ok());
  EXPECT_EQ(in, out);
  std::vector<uint8_t> part(100);
  ASSERT_TRUE(tier->CopyOut(pages[2], 1000, part).ok());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), in.begin() + 1000));
  EXPECT_EQ(tier->CopyIn(pages[0], 65500, part).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->CopyOut(8, 0, part).code(), absl::StatusCode::kInvalidArgument);
  tier->Free(pages);
  EXPECT_EQ(tier->used_pages(), 0u);
  EXPECT_EQ(DeviceTier::Create("gpu", 99, 1 << 20, 65536).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(DeviceTier::Create("gpu", 0, 1 << 20, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceTierTest, StoreSpillsFromTheGpuAndPromotesBack) {
  std::vector<std::unique_ptr<core::MemoryTier>> tiers;
  tiers.push_back(std::move(DeviceTier::Create("gpu", 0, 16 * 4096, 4096)).value());
  tiers.push_back(std::move(core::HostTier::Create("host", 256 * 4096, 4096)).value());
  core::StoreOptions options = QuietOptions();
  auto store = std::move(core::CheckpointStore::Create(options, std::move(tiers))).value();
  const core::NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(SmallSpec()));
  const core::HeadRange all{0, ns.spec.model.total_heads};
  // Each checkpoint takes several GPU pages; 12 of them cannot all stay on the GPU.
  constexpr int kCheckpoints = 12;
  for (int i = 0; i < kCheckpoints; ++i) {
    const std::vector<uint8_t> bytes = CheckpointBytes(ns, i, all);
    ASSERT_TRUE(PutBytes(*store, ns.id, HashOf(i), PositionAt(1), all, bytes).ok()) << i;
    EXPECT_LE(store->tier(0).used_pages(), store->tier(0).capacity_pages());
  }
  int on_gpu = 0, on_host = 0, spilled = -1;
  for (int i = 0; i < kCheckpoints; ++i) {
    const std::vector<int> where = *store->ResidentTiers(ns.id, HashOf(i));
    ASSERT_FALSE(where.empty()) << i;
    if (where.front() == 0) {
      ++on_gpu;
    } else {
      ++on_host;
      if (spilled < 0) spilled = i;
    }
  }
  EXPECT_GT(on_gpu, 0);
  ASSERT_GT(on_host, 0);
  // A hit on a spilled checkpoint promotes it back to the GPU.
  ASSERT_TRUE(store->Get(ns.id, HashOf(spilled), all).ok());
  EXPECT_EQ(store->ResidentTiers(ns.id, HashOf(spilled))->front(), 0);
  // Every checkpoint comes back exactly, from whichever tier holds it.
  for (int i = 0; i < kCheckpoints; ++i) {
    absl::StatusOr<core::ReadLease> lease = store->Get(ns.id, HashOf(i), all);
    ASSERT_TRUE(lease.ok()) << lease.status();
    std::vector<uint8_t> got(lease->total_bytes());
    ASSERT_TRUE(lease->CopyAll(got).ok());
    EXPECT_EQ(got, CheckpointBytes(ns, i, all)) << "checkpoint " << i;
  }
  const core::StoreStats stats = store->Stats();
  EXPECT_GT(stats.spills, 0u);
  EXPECT_GT(stats.promotions, 0u);
  std::printf("GPU tier: %d checkpoints on the GPU, %d on the host, %llu spills, %llu promotions\n",
              on_gpu, on_host, static_cast<unsigned long long>(stats.spills),
              static_cast<unsigned long long>(stats.promotions));
}

}  // namespace
}  // namespace leapcache::cuda
