// The GPU memory tier on the device: page bookkeeping and copies, and a CheckpointStore whose
// fastest tier is device memory: puts land on the GPU, overflow spills to the host tier, gets
// return every checkpoint byte for byte, a hit on a spilled checkpoint promotes it back, and the
// GPU tier never holds more than its budget. A commit into the GPU tier checks its units on the
// device (DeviceTier::DigestUnits) with exactly the answers the host's checks give the same
// bytes, and a writer copies into a reservation's device addresses itself (WriteInPlace).
#include "service/cuda/device_tier.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gpu/format/format.h"
#include "service/core/checkpoint_store.h"
#include "service/core/host_tier.h"
#include "service/core/unit_digest.h"
#include "tests/unit/core/digest_comparison.h"
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

// The kernel's digests against the CPU reference (core::DigestUnit) on fresh random units:
// shapes whose blobs and units end anywhere (odd sizes, units at any alignment in their page),
// every value rule, bad values planted at random, outputs poisoned before each run.
TEST(UnitDigestKernelTest, MatchesTheCpuReference) {
  constexpr size_t kPage = size_t{1} << 20;
  auto tier = std::move(DeviceTier::Create("gpu", 0, size_t{32} << 20, kPage)).value();
  std::mt19937_64 rng(0x5eed2026);
  const core::ValueRule rules[] = {core::ValueRule::kPositiveFp32, core::ValueRule::kFiniteFp32,
                                   core::ValueRule::kFiniteBf16, core::ValueRule::kFiniteFp16};
  int compared = 0, with_bad = 0;
  for (int shape = 0; shape < 24; ++shape) {
    core::UnitLayout layout;
    layout.blob_bytes = 64 + rng() % 40000;
    layout.unit_bytes = layout.blob_bytes + (shape % 3 == 0 ? 0 : rng() % 3000);
    layout.num_ranges = static_cast<int>(rng() % (core::kMaxValueRanges + 1));
    for (int r = 0; r < layout.num_ranges; ++r) {
      const core::ValueRule rule = rules[rng() % 4];
      const uint64_t width =
          rule == core::ValueRule::kFiniteBf16 || rule == core::ValueRule::kFiniteFp16 ? 2 : 4;
      const uint64_t offset = rng() % (layout.unit_bytes - width);
      const uint64_t elements = 1 + rng() % ((layout.unit_bytes - offset) / width);
      layout.ranges[r] = {offset, elements * width, rule};
    }
    const size_t units = 1 + rng() % 300, per_page = kPage / layout.unit_bytes;
    std::vector<core::PageId> pages;
    ASSERT_TRUE(tier->Allocate((units + per_page - 1) / per_page, &pages).ok());
    std::vector<uint8_t> bytes(units * layout.unit_bytes);
    // Mostly values every rule accepts (small positive floats), then damage here and there.
    for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
      const float x = 0.5f + static_cast<float>(rng() % 1000) / 1000.0f;
      std::memcpy(&bytes[i], &x, 4);
    }
    for (size_t i = 0; i < bytes.size() / 64; ++i) bytes[rng() % bytes.size()] = rng() & 0xFF;
    for (int planted = static_cast<int>(rng() % 6); planted > 0; --planted) {
      const uint32_t bad[] = {0x7FC00000u, 0xFF800000u, 0u, 0x7C00u, 0x7F80u};
      const size_t at = rng() % (bytes.size() - 4);
      std::memcpy(&bytes[at], &bad[rng() % 5], 4);
    }
    std::vector<core::MemoryTier::UnitPlace> places(units);
    for (size_t i = 0; i < units; ++i) {
      places[i] = {pages[i / per_page], (i % per_page) * layout.unit_bytes};
      ASSERT_TRUE(tier->CopyIn(places[i].page, places[i].offset,
                               std::span<const uint8_t>(bytes).subspan(i * layout.unit_bytes,
                                                                       layout.unit_bytes))
                      .ok());
    }
    std::vector<core::UnitDigest> out(units);
    std::memset(static_cast<void*>(out.data()), 0xA5, out.size() * sizeof(out[0]));
    ASSERT_TRUE(tier->DigestUnits(places, layout, out).ok());
    for (size_t i = 0; i < units; ++i) {
      const core::UnitDigest want = core::DigestUnit(
          std::span<const uint8_t>(bytes).subspan(i * layout.unit_bytes, layout.unit_bytes),
          layout);
      SCOPED_TRACE(absl::StrCat("shape ", shape, " unit ", i));
      ASSERT_EQ(out[i].unit_crc, want.unit_crc);
      ASSERT_EQ(out[i].payload_crc, want.payload_crc);
      ASSERT_EQ(out[i].first_bad, want.first_bad);
      ASSERT_EQ(std::memcmp(out[i].header, want.header, core::kDigestHeaderBytes), 0);
      ++compared;
      if (want.first_bad != core::kNoBadValue) ++with_bad;
    }
    tier->Free(pages);
  }
  EXPECT_GT(with_bad, 0);
  std::printf("unit digests: %d units equal to the CPU reference (%d with a bad value)\n", compared,
              with_bad);
}

