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

#include "gpu/format/format.h"
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

BlobSpec Format(Codec codec, int bits, int d) {
  if (codec == Codec::kLeap) return BlobSpec::Leap(StateKind::kGdn, bits, d, d);
  BlobSpec s;
  s.kind = StateKind::kGdn;
  s.dk = d;
  s.dv = d;
  s.codec = codec;
  s.bits = bits;
  s.p = 1;
  s.r = 0;
  s.smoothing = false;
  return s;
}

core::NamespaceSpec SpecWithSide(const BlobSpec& format, DType conv) {
  core::NamespaceSpec spec = SmallSpec("tenant-digest", 3, 4, format);
  if (conv != DType{}) {
    spec.model.conv = {4 * 8, 3, conv};  // 8 channels per head, width 3
    spec.model.extra_bytes = 5;
  }
  return spec;
}

void SetU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void SetU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// One store on the GPU tier and one on a host tier, the same namespace in each: every put is
// committed in both from the same bytes, and the two answers must be the same.
class DigestTest : public ::testing::Test {
 protected:
  void Open(const core::NamespaceSpec& spec) {
    std::vector<std::unique_ptr<core::MemoryTier>> d, h;
    d.push_back(std::move(DeviceTier::Create("gpu", 0, 64 * 65536, 65536)).value());
    h.push_back(std::move(core::HostTier::Create("host", 64 * 65536, 65536)).value());
    device_ = std::move(core::CheckpointStore::Create(QuietOptions(), std::move(d))).value();
    host_ = std::move(core::CheckpointStore::Create(QuietOptions(), std::move(h))).value();
    ns_ = *device_->GetNamespace(*device_->RegisterNamespace(spec));
    ASSERT_EQ(*host_->RegisterNamespace(spec), ns_.id);
  }
  // Commits `bytes` (with `crc`) in both stores; the device store's status, after checking
  // that the host store's is the same code and message.
  absl::Status CommitBoth(const std::vector<uint8_t>& bytes, uint32_t crc, int key) {
    absl::Status answers[2];
    core::CheckpointStore* stores[2] = {device_.get(), host_.get()};
    for (int i = 0; i < 2; ++i) {
      core::PutRequest req;
      req.ns = ns_.id;
      req.hash = HashOf(key);
      req.position = PositionAt(1);
      req.heads = all();
      absl::StatusOr<core::Reservation> r = stores[i]->Reserve(req);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return r.status();
      EXPECT_TRUE(stores[i]->Upload(r->id, 0, bytes).ok());
      answers[i] = stores[i]->Commit(r->id, crc);
      if (!answers[i].ok()) {
        EXPECT_TRUE(stores[i]->Abort(r->id).ok());
      }
    }
    EXPECT_EQ(answers[0].code(), answers[1].code()) << answers[0] << " / " << answers[1];
    EXPECT_EQ(answers[0].message(), answers[1].message());
    return answers[0];
  }
  core::HeadRange all() const { return {0, ns_.spec.model.total_heads}; }
  uint8_t* Unit(std::vector<uint8_t>& bytes, size_t u) const {
    return bytes.data() + u * ns_.unit_bytes;
  }
  // Reseals unit u's blob after its payload changed, so that only the values are wrong.
  void Reseal(std::vector<uint8_t>& bytes, size_t u) const {
    SealBlob(ns_.spec.format, std::span<uint8_t>(Unit(bytes, u), ns_.blob_bytes));
  }
  void ResealHeader(std::vector<uint8_t>& bytes, size_t u) const {
    uint8_t* h = Unit(bytes, u);
    SetU32(h + header::kHeaderCrc, Crc32c(h, header::kHeaderCrc));
  }

  std::unique_ptr<core::CheckpointStore> device_, host_;
  core::NamespaceInfo ns_;
};

