// The checks of peer-supplied UCX blobs (ucx_wire_check.h): the addresses and keys UCX itself
// packs pass, whatever transports are configured; the inputs that aborted the server in
// ucp_address_unpack, every truncation and every trailing byte are refused. Where UCX is built, a
// refused or accepted blob then goes through UcxPeerConnection, the service's real path.
#include "transport/ucx/ucx_wire_check.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#ifdef LEAPCACHE_TRANSPORT_UCX
#include "transport/ucx/ucx_context.h"
#include "transport/ucx/ucx_peer_connection.h"
#include "transport/ucx/ucx_target_worker.h"
#endif

namespace leapcache::transport {
namespace {

// A v2 address built by hand: header (v2, no flags), one device (md 0, last, no device address),
// one interface (name checksum, 8 attribute bytes, last, a 4-byte address).
std::string HandBuiltV2Address() {
  std::string a = {'\x01', '\x00', '\x00', '\x80', '\x12', '\x34'};
  a += std::string(8, '\x01');
  a += '\x84';
  a += "\x0a\x0b\x0c\x0d";
  return a;
}

void ExpectEveryTruncationRefused(const std::string& blob, bool address) {
  for (size_t n = 0; n < blob.size(); ++n) {
    const std::string prefix = blob.substr(0, n);
    const absl::Status s = address ? CheckUcxWorkerAddress(prefix) : CheckUcxRemoteKey(prefix);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n << " of " << blob.size();
  }
}

TEST(UcxWireCheckTest, TheInputsThatAbortedTheServerAreRefused) {
  EXPECT_EQ(CheckUcxWorkerAddress("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckUcxWorkerAddress("\xff").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckUcxWorkerAddress(std::string("\x02") + std::string(31, '\0')).code(),
            absl::StatusCode::kInvalidArgument);
  // Version 1's header with 31 zeros: a uuid, then devices that never end.
  EXPECT_EQ(CheckUcxWorkerAddress(std::string(32, '\0')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckUcxWorkerAddress(std::string(1 << 17, '\x01')).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(UcxWireCheckTest, AHandBuiltAddressPassesAndEveryDamageIsRefused) {
  const std::string a = HandBuiltV2Address();
  EXPECT_TRUE(CheckUcxWorkerAddress(a).ok()) << CheckUcxWorkerAddress(a);
  ExpectEveryTruncationRefused(a, true);
  EXPECT_FALSE(CheckUcxWorkerAddress(a + '\0').ok());  // trailing byte
  std::string ep = a;
  ep[14] = '\xc4';  // the interface claims an endpoint address
  EXPECT_FALSE(CheckUcxWorkerAddress(ep).ok());
  std::string md = a;
  md[2] = '\x7f';  // v2's extended md index...
  md.insert(3, 1, '\x40');  // ... of 64
  EXPECT_FALSE(CheckUcxWorkerAddress(md).ok());
  md[3] = '\x3f';  // 63 is fine
  EXPECT_TRUE(CheckUcxWorkerAddress(md).ok()) << CheckUcxWorkerAddress(md);
  std::string flags = a;
  flags[1] = '\x10';  // an unknown header flag
  EXPECT_FALSE(CheckUcxWorkerAddress(flags).ok());
  // An empty address list is the null resource and nothing after it.
  EXPECT_TRUE(CheckUcxWorkerAddress(std::string("\x01\x00\xff", 3)).ok());
  EXPECT_FALSE(CheckUcxWorkerAddress(std::string("\x01\x00\xff\x00", 4)).ok());
}

TEST(UcxWireCheckTest, AHandBuiltKeyPassesAndEveryDamageIsRefused) {
  // md map {0, 2}, host memory, a 3-byte and a 1-byte key, a system device and one distance.
  std::string k = {'\x05', 0, 0, 0, 0, 0, 0, 0, '\x00', '\x03', 'a', 'b', 'c', '\x01', 'd'};
  EXPECT_TRUE(CheckUcxRemoteKey(k).ok()) << CheckUcxRemoteKey(k);
  ExpectEveryTruncationRefused(k, false);
  std::string with_distance = k + std::string{'\x01', '\x02', '\x10', '\x20'};
  EXPECT_TRUE(CheckUcxRemoteKey(with_distance).ok()) << CheckUcxRemoteKey(with_distance);
  EXPECT_FALSE(CheckUcxRemoteKey(with_distance + '\0').ok());  // a partial distance
  std::string far_device = with_distance;
  far_device[16] = '\xff';  // a distance to system device 255: past UCX's table
  EXPECT_FALSE(CheckUcxRemoteKey(far_device).ok());
  std::string memory = k;
  memory[8] = '\x05';
  EXPECT_FALSE(CheckUcxRemoteKey(memory).ok());
  EXPECT_FALSE(CheckUcxRemoteKey(std::string(9, '\0')).ok());  // empty md map
}

TEST(UcxWireCheckTest, APaddedCopyIsTheBlobThenZeros) {
  const std::vector<uint8_t> p = PaddedCopy("abc");
  ASSERT_EQ(p.size(), 3 + kUcxBlobPadding);
  EXPECT_EQ(p[0], 'a');
  EXPECT_EQ(p[2], 'c');
  for (size_t i = 3; i < p.size(); ++i) ASSERT_EQ(p[i], 0);
}

#ifdef LEAPCACHE_TRANSPORT_UCX
class UcxRealBlobTest : public ::testing::TestWithParam<std::string> {};

TEST_P(UcxRealBlobTest, UcxsOwnAddressesAndKeysPassAndTheirDamageIsRefusedBeforeUcx) {
  auto engine_ctx = UcxContext::Create({GetParam(), false});
  ASSERT_TRUE(engine_ctx.ok()) << engine_ctx.status();
  auto service_ctx = UcxContext::Create({GetParam(), false});
  ASSERT_TRUE(service_ctx.ok()) << service_ctx.status();
  auto target = UcxTargetWorker::Create(engine_ctx->get());
  ASSERT_TRUE(target.ok()) << target.status();
  const std::string address = (*target)->address();
  ASSERT_TRUE(CheckUcxWorkerAddress(address).ok()) << CheckUcxWorkerAddress(address);
  ExpectEveryTruncationRefused(address, true);

  // Every truncation and the two inputs that aborted the server: refused by the real path.
  for (const std::string& bad : {address.substr(0, address.size() - 1), std::string("\xff"),
                                 std::string("\x02") + std::string(31, '\0'), address + 'x'}) {
    auto c = UcxPeerConnection::Connect(service_ctx->get(), bad);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  }
  auto conn = UcxPeerConnection::Connect(service_ctx->get(), address);
  ASSERT_TRUE(conn.ok()) << conn.status();

  std::vector<uint8_t> buffer(4096);
  auto reg = (*engine_ctx)->Register(buffer.data(), buffer.size(), MemoryKind::kHost);
  ASSERT_TRUE(reg.ok()) << reg.status();
  const BufferDescriptor& d = (*reg)->descriptor();
  ASSERT_TRUE(CheckUcxRemoteKey(d.key).ok()) << CheckUcxRemoteKey(d.key);
  ExpectEveryTruncationRefused(d.key, false);
  for (size_t n = 1; n < d.key.size(); ++n) {
    BufferDescriptor cut = d;
    cut.key.resize(n);
    EXPECT_EQ((*conn)->Import(cut).status().code(), absl::StatusCode::kInvalidArgument) << n;
  }
  EXPECT_TRUE((*conn)->Import(d).ok());
}

// tcp alone, and whatever UCX picks by default on this machine (shared memory, loopback).
INSTANTIATE_TEST_SUITE_P(Transports, UcxRealBlobTest, ::testing::Values("tcp", ""));
#endif

}  // namespace
}  // namespace leapcache::transport
