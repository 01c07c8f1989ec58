#include "load/block_chain.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <cstring>

namespace leapcache::load {
namespace {

// SHA-256(parent || id as little-endian u64), computed directly.
client::BlockHash Link(const client::BlockHash& parent, uint64_t id) {
  uint8_t buf[40];
  std::memcpy(buf, parent.data(), 32);
  for (int i = 0; i < 8; ++i) buf[32 + i] = static_cast<uint8_t>(id >> (8 * i));
  client::BlockHash out;
  SHA256(buf, sizeof buf, out.data());
  return out;
}

TEST(BlockChain, IsTheSha256ChainOfTheIds) {
  const std::vector<uint64_t> ids = {5, 0x1234567890ull, 7};
  absl::StatusOr<std::vector<client::BlockHash>> chain = ChainFromBlockIds(ids);
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_EQ(chain->size(), 3u);
  client::BlockHash h{};
  for (size_t i = 0; i < ids.size(); ++i) {
    h = Link(h, ids[i]);
    EXPECT_EQ((*chain)[i], h) << i;
  }
}

TEST(BlockChain, AHashDependsOnTheWholePrefix) {
  const auto a = *ChainFromBlockIds(std::vector<uint64_t>{1, 2, 3});
  const auto b = *ChainFromBlockIds(std::vector<uint64_t>{1, 9, 3});
  const auto c = *ChainFromBlockIds(std::vector<uint64_t>{3});
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
  EXPECT_NE(a[2], b[2]);  // same id 3, different prefix
  EXPECT_NE(a[2], c[0]);
}

TEST(BlockChain, SeedIsTheFirstEightBytesLittleEndian) {
  client::BlockHash h{};
  h[0] = 0x01;
  h[7] = 0x80;
  h[8] = 0xff;  // not part of the seed
  EXPECT_EQ(HashSeed(h), 0x8000000000000001ull);
}

TEST(BlockChain, RejectsChainsLongerThanTheServiceAccepts) {
  std::vector<uint64_t> ids(65537, 1);
  EXPECT_EQ(ChainFromBlockIds(ids).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leapcache::load
