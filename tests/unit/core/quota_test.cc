// Tenant quotas (options.h, TenantQuota): a tenant at its byte quota evicts its own checkpoints
// and never another's; reservations, pins, pending puts and namespaces past their quotas are
// RESOURCE_EXHAUSTED naming the quota, with nothing changed, and the other tenants unaffected;
// Stats counts each tenant exactly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "service/core/checkpoint_store.h"
#include "service/core/residency_table.h"
#include "tests/unit/core/test_util.h"

namespace leapcache::core {
namespace {

using testing::HashOf;
using testing::PositionAt;
using testing::PutSeeded;
using testing::SmallSpec;

constexpr size_t kPage = 4096;

class QuotaTest : public ::testing::Test {
 protected:
  void Make(TenantQuota quota, size_t budget = 128 * kPage) {
    StoreOptions options = testing::QuietOptions();
    options.tenant_quota = quota;
    store_ = testing::MakeStore({{"host", budget, kPage}}, options);
    a_ = Register("tenant-a");
    b_ = Register("tenant-b");
    per_ = PagesFor(a_.Units({0, 4}), a_.slot_bytes, kPage) * kPage;
  }
  // What Make's per_ will be (the tenants' namespaces are 2 x 4 blobs of 16 x 16).
  static uint64_t PerCheckpoint() {
    std::unique_ptr<CheckpointStore> s = testing::MakeStore({{"host", kPage * 4, kPage}});
    const NamespaceInfo ns = *s->GetNamespace(*s->RegisterNamespace(SmallSpec()));
    return PagesFor(ns.Units({0, 4}), ns.slot_bytes, kPage) * kPage;
  }
  NamespaceInfo Register(const std::string& tenant, int layers = 2) {
    absl::StatusOr<NamespaceId> id = store_->RegisterNamespace(SmallSpec(tenant, layers));
    EXPECT_TRUE(id.ok()) << id.status();
    return *store_->GetNamespace(*id);
  }
  absl::Status Put(const NamespaceInfo& ns, uint64_t i) {
    return PutSeeded(*store_, ns, HashOf(i), PositionAt(1), {0, 4}, i);
  }
  bool Hit(const NamespaceInfo& ns, uint64_t i) { return store_->Get(ns.id, HashOf(i), {0, 4}).ok(); }
  absl::StatusOr<Reservation> Reserve(const NamespaceInfo& ns, uint64_t i) {
    PutRequest r;
    r.ns = ns.id;
    r.hash = HashOf(i);
    r.position = PositionAt(1);
    r.heads = {0, 4};
    return store_->Reserve(r);
  }
  TenantStats Of(const std::string& tenant) {
    for (const TenantStats& t : store_->Stats().tenants) {
      if (t.tenant == tenant) return t;
    }
    ADD_FAILURE() << "no stats for " << tenant;
    return {};
  }

  std::unique_ptr<CheckpointStore> store_;
  NamespaceInfo a_, b_;
  uint64_t per_ = 0;  // bytes of one checkpoint of a_ or b_
};

TEST_F(QuotaTest, ATenantAtItsByteQuotaEvictsItsOwnCheckpointsNeverAnothers) {
  Make({.bytes = 8 * PerCheckpoint()});
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(Put(b_, i).ok());
  // Three times its quota: every put succeeds, by evicting the tenant's own oldest.
  for (uint64_t i = 100; i < 124; ++i) {
    ASSERT_TRUE(Put(a_, i).ok()) << i;
    EXPECT_LE(Of("tenant-a").bytes, 8 * per_);
  }
  EXPECT_EQ(Of("tenant-a").bytes, 8 * per_);
  for (uint64_t i = 116; i < 124; ++i) EXPECT_TRUE(Hit(a_, i)) << i;
  EXPECT_FALSE(Hit(a_, 100));
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(Hit(b_, i)) << i;
  EXPECT_EQ(Of("tenant-b").bytes, 4 * per_);
  EXPECT_EQ(Of("tenant-a").refused_bytes, 0u);
}

TEST_F(QuotaTest, ReservationsFillingTheByteQuotaAreRefusedAndChangeNothing) {
  Make({.bytes = 8 * PerCheckpoint()});
  ASSERT_TRUE(Put(b_, 1).ok());
  std::vector<Reservation> held;
  for (uint64_t i = 0; i < 8; ++i) {
    absl::StatusOr<Reservation> r = Reserve(a_, 10 + i);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    held.push_back(*r);
  }
  const StoreStats before = store_->Stats();
  absl::StatusOr<Reservation> over = Reserve(a_, 99);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.status().message(), "tenant_max_bytes"))
      << over.status().message();
  const StoreStats after = store_->Stats();
  EXPECT_EQ(after.tiers[0].used_bytes, before.tiers[0].used_bytes);
  EXPECT_EQ(after.pending_puts, before.pending_puts);
  EXPECT_EQ(Of("tenant-a").refused_bytes, 1u);
  // The other tenant still puts, and its checkpoint was not touched.
  EXPECT_TRUE(Put(b_, 2).ok());
  EXPECT_TRUE(Hit(b_, 1));
  for (const Reservation& r : held) ASSERT_TRUE(store_->Abort(r.id).ok());
  EXPECT_EQ(Of("tenant-a").bytes, 0u);
  EXPECT_TRUE(Put(a_, 99).ok());
}