// The fixture's digesting store on the GPU tier: the kernel's digests.
class DigestTest : public core::testing::DigestComparisonTest {
 protected:
  std::unique_ptr<core::MemoryTier> MakeDigestingTier(size_t budget_bytes,
                                                      size_t page_bytes) override {
    return std::move(DeviceTier::Create("gpu", 0, budget_bytes, page_bytes)).value();
  }
};

TEST_F(DigestTest, TheDeviceChecksAnswerAsTheHostChecks) {
  int refused = 0;
  CompareCorruptedCommits(&refused);
  std::printf("%d corrupted puts refused alike on the device and the host\n", refused);
}

// A writer copies a put's blobs into the device addresses WriteInPlace gives (as the data
// plane does from an engine's mapped buffer), and the commit checks them where they are.
TEST_F(DigestTest, AWriterCopiesIntoTheReservationsDeviceAddresses) {
  Open(SpecWithSide(BlobSpec::Leap(StateKind::kGdn, 8, 32, 32), DType::kBf16));
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 3, all());
  void* staged = nullptr;
  ASSERT_EQ(cudaMalloc(&staged, bytes.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(staged, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  core::PutRequest req;
  req.ns = ns_.id;
  req.hash = HashOf(1);
  req.position = PositionAt(1);
  req.heads = all();
  absl::StatusOr<core::Reservation> r = digesting_->Reserve(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->units.empty());  // not host-addressable
  const absl::Status written =
      digesting_->WriteInPlace(r->id, [&](const core::CheckpointStore::UnitAddresses& at) {
        EXPECT_EQ(at.cuda_device, 0);
        EXPECT_EQ(at.units.size(), ns_.Units(all()));
        for (size_t i = 0; i < at.units.size(); ++i) {
          if (cudaMemcpy(at.units[i], static_cast<uint8_t*>(staged) + i * ns_.unit_bytes,
                         ns_.unit_bytes, cudaMemcpyDeviceToDevice) != cudaSuccess) {
            return absl::InternalError("copy");
          }
        }
        return absl::OkStatus();
      });
  ASSERT_TRUE(written.ok()) << written;
  ASSERT_TRUE(digesting_->Commit(r->id, Crc(bytes)).ok());
  absl::StatusOr<core::ReadLease> lease = digesting_->Get(ns_.id, HashOf(1), all());
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(LeaseBytes(*lease), bytes);
  cudaFree(staged);
}

// What a commit costs where the units lie, printed (not asserted): a one-layer and a 32-layer
// checkpoint of 32 heads, 128 x 128 at 8 bits, committed in the GPU tier and in a host tier from
// the same bytes; the median of 20 commits each.
TEST(CommitTimeTest, PrintsTheCommitsCostOnTheDeviceAndTheHost) {
  for (int layers : {1, 32}) {
    const core::NamespaceSpec spec =
        SmallSpec("tenant-time", layers, 32, BlobSpec::Leap(StateKind::kGdn, 8, 128, 128));
    double median_us[2] = {};
    size_t total_bytes = 0;
    for (int on_device = 0; on_device < 2; ++on_device) {
      std::vector<std::unique_ptr<core::MemoryTier>> tiers;
      constexpr size_t kPage = size_t{1} << 20, kBytes = size_t{64} << 20;
      if (on_device != 0) {
        tiers.push_back(std::move(DeviceTier::Create("gpu", 0, kBytes, kPage)).value());
      } else {
        tiers.push_back(std::move(core::HostTier::Create("host", kBytes, kPage)).value());
      }
      auto store =
          std::move(core::CheckpointStore::Create(QuietOptions(), std::move(tiers))).value();
      const core::NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(spec));
      const core::HeadRange heads{0, 32};
      const std::vector<uint8_t> bytes = CheckpointBytes(ns, 11, heads);
      const uint32_t crc = Crc(bytes);
      total_bytes = bytes.size();
      std::vector<double> us;
      for (int rep = 0; rep < 20; ++rep) {
        core::PutRequest req;
        req.ns = ns.id;
        req.hash = HashOf(rep);
        req.position = PositionAt(1);
        req.heads = heads;
        absl::StatusOr<core::Reservation> r = store->Reserve(req);
        ASSERT_TRUE(r.ok()) << r.status();
        ASSERT_TRUE(store->Upload(r->id, 0, bytes).ok());
        const absl::Time t0 = absl::Now();
        ASSERT_TRUE(store->Commit(r->id, crc).ok());
        us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
        ASSERT_TRUE(store->Delete(ns.id, HashOf(rep)).ok());
      }
      std::sort(us.begin(), us.end());
      median_us[on_device] = us[us.size() / 2];
    }
    // The tier's digests alone, over the same units placed as a put places them.
    double digest_us = 0;
    {
      constexpr size_t kPage = size_t{1} << 20;
      std::unique_ptr<DeviceTier> owned =
          std::move(DeviceTier::Create("gpu", 0, size_t{64} << 20, kPage)).value();
      DeviceTier* const tier = owned.get();
      std::vector<std::unique_ptr<core::MemoryTier>> tiers;
      tiers.push_back(std::move(owned));
      auto store =
          std::move(core::CheckpointStore::Create(QuietOptions(), std::move(tiers))).value();
      const core::NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(spec));
      const size_t units = ns.Units({0, 32}), per_page = kPage / ns.unit_bytes;
      std::vector<core::PageId> pages;
      ASSERT_TRUE(tier->Allocate((units + per_page - 1) / per_page, &pages).ok());
      const std::vector<uint8_t> bytes = CheckpointBytes(ns, 11, {0, 32});
      std::vector<core::MemoryTier::UnitPlace> places(units);
      for (size_t i = 0; i < units; ++i) {
        places[i] = {pages[i / per_page], (i % per_page) * ns.unit_bytes};
        const std::span<const uint8_t> unit =
            std::span<const uint8_t>(bytes).subspan(i * ns.unit_bytes, ns.unit_bytes);
        ASSERT_TRUE(tier->CopyIn(places[i].page, places[i].offset, unit).ok());
      }
      core::UnitLayout layout;
      layout.unit_bytes = ns.unit_bytes;
      layout.blob_bytes = ns.blob_bytes;
      std::vector<core::UnitDigest> out(units);
      std::vector<double> us;
      for (int rep = 0; rep < 20; ++rep) {
        const absl::Time t0 = absl::Now();
        ASSERT_TRUE(tier->DigestUnits(places, layout, out).ok());
        us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
      }
      std::sort(us.begin(), us.end());
      digest_us = us[us.size() / 2];
      EXPECT_EQ(out[0].unit_crc, Crc32c(bytes.data(), ns.unit_bytes));
      tier->Free(pages);
    }
    std::printf(
        "commit of %d layer(s), %zu bytes: %.1f us in the GPU tier (its digests alone %.1f us), "
        "%.1f us in a host tier\n",
        layers, total_bytes, median_us[1], digest_us, median_us[0]);
  }
}

}  // namespace
}  // namespace leapcache::cuda
