// UCX transfers between two workers of one process: a target worker (the engine's side, with its
// progress thread and registered buffer) and a peer connection (the service's side) executing
// descriptor lists, over loopback tcp and over whatever UCX picks by default. (UCX 1.13's
// shared-memory transports cannot report a dead peer, so with the peer error handling the
// service requires, UCX leaves them out on its own.)
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "transport/ucx/ucx_context.h"
#include "transport/ucx/ucx_peer_connection.h"
#include "transport/ucx/ucx_target_worker.h"

namespace leapcache::transport {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 131 + (i >> 9));
  return v;
}

class UcxTransferTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // Two contexts, as two processes would have; same transports on both.
    auto engine_ctx = UcxContext::Create({GetParam(), false});
    ASSERT_TRUE(engine_ctx.ok()) << engine_ctx.status();
    engine_ctx_ = std::move(*engine_ctx);
    auto service_ctx = UcxContext::Create({GetParam(), false});
    ASSERT_TRUE(service_ctx.ok()) << service_ctx.status();
    service_ctx_ = std::move(*service_ctx);
    auto target = UcxTargetWorker::Create(engine_ctx_.get());
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = std::move(*target);
    auto conn = UcxPeerConnection::Connect(service_ctx_.get(), target_->address());
    ASSERT_TRUE(conn.ok()) << conn.status();
    conn_ = std::move(*conn);
  }
  void TearDown() override {
    conn_.reset();
    target_.reset();
  }

  absl::Time Deadline() const { return absl::Now() + absl::Seconds(30); }

  std::unique_ptr<UcxContext> engine_ctx_, service_ctx_;
  std::unique_ptr<UcxTargetWorker> target_;
  std::unique_ptr<UcxPeerConnection> conn_;
};

TEST_P(UcxTransferTest, WritesAndReadsARegisteredBufferByteExact) {
  constexpr size_t kBytes = 3 << 20;  // several MiB: rendezvous/zero-copy paths, not just eager
  std::vector<uint8_t> engine_buffer(kBytes, 0);
  auto reg = engine_ctx_->Register(engine_buffer.data(), engine_buffer.size(), MemoryKind::kHost);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ((*reg)->descriptor().transport, TransportKind::kUcx);
  EXPECT_EQ((*reg)->descriptor().bytes, kBytes);
  auto region = conn_->Import((*reg)->descriptor());
  ASSERT_TRUE(region.ok()) << region.status();

  // A get: the service writes two pieces at offsets into the engine's buffer.
  std::vector<uint8_t> a = Pattern(kBytes / 2, 7), b = Pattern(kBytes / 2 - 100, 91);
  const TransferOp writes[] = {{Direction::kWrite, a, 0}, {Direction::kWrite, b, kBytes / 2}};
  ASSERT_TRUE(conn_->Execute(**region, writes, Deadline()).ok());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), engine_buffer.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), engine_buffer.begin() + kBytes / 2));
  EXPECT_EQ(engine_buffer[kBytes - 1], 0);  // past the second write: untouched

  // A put: the service reads the engine's bytes back.
  std::vector<uint8_t> expected = Pattern(kBytes, 33);
  std::copy(expected.begin(), expected.end(), engine_buffer.begin());
  std::vector<uint8_t> got(kBytes, 0xEE);
  const TransferOp reads[] = {{Direction::kRead, std::span<uint8_t>(got).first(1000), 0},
                              {Direction::kRead, std::span<uint8_t>(got).subspan(1000), 1000}};
  ASSERT_TRUE(conn_->Execute(**region, reads, Deadline()).ok());
  EXPECT_EQ(got, expected);
  EXPECT_TRUE(conn_->health().ok());
}

TEST_P(UcxTransferTest, RefusesOpsOutsideTheRegionAndMovesNothing) {
  std::vector<uint8_t> engine_buffer(4096, 0x11);
  auto reg = engine_ctx_->Register(engine_buffer.data(), engine_buffer.size(), MemoryKind::kHost);
  ASSERT_TRUE(reg.ok()) << reg.status();
  auto region = conn_->Import((*reg)->descriptor());
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<uint8_t> data(1024, 0x22);
  const TransferOp ops[] = {{Direction::kWrite, data, 0}, {Direction::kWrite, data, 3500}};
  EXPECT_EQ(conn_->Execute(**region, ops, Deadline()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(engine_buffer, std::vector<uint8_t>(4096, 0x11));  // the valid first op did not run
  EXPECT_TRUE(conn_->health().ok());
}

TEST_P(UcxTransferTest, RefusesAForeignOrDamagedDescriptor) {
  BufferDescriptor foreign{TransportKind::kCudaIpc, MemoryKind::kHost, 0x1000, 64, "handle"};
  EXPECT_EQ(conn_->Import(foreign).status().code(), absl::StatusCode::kInvalidArgument);
  BufferDescriptor cuda{TransportKind::kUcx, MemoryKind::kCuda, 0x1000, 64, "rkey"};
  EXPECT_EQ(conn_->Import(cuda).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(UcxTransferTest, RegisterRefusesNullEmptyAndUnreachableCudaBuffers) {
  std::vector<uint8_t> buf(64);
  EXPECT_EQ(engine_ctx_->Register(nullptr, 64, MemoryKind::kHost).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_ctx_->Register(buf.data(), 0, MemoryKind::kHost).status().code(),
            absl::StatusCode::kInvalidArgument);
  if (!engine_ctx_->cuda_direct()) {
    EXPECT_EQ(engine_ctx_->Register(buf.data(), 64, MemoryKind::kCuda).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(UcxTransferTest, PeerGoneFailsTheTransferCleanly) {
  std::vector<uint8_t> engine_buffer(1 << 20, 0);
  auto reg = engine_ctx_->Register(engine_buffer.data(), engine_buffer.size(), MemoryKind::kHost);
  ASSERT_TRUE(reg.ok()) << reg.status();
  auto region = conn_->Import((*reg)->descriptor());
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<uint8_t> data(1 << 20, 0x5A);
  const TransferOp ops[] = {{Direction::kWrite, data, 0}};
  ASSERT_TRUE(conn_->Execute(**region, ops, Deadline()).ok());
  // The engine's worker goes away (as when its process exits). Over tcp the connection drops;
  // shared-memory transports may still reach the (still mapped) memory, so only tcp must fail,
  // and every transport must return instead of hanging.
  target_.reset();
  const absl::Status st = conn_->Execute(**region, ops, absl::Now() + absl::Seconds(10));
  if (GetParam() == "tcp") {
    EXPECT_FALSE(st.ok());
    EXPECT_FALSE(conn_->health().ok());
    EXPECT_EQ(conn_->Execute(**region, ops, Deadline()).code(), absl::StatusCode::kUnavailable);
  }
  region->reset();
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxTransferTest, ::testing::Values("tcp", ""),
                         [](const auto& info) {
                           return info.param == "tcp" ? std::string("tcp")
                                                      : std::string("ucx_default");
                         });

}  // namespace
}  // namespace leapcache::transport
