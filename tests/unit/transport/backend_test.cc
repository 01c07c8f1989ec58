// The backend table (transport/backend.h): every built backend once, in the service's order of
// preference with inline last, and inline's two sides as the data plane relies on them.
#include "transport/backend.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace leapcache::transport {
namespace {

TEST(BackendTableTest, EveryBackendOnceInPreferenceOrderInlineLast) {
  const std::span<const Backend> table = Backends();
  ASSERT_FALSE(table.empty());
  std::set<TransportKind> seen;
  for (const Backend& b : table) {
    EXPECT_TRUE(seen.insert(b.kind).second) << TransportName(b.kind) << " is listed twice";
    EXPECT_NE(TransportName(b.kind), "unknown");
    EXPECT_NE(b.make_service, nullptr);
    EXPECT_NE(b.make_engine, nullptr);
    EXPECT_EQ(b.in_band, b.kind == TransportKind::kInline) << TransportName(b.kind);
    EXPECT_EQ(FindBackend(b.kind), &b);
  }
  EXPECT_EQ(table.back().kind, TransportKind::kInline);
  // The order the service prefers: same-host device memory, GPU to GPU, RDMA/tcp, gRPC.
  const std::vector<TransportKind> order = {TransportKind::kCudaIpc, TransportKind::kNccl,
                                            TransportKind::kUcx, TransportKind::kInline};
  size_t at = 0;
  for (const Backend& b : table) {
    while (at < order.size() && order[at] != b.kind) ++at;
    EXPECT_LT(at, order.size()) << TransportName(b.kind) << " is out of order";
  }
  EXPECT_EQ(FindBackend(static_cast<TransportKind>(99)), nullptr);
}

TEST(BackendTableTest, InlineServesEveryEngineWithoutAConnection) {
  const Backend* b = FindBackend(TransportKind::kInline);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<std::unique_ptr<ServiceBackend>> service = b->make_service({});
  ASSERT_TRUE(service.ok()) << service.status();
  EXPECT_TRUE((*service)->status().ok());
  const Offer offer{TransportKind::kInline, "", false};
  EXPECT_TRUE((*service)->CanServe(offer, PeerInfo{}));
  absl::StatusOr<std::unique_ptr<PeerConnection>> c = (*service)->Connect(offer, PeerInfo{});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, nullptr);

  absl::StatusOr<std::unique_ptr<EngineBackend>> engine = b->make_engine({});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->kind(), TransportKind::kInline);
  EXPECT_FALSE((*engine)->cuda_memory());
  uint8_t bytes[64] = {};
  absl::StatusOr<std::unique_ptr<EngineBuffer>> buffer =
      (*engine)->Register(bytes, sizeof(bytes), MemoryKind::kHost);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_FALSE((*buffer)->descriptor().has_value());  // nothing for the service to import
  EXPECT_EQ((*buffer)->transfer_base(), bytes);
  EXPECT_FALSE((*buffer)->staged());
  // One-sided defaults: nothing to post, nothing to wait for.
  EXPECT_TRUE((*engine)->Post({bytes, 8}, {bytes + 8, 8}, absl::Now()).ok());
  EXPECT_TRUE((*engine)->Wait(absl::Now()).ok());
  EXPECT_TRUE((*engine)->health().ok());
}

}  // namespace
}  // namespace leapcache::transport
