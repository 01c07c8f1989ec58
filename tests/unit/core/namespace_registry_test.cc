#include "service/core/namespace_registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "test_util.h"

namespace leapcache::core {
namespace {

using testing::SmallLeap;
using testing::SmallSpec;

TEST(NamespaceRegistryTest, RegisterIsIdempotentAndDerivesSizes) {
  NamespaceRegistry reg(1 << 20);
  absl::StatusOr<NamespaceId> a = reg.Register(SmallSpec());
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<NamespaceId> again = reg.Register(SmallSpec());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*a, *again);
  EXPECT_EQ(reg.size(), 1u);

  absl::StatusOr<const NamespaceInfo*> info = reg.Find(*a);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ((*info)->id, *a);
  EXPECT_EQ((*info)->blob_bytes, ComputeLayout(SmallLeap()).blob_bytes());
  EXPECT_EQ((*info)->slot_bytes % kSlotAlignment, 0u);
  EXPECT_GE((*info)->slot_bytes, (*info)->blob_bytes);
  EXPECT_LT((*info)->slot_bytes - (*info)->blob_bytes, kSlotAlignment);
  EXPECT_EQ((*info)->fp32_bytes_per_blob, 16u * 16u * 4u);
  EXPECT_EQ((*info)->format_label, "leap8");
  EXPECT_EQ((*info)->Units(HeadRange{1, 3}), 4u);  // 2 layers x 2 heads
  // No hint: the linear layers' cost, 8 dk dv per head per layer.
  EXPECT_DOUBLE_EQ((*info)->flops_per_token, 8.0 * 16 * 16 * 4 * 2);
}

TEST(NamespaceRegistryTest, EveryIdentityFieldSeparatesNamespaces) {
  NamespaceRegistry reg(1 << 20);
  const NamespaceId base = *reg.Register(SmallSpec());
  std::vector<NamespaceSpec> variants;
  variants.push_back(SmallSpec("tenant-b"));
  variants.push_back(SmallSpec("tenant-a", 3));
  variants.push_back(SmallSpec("tenant-a", 2, 8));
  variants.push_back(SmallSpec("tenant-a", 2, 4, SmallLeap(StateKind::kKda)));
  variants.push_back(SmallSpec("tenant-a", 2, 4, BlobSpec::Leap(StateKind::kGdn, 4, 16, 16)));
  variants.push_back(SmallSpec("tenant-a", 2, 4, SmallLeap(StateKind::kGdn, 32)));
  NamespaceSpec p8 = SmallSpec();
  p8.format.p = 8;
  variants.push_back(p8);
  NamespaceSpec no_smooth = SmallSpec();
  no_smooth.format.smoothing = false;
  variants.push_back(no_smooth);
  std::set<NamespaceId> ids = {base};
  for (const NamespaceSpec& v : variants) {
    absl::StatusOr<NamespaceId> id = reg.Register(v);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_TRUE(ids.insert(*id).second) << "collided: " << v.format.ToString();
  }
  EXPECT_EQ(reg.size(), variants.size() + 1);
}

TEST(NamespaceRegistryTest, TheFlopsHintIsNotIdentity) {
  NamespaceRegistry reg(1 << 20);
  NamespaceSpec hinted = SmallSpec();
  hinted.flops_per_token = 5e10;
  const NamespaceId a = *reg.Register(hinted);
  NamespaceSpec other = SmallSpec();
  other.flops_per_token = 1e9;
  EXPECT_EQ(*reg.Register(other), a);
  EXPECT_DOUBLE_EQ((*reg.Find(a))->flops_per_token, 5e10);  // the first hint stays
}

TEST(NamespaceRegistryTest, RejectsBadSpecsNamingTheField) {
  NamespaceRegistry reg(4096);
  const auto expect_invalid = [&](NamespaceSpec s, const std::string& needle) {
    absl::StatusOr<NamespaceId> id = reg.Register(s);
    ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(id.status().message().find(needle), std::string::npos) << id.status();
  };
  expect_invalid(SmallSpec(""), "tenant");
  expect_invalid(SmallSpec(std::string(kMaxTenantBytes + 1, 'x')), "tenant");
  expect_invalid(SmallSpec("t", 0), "linear_layers");
  expect_invalid(SmallSpec("t", kMaxLayers + 1), "linear_layers");
  expect_invalid(SmallSpec("t", 2, 0), "total_heads");
  NamespaceSpec dk = SmallSpec();
  dk.model.dk = 32;
  expect_invalid(dk, "dk");
  NamespaceSpec kind = SmallSpec();
  kind.model.kind = StateKind::kKda;
  expect_invalid(kind, "kind");
  NamespaceSpec bad_format = SmallSpec();
  bad_format.format.bits = 7;
  expect_invalid(bad_format, "format: bits");
  NamespaceSpec flops = SmallSpec();
  flops.flops_per_token = -1;
  expect_invalid(flops, "flops_per_token");
  // A 256 x 256 fp32 blob (256 KiB + 64) does not fit a 4 KiB page.
  BlobSpec fp32;
  fp32.codec = Codec::kFp32;
  fp32.bits = 32;
  fp32.p = 1;
  fp32.r = 0;
  fp32.smoothing = false;
  fp32.dk = fp32.dv = 256;
  expect_invalid(SmallSpec("t", 2, 4, fp32), "page");
  EXPECT_EQ(reg.size(), 0u);  // nothing registered by the failures
}

TEST(NamespaceRegistryTest, UnknownIdsAreNotFound) {
  NamespaceRegistry reg(1 << 20);
  EXPECT_EQ(reg.Find(0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.Find(1).status().code(), absl::StatusCode::kNotFound);
  const NamespaceId id = *reg.Register(SmallSpec());
  EXPECT_TRUE(reg.Find(id).ok());
  EXPECT_EQ(reg.Find(id + 1).status().code(), absl::StatusCode::kNotFound);
}

TEST(NamespaceRegistryTest, IdsAndTagsDependOnTheIdentityNotOnTheOrder) {
  // Two servers, or one before and after a restart, registering in opposite orders.
  NamespaceRegistry first(1 << 20), second(1 << 20);
  const NamespaceSpec a = SmallSpec("tenant-a"), b = SmallSpec("tenant-b", 1);
  const NamespaceId a1 = *first.Register(a), b1 = *first.Register(b);
  const NamespaceId b2 = *second.Register(b), a2 = *second.Register(a);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(b1, b2);
  EXPECT_NE(a1, b1);
  const uint64_t tag_a = (*first.Find(a1))->tag;
  EXPECT_EQ(tag_a, NamespaceTag(a));
  EXPECT_EQ((*second.Find(a2))->tag, tag_a);
  EXPECT_NE(tag_a, NamespaceTag(b));
  // The flops hint is not identity; the tenant is.
  NamespaceSpec hinted = a;
  hinted.flops_per_token = 1e9;
  EXPECT_EQ(NamespaceTag(hinted), tag_a);
  EXPECT_TRUE(first.FindTagged(a1, tag_a).ok());
  EXPECT_TRUE(first.FindTagged(a1, 0).ok());  // unchecked
  EXPECT_EQ(first.FindTagged(a1, NamespaceTag(b)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(first.FindTagged(a1 + 7, tag_a).status().code(), absl::StatusCode::kNotFound);
}

TEST(NamespaceRegistryTest, AnIdThatCameToNameAnotherNamespaceIsRefused) {
  // x and y want the same id; whoever registers first gets it, the other the next one.
  auto spec = [](const std::string& t) { return SmallSpec(t); };
  const auto [x, y] = testing::TenantsWithCollidingIds(spec, spec);
  NamespaceRegistry before(1 << 20), after(1 << 20);
  const NamespaceId x_before = *before.Register(SmallSpec(x));
  const NamespaceId y_before = *before.Register(SmallSpec(y));
  EXPECT_EQ(y_before, x_before + 1);
  // After a restart y registers first and takes the id x's engine still holds.
  const NamespaceId y_after = *after.Register(SmallSpec(y));
  const NamespaceId x_after = *after.Register(SmallSpec(x));
  ASSERT_EQ(y_after, x_before);
  EXPECT_EQ(x_after, y_before);
  const absl::Status stale = after.FindTagged(x_before, NamespaceTag(SmallSpec(x))).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_NE(stale.message().find("namespace_tag"), std::string::npos) << stale;
  EXPECT_TRUE(after.FindTagged(x_after, NamespaceTag(SmallSpec(x))).ok());
}

TEST(NamespaceRegistryTest, FormatLabels) {
  EXPECT_EQ(FormatLabel(BlobSpec::Leap(StateKind::kGdn, 6)), "leap6");
  BlobSpec row;
  row.codec = Codec::kIntRow;
  row.bits = 4;
  EXPECT_EQ(FormatLabel(row), "int-row4");
  BlobSpec bf;
  bf.codec = Codec::kBf16;
  bf.bits = 16;
  EXPECT_EQ(FormatLabel(bf), "bf16");
}

}  // namespace
}  // namespace leapcache::core