TEST_F(DigestTest, TheDeviceChecksAnswerAsTheHostChecks) {
  struct Case {
    Codec codec;
    int bits;
    DType conv;
  };
  const Case cases[] = {{Codec::kLeap, 8, DType::kBf16},  {Codec::kLeap, 4, DType{}},
                        {Codec::kLeap, 6, DType::kFp32},  {Codec::kIntRow, 8, DType::kFp16},
                        {Codec::kIntCol, 4, DType{}},     {Codec::kFp32, 32, DType::kFp16},
                        {Codec::kBf16, 16, DType::kFp32}, {Codec::kFp16, 16, DType::kBf16}};
  std::mt19937 rng(20261204);
  int key = 0, refused = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(Format(c.codec, c.bits, 32).ToString() + " conv " +
                 std::to_string(static_cast<int>(c.conv)));
    Open(SpecWithSide(Format(c.codec, c.bits, 32), c.conv));
    const size_t units = ns_.Units(all());
    const PayloadLayout l = ComputeLayout(ns_.spec.format);
    const std::vector<uint8_t> clean = CheckpointBytes(ns_, 7, all());
    auto any_unit = [&] { return static_cast<size_t>(rng() % units); };
    // Each corruption of the clean bytes; the answers are compared inside CommitBoth.
    std::vector<std::pair<std::string, std::function<void(std::vector<uint8_t>&)>>> edits;
    edits.push_back({"none", [](std::vector<uint8_t>&) {}});
    edits.push_back({"payload byte", [&](std::vector<uint8_t>& b) {
                       Unit(b, any_unit())[kHeaderBytes + rng() % l.payload_bytes] ^= 0x10;
                     }});
    edits.push_back(
        {"header byte", [&](std::vector<uint8_t>& b) { Unit(b, any_unit())[header::kDk] ^= 1; }});
    edits.push_back({"declared bits", [&](std::vector<uint8_t>& b) {
                       const size_t u = any_unit();
                       Unit(b, u)[header::kBits] = c.bits == 8 ? 4 : 8;
                       ResealHeader(b, u);
                     }});
    edits.push_back({"reserved byte", [&](std::vector<uint8_t>& b) {
                       const size_t u = any_unit();
                       Unit(b, u)[header::kReserved + 3] = 1;
                       ResealHeader(b, u);
                     }});
    const auto value = [&](size_t offset, size_t bytes, size_t width, uint32_t bad) {
      return [&, offset, bytes, width, bad](std::vector<uint8_t>& b) {
        const size_t u = any_unit();
        const size_t n = bytes / width;
        // Two bad elements: the lower one is reported.
        for (size_t e : {rng() % n, rng() % n}) {
          uint8_t* p = Unit(b, u) + offset + e * width;
          if (width == 4)
            SetU32(p, bad);
          else
            SetU16(p, static_cast<uint16_t>(bad));
        }
        if (offset < ns_.blob_bytes) Reseal(b, u);
      };
    };
    const size_t payload = kHeaderBytes;
    if (l.row_scale_bytes > 0) {
      for (uint32_t bad : {0x7FC00000u, 0u, 0xBF800000u, 0x7F800000u}) {
        edits.push_back(
            {"row scale", value(payload + l.row_scale_offset, l.row_scale_bytes, 4, bad)});
      }
    }
    if (l.col_scale_bytes > 0) {
      edits.push_back(
          {"column scale", value(payload + l.col_scale_offset, l.col_scale_bytes, 4, 0x80000000u)});
    }
    if (c.codec == Codec::kFp32) {
      edits.push_back(
          {"fp32 element", value(payload + l.codes_offset, l.codes_bytes, 4, 0xFF800001u)});
    } else if (c.codec == Codec::kBf16) {
      edits.push_back({"bf16 element", value(payload + l.codes_offset, l.codes_bytes, 2, 0x7F81u)});
    } else if (c.codec == Codec::kFp16) {
      edits.push_back({"fp16 element", value(payload + l.codes_offset, l.codes_bytes, 2, 0xFC00u)});
    }
    if (l.comp_bytes > 0) {
      edits.push_back({"compensator", value(payload + l.comp_offset, l.comp_bytes, 2, 0x7E00u)});
    }
    if (ns_.conv_bytes > 0) {
      const size_t width = DTypeBytes(c.conv);
      const uint32_t bad = width == 4 ? 0x7F800000u : c.conv == DType::kBf16 ? 0xFF80u : 0x7C00u;
      edits.push_back({"conv", value(ns_.blob_bytes, ns_.conv_bytes, width, bad)});
      // Bad values in two units: the first unit's is reported.
      edits.push_back({"conv in two units", [&, width, bad](std::vector<uint8_t>& b) {
                         for (size_t u : {units - 1, units / 2}) {
                           uint8_t* p = Unit(b, u) + ns_.blob_bytes +
                                        (rng() % (ns_.conv_bytes / width)) * width;
                           if (width == 4)
                             SetU32(p, bad);
                           else
                             SetU16(p, static_cast<uint16_t>(bad));
                         }
                       }});
    }
    for (auto& [name, edit] : edits) {
      SCOPED_TRACE(name);
      for (int round = 0; round < 3; ++round) {
        std::vector<uint8_t> bytes = clean;
        edit(bytes);
        const absl::Status st = CommitBoth(bytes, Crc(bytes), ++key);
        if (name == "none") {
          ASSERT_TRUE(st.ok()) << st;
          absl::StatusOr<core::ReadLease> lease = device_->Get(ns_.id, HashOf(key), all());
          ASSERT_TRUE(lease.ok()) << lease.status();
          EXPECT_EQ(LeaseBytes(*lease), bytes);
          EXPECT_EQ(lease->UnitCrc(ns_.spec.model.linear_layers - 1, all().end - 1),
                    Crc({bytes.data() + (units - 1) * ns_.unit_bytes, ns_.unit_bytes}));
        } else {
          EXPECT_FALSE(st.ok());
          ++refused;
        }
        if (name == "none") break;
      }
    }
    // The right bytes under the wrong checksum.
    EXPECT_EQ(CommitBoth(clean, Crc(clean) ^ 1, ++key).code(), absl::StatusCode::kDataLoss);
  }
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
  absl::StatusOr<core::Reservation> r = device_->Reserve(req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->units.empty());  // not host-addressable
  const absl::Status written =
      device_->WriteInPlace(r->id, [&](const core::CheckpointStore::UnitAddresses& at) {
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
  ASSERT_TRUE(device_->Commit(r->id, Crc(bytes)).ok());
  absl::StatusOr<core::ReadLease> lease = device_->Get(ns_.id, HashOf(1), all());
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
    std::printf(
        "commit of %d layer(s), %zu bytes: %.1f us in the GPU tier, %.1f us in a host tier\n",
        layers, total_bytes, median_us[1], median_us[0]);
  }
}

}  // namespace
}  // namespace leapcache::cuda
