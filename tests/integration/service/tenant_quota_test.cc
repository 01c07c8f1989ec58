// Tenant quotas on the real server with tokens (the hardening issue's quota finding: one
// tenant's puts evicted every checkpoint of another and then locked it out): a tenant at
// tenant_max_bytes evicts its own checkpoints and never another's, its pending puts and
// namespaces stop at their quotas with RESOURCE_EXHAUSTED naming them, the other tenant is
// served throughout, and /metrics shows each tenant's usage and refusals.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/loopback_http.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/process.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr char kAliceToken[] = "alice-token-0123456789abcdef";
constexpr char kBobToken[] = "bob-token-0123456789abcdef0123";

class TenantQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("tenant-quota");
    const std::string tokens = dir_ + "/tokens";
    std::ofstream(tokens) << kAliceToken << " alice\n" << kBobToken << " bob\n";
    // 16 pages of 64 KiB, one checkpoint of 2 x 4 blobs of 16 x 16 each: without a quota, Alice
    // alone would fill the store and evict every checkpoint of Bob's.
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(
        {"--memory-budget=1MiB", "--page-bytes=64KiB", "--tokens-file=" + tokens,
         "--tenant-max-bytes=512KiB", "--tenant-max-pending-puts=4",
         "--tenant-max-namespaces=2"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    alice_ = Connect(kAliceToken);
    bob_ = Connect(kBobToken);
    ASSERT_NE(alice_, nullptr);
    ASSERT_NE(bob_, nullptr);
  }
  void TearDown() override {
    alice_.reset();
    bob_.reset();
    if (server_ != nullptr) {
      absl::StatusOr<int> code = server_->Stop();
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<client::Client> Connect(const std::string& token) {
    return ConnectWithToken(*server_, token);
  }
  static client::PutTarget Target(const client::NamespaceInfo& ns, uint64_t i) {
    return {ns.id, TestHash(i), {16, 1}, {}, absl::ZeroDuration()};
  }
  static bool Hit(client::Client& c, const client::NamespaceInfo& ns, uint64_t i) {
    const std::vector<client::BlockHash> chain{TestHash(i)};
    absl::StatusOr<client::LookupResult> r = c.Lookup({ns.id, chain, {}, 0, 16});
    return r.ok() && r->hit;
  }
  std::string Metrics() {
    absl::StatusOr<base::HttpResponse> r = base::HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->body : "";
  }

  std::string dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::Client> alice_, bob_;
};

TEST_F(TenantQuotaTest, ATenantAtItsQuotasEvictsOnlyItselfAndTheOtherIsServed) {
  const client::NamespaceSpec alice_spec = SmallNamespace("alice");
  const client::NamespaceSpec bob_spec = SmallNamespace("bob");
  absl::StatusOr<client::NamespaceInfo> a = alice_->RegisterNamespace(alice_spec);
  absl::StatusOr<client::NamespaceInfo> b = bob_->RegisterNamespace(bob_spec);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<uint8_t> alice_blobs = EncodeBlobs(alice_spec, MakeStates(alice_spec, 1));
  const std::vector<uint8_t> bob_blobs = EncodeBlobs(bob_spec, MakeStates(bob_spec, 2));
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(bob_->PutCompact(Target(*b, i), bob_blobs).ok());

  // Alice puts four times her 8 pages: every put goes through, on her own evictions.
  for (uint64_t i = 100; i < 132; ++i) {
    ASSERT_TRUE(alice_->PutCompact(Target(*a, i), alice_blobs).ok()) << i;
  }
  for (uint64_t i = 124; i < 132; ++i) EXPECT_TRUE(Hit(*alice_, *a, i)) << i;
  EXPECT_FALSE(Hit(*alice_, *a, 100));
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(Hit(*bob_, *b, i)) << i;

  // Reservations she leaves open stop at her pending quota; Bob still puts.
  std::vector<client::Reservation> open;
  for (uint64_t i = 200; i < 204; ++i) {
    absl::StatusOr<client::Reservation> r = alice_->ReservePut(Target(*a, i), std::nullopt);
    ASSERT_TRUE(r.ok()) << r.status();
    open.push_back(*r);
  }
  absl::StatusOr<client::Reservation> over = alice_->ReservePut(Target(*a, 204), std::nullopt);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.status().message(), "tenant_max_pending_puts"))
      << over.status();
  EXPECT_TRUE(bob_->PutCompact(Target(*b, 9), bob_blobs).ok());

  // Namespaces stop at two per tenant.
  EXPECT_TRUE(alice_->RegisterNamespace(SmallNamespace("alice", 3)).ok());
  absl::StatusOr<client::NamespaceInfo> third = alice_->RegisterNamespace(SmallNamespace("alice", 4));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(bob_->RegisterNamespace(SmallNamespace("bob", 4)).ok());

  const std::string text = Metrics();
  EXPECT_TRUE(absl::StrContains(text, "leapcache_tenant_bytes{tenant=\"alice\"} 524288")) << text;
  EXPECT_TRUE(absl::StrContains(text, "leapcache_tenant_bytes{tenant=\"bob\"} 327680")) << text;
  EXPECT_TRUE(absl::StrContains(text, "leapcache_tenant_pending_puts{tenant=\"alice\"} 4")) << text;
  EXPECT_TRUE(absl::StrContains(
      text, "leapcache_tenant_quota_refusals_total{quota=\"pending_puts\",tenant=\"alice\"} 1"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "leapcache_tenant_quota_refusals_total{quota=\"namespaces\",tenant=\"alice\"} 1"))
      << text;
  for (const client::Reservation& r : open) ASSERT_TRUE(alice_->AbortPut(r.put_id).ok());
}

