// Unit digests without a GPU: the CPU reference (DigestUnit) on units built by hand, and the
// commit's checks from digests (blob_check.cc) against the host tier's checks over the bytes, on
// a host tier that hides its host addresses as device memory does and digests with the
// reference; and the copy-out path taken when such a tier computes no digests.
#include "service/core/unit_digest.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "gpu/format/crc32c.h"
#include "service/core/host_tier.h"
#include "tests/unit/core/digest_comparison.h"
#include "tests/unit/core/test_util.h"

namespace leapcache::core {
namespace {

using namespace testing;  // NOLINT

// A host tier seen as device memory is seen: no host addresses, so the store uploads into it,
// copies out of it and, when `digests`, commits from digests computed here by the reference.
class OpaqueTier final : public MemoryTier {
 public:
  OpaqueTier(std::unique_ptr<HostTier> memory, bool digests)
      : memory_(std::move(memory)), digests_(digests) {}

  const std::string& name() const override { return memory_->name(); }
  size_t page_bytes() const override { return memory_->page_bytes(); }
  size_t capacity_pages() const override { return memory_->capacity_pages(); }
  size_t used_pages() const override { return memory_->used_pages(); }
  absl::Status Allocate(size_t n, std::vector<PageId>* pages) override {
    return memory_->Allocate(n, pages);
  }
  void Free(std::span<const PageId> pages) override { memory_->Free(pages); }
  absl::Status CopyIn(PageId page, size_t offset, std::span<const uint8_t> src) override {
    return memory_->CopyIn(page, offset, src);
  }
  absl::Status CopyOut(PageId page, size_t offset, std::span<uint8_t> dst) const override {
    return memory_->CopyOut(page, offset, dst);
  }
  uint8_t* HostAddress(PageId) const override { return nullptr; }
  absl::Status DigestUnits(std::span<const UnitPlace> places, const UnitLayout& layout,
                           std::span<UnitDigest> out) const override {
    if (!digests_) return MemoryTier::DigestUnits(places, layout, out);
    std::vector<uint8_t> unit(layout.unit_bytes);
    for (size_t i = 0; i < places.size(); ++i) {
      if (absl::Status st = memory_->CopyOut(places[i].page, places[i].offset, unit); !st.ok()) {
        return st;
      }
      out[i] = DigestUnit(unit, layout);
    }
    return absl::OkStatus();
  }

 private:
  const std::unique_ptr<HostTier> memory_;
  const bool digests_;
};

class ReferenceDigestTest : public DigestComparisonTest {
 protected:
  std::unique_ptr<MemoryTier> MakeDigestingTier(size_t budget_bytes, size_t page_bytes) override {
    return std::make_unique<OpaqueTier>(
        std::move(HostTier::Create("opaque", budget_bytes, page_bytes)).value(), digests_);
  }
  bool digests_ = true;
};

void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }
void PutF(std::vector<uint8_t>& b, size_t at, float v) { std::memcpy(&b[at], &v, 4); }

TEST(DigestUnitTest, ChecksumsHeaderAndTheFirstBadValue) {
  UnitLayout layout;
  layout.blob_bytes = 200;
  layout.unit_bytes = 260;
  layout.num_ranges = 3;
  layout.ranges[0] = {64, 16, ValueRule::kPositiveFp32};  // 4 scales
  layout.ranges[1] = {80, 8, ValueRule::kFiniteFp16};     // 4 halves
  layout.ranges[2] = {200, 60, ValueRule::kFiniteBf16};   // the side state: 30 bf16
  std::vector<uint8_t> unit(260);
  for (size_t i = 0; i < unit.size(); ++i) unit[i] = static_cast<uint8_t>(i * 7 + 1);
  for (int e = 0; e < 4; ++e) PutF(unit, 64 + 4 * e, 1.5f);
  for (size_t i = 80; i < 88; ++i) unit[i] = 0;
  for (size_t i = 200; i < 260; ++i) unit[i] = 0x3F;

  UnitDigest d = DigestUnit(unit, layout);
  EXPECT_EQ(d.unit_crc, Crc32c(unit.data(), 260));
  EXPECT_EQ(d.payload_crc, Crc32c(unit.data() + 64, 136));
  EXPECT_EQ(std::memcmp(d.header, unit.data(), 64), 0);
  EXPECT_EQ(d.first_bad, kNoBadValue);

  // A NaN bf16 at side element 29 and an inf half at element 2 of range 1: range 1 ranks first.
  unit[200 + 58] = 0xC0;
  unit[200 + 59] = 0x7F;
  unit[80 + 4] = 0x00;
  unit[80 + 5] = 0x7C;
  d = DigestUnit(unit, layout);
  EXPECT_EQ(d.first_bad, (uint64_t{1} << kBadElementBits) | 2);
  // Scales: zero, negative, inf and NaN each break the positive rule; the lowest is reported.
  for (const uint32_t bad : {0u, 0xBF800000u, 0x7F800000u, 0x7FC00001u}) {
    std::vector<uint8_t> u = unit;
    Put32(u, 64 + 12, bad);
    Put32(u, 64 + 4, bad);
    EXPECT_EQ(DigestUnit(u, layout).first_bad, 1u) << bad;
  }
  // A denormal scale is positive and finite.
  PutF(unit, 64, 1e-40f);
  EXPECT_EQ(DigestUnit(unit, layout).first_bad, (uint64_t{1} << kBadElementBits) | 2);
}

TEST_F(ReferenceDigestTest, ChecksFromDigestsAnswerAsTheHostChecks) {
  int refused = 0;
  CompareCorruptedCommits(&refused);
  EXPECT_GT(refused, 100);
}

TEST_F(ReferenceDigestTest, ATierWithoutDigestsIsCopiedOutAndAnswersAlike) {
  digests_ = false;
  int refused = 0;
  CompareCorruptedCommits(&refused);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace leapcache::core