TEST_F(QuotaTest, APinPastThePinnedQuotaIsRefusedUntilAnotherIsUnpinned) {
  Make({.pinned_bytes = 2 * PerCheckpoint()});
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(Put(a_, i).ok());
  ASSERT_TRUE(store_->Pin(a_.id, HashOf(0)).ok());
  ASSERT_TRUE(store_->Pin(a_.id, HashOf(0)).ok());  // pins nest: counted once
  ASSERT_TRUE(store_->Pin(a_.id, HashOf(1)).ok());
  EXPECT_EQ(Of("tenant-a").pinned_bytes, 2 * per_);
  const absl::Status over = store_->Pin(a_.id, HashOf(2));
  ASSERT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.message(), "tenant_max_pinned_bytes")) << over.message();
  EXPECT_EQ(store_->Stats().pinned, 2u);
  EXPECT_EQ(store_->Unpin(a_.id, HashOf(2)).code(), absl::StatusCode::kFailedPrecondition);
  // The other tenant pins within its own quota.
  ASSERT_TRUE(Put(b_, 7).ok());
  EXPECT_TRUE(store_->Pin(b_.id, HashOf(7)).ok());
  ASSERT_TRUE(store_->Unpin(a_.id, HashOf(1)).ok());
  EXPECT_TRUE(store_->Pin(a_.id, HashOf(2)).ok());
  // A deleted pinned checkpoint gives its pinned bytes back.
  ASSERT_TRUE(store_->Delete(a_.id, HashOf(0)).ok());
  EXPECT_EQ(Of("tenant-a").pinned_bytes, per_);
  EXPECT_EQ(Of("tenant-a").refused_pinned_bytes, 1u);
}

TEST_F(QuotaTest, PendingPutsPastTheQuotaAreRefusedForThatTenantOnly) {
  Make({.pending_puts = 3});
  std::vector<Reservation> held;
  for (uint64_t i = 0; i < 3; ++i) held.push_back(*Reserve(a_, i));
  absl::StatusOr<Reservation> over = Reserve(a_, 3);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.status().message(), "tenant_max_pending_puts"));
  EXPECT_EQ(Of("tenant-a").pending_puts, 3u);
  EXPECT_EQ(Of("tenant-a").refused_pending_puts, 1u);
  EXPECT_TRUE(Reserve(b_, 3).ok());
  ASSERT_TRUE(store_->Abort(held[0].id).ok());
  EXPECT_TRUE(Reserve(a_, 3).ok());
  EXPECT_EQ(Of("tenant-a").pending_puts, 3u);
}

TEST_F(QuotaTest, NamespacesPastTheQuotaAreRefusedAndRegisteringAgainIsNot) {
  Make({.namespaces = 2});
  EXPECT_TRUE(store_->RegisterNamespace(SmallSpec("tenant-a", 3)).ok());
  EXPECT_TRUE(store_->RegisterNamespace(SmallSpec("tenant-a", 2)).ok());  // a_ again
  absl::StatusOr<NamespaceId> over = store_->RegisterNamespace(SmallSpec("tenant-a", 4));
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.status().message(), "tenant_max_namespaces"));
  EXPECT_TRUE(store_->RegisterNamespace(SmallSpec("tenant-b", 4)).ok());
  EXPECT_EQ(Of("tenant-a").namespaces, 2u);
  EXPECT_EQ(Of("tenant-a").refused_namespaces, 1u);
  EXPECT_EQ(Of("tenant-b").namespaces, 2u);
}

TEST_F(QuotaTest, WithoutQuotasTenantsAreCountedAndNeverRefused) {
  Make({});
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(Put(a_, i).ok());
  ASSERT_TRUE(Put(b_, 9).ok());
  ASSERT_TRUE(store_->Pin(b_.id, HashOf(9)).ok());
  ASSERT_TRUE(Reserve(a_, 50).ok());
  const TenantStats a = Of("tenant-a"), b = Of("tenant-b");
  EXPECT_EQ(a.bytes, 6 * per_);  // five checkpoints and a reservation
  EXPECT_EQ(a.pending_puts, 1u);
  EXPECT_EQ(a.pinned_bytes, 0u);
  EXPECT_EQ(b.bytes, per_);
  EXPECT_EQ(b.pinned_bytes, per_);
  EXPECT_EQ(a.namespaces, 1u);
  EXPECT_EQ(store_->Stats().tiers[0].used_bytes, a.bytes + b.bytes);
}

}  // namespace
}  // namespace leapcache::core