TEST_F(TenantQuotaTest, StatsShowATenantItsOwnUsageAndNothingOfAnothers) {
  // Once, Stats was store-wide and open to every tenant: Bob saw Alice's hits and memory.
  const client::NamespaceSpec alice_spec = SmallNamespace("alice");
  absl::StatusOr<client::NamespaceInfo> a = alice_->RegisterNamespace(alice_spec);
  ASSERT_TRUE(a.ok());
  const std::vector<uint8_t> blobs = EncodeBlobs(alice_spec, MakeStates(alice_spec, 1));
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(alice_->PutCompact(Target(*a, i), blobs).ok());
  ASSERT_TRUE(Hit(*alice_, *a, 1));
  absl::StatusOr<client::Reservation> open = alice_->ReservePut(Target(*a, 50), std::nullopt);
  ASSERT_TRUE(open.ok());

  absl::StatusOr<client::ServerStats> bob = bob_->Stats();
  ASSERT_TRUE(bob.ok()) << bob.status();
  EXPECT_EQ(bob->tenant.tenant, "bob");
  EXPECT_EQ(bob->tenant.bytes, 0u);
  EXPECT_EQ(bob->tenant.namespaces, 0u);
  EXPECT_EQ(bob->tenant.quota_bytes, 512u << 10);
  EXPECT_EQ(bob->tenant.quota_pending_puts, 4u);
  EXPECT_EQ(bob->lookups, 0u);
  EXPECT_EQ(bob->lookup_hits, 0u);
  EXPECT_EQ(bob->puts_committed, 0u);
  EXPECT_EQ(bob->checkpoints, 0u);
  EXPECT_EQ(bob->namespaces, 0u);
  EXPECT_EQ(bob->pending_puts, 0u);
  ASSERT_EQ(bob->tiers.size(), 1u);
  EXPECT_EQ(bob->tiers[0].capacity_bytes, 1u << 20);
  EXPECT_EQ(bob->tiers[0].used_bytes, 0u);

  absl::StatusOr<client::ServerStats> alice = alice_->Stats();
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->tenant.tenant, "alice");
  EXPECT_EQ(alice->tenant.namespaces, 1u);
  EXPECT_EQ(alice->tenant.bytes, 4u * 64 * 1024);  // three checkpoints and the reservation
  EXPECT_EQ(alice->tenant.pending_puts, 1u);
  EXPECT_EQ(alice->lookups, 0u);  // store-wide numbers stay hidden from her too
  // The operator's metrics port has everything.
  EXPECT_TRUE(absl::StrContains(Metrics(), "leapcache_lookup_hits_total 1")) << Metrics();
  ASSERT_TRUE(alice_->AbortPut(open->put_id).ok());
}

}  // namespace
}  // namespace leapcache::testing
