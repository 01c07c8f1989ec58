#include "base/block_hash.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <cstring>
#include <string>
#include <vector>

namespace leapcache::base {
namespace {

// SHA-256 computed here with OpenSSL's one-shot API, independently of block_hash.cc.
BlockHash Sha256(const std::vector<uint8_t>& bytes) {
  BlockHash out;
  SHA256(bytes.data(), bytes.size(), out.data());
  return out;
}

void AppendLe32(std::vector<uint8_t>* v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v->push_back(static_cast<uint8_t>(x >> (8 * i)));
}

TEST(BlockHashTest, TinyChainMatchesOpenSslKnownAnswer) {
  const std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 0xDEADBEEF, 7};  // 2 full blocks of 3
  absl::StatusOr<std::vector<BlockHash>> chain = ChainHashes(tokens, 3);
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_EQ(chain->size(), 2u);  // the partial third block is ignored

  std::vector<uint8_t> m1(32, 0);
  for (uint32_t t : {1u, 2u, 3u}) AppendLe32(&m1, t);
  const BlockHash h1 = Sha256(m1);
  std::vector<uint8_t> m2(h1.begin(), h1.end());
  for (uint32_t t : {4u, 5u, 0xDEADBEEFu}) AppendLe32(&m2, t);
  const BlockHash h2 = Sha256(m2);
  EXPECT_EQ((*chain)[0], h1);
  EXPECT_EQ((*chain)[1], h2);

  // And against digests computed with Python's hashlib (a third implementation), which pins
  // the byte encoding: parent || little-endian u32 tokens || extras.
  EXPECT_EQ(HashToHex((*chain)[0]),
            "3db346a400ab6b8db792fcf156443a8885b27db208362dcf77084f8c7648e645");
  EXPECT_EQ(HashToHex((*chain)[1]),
            "6c99fb710325d1cc5814eaa3e395638099db3dd12101e935169fad1def5b2a07");
}

TEST(BlockHashTest, ExtrasAreAppendedToEveryBlock) {
  const std::vector<uint8_t> salt = {'s', 'a', 'l', 't'};
  const std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<std::vector<BlockHash>> chain = ChainHashes(tokens, 3, salt);
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ(HashToHex((*chain)[0]),
            "ba89369624241142ae176746cf1829487dfc4dcac73a5bebf36471feaa102aea");
  std::vector<uint8_t> m2((*chain)[0].begin(), (*chain)[0].end());
  for (uint32_t t : {4u, 5u, 6u}) AppendLe32(&m2, t);
  m2.insert(m2.end(), salt.begin(), salt.end());
  EXPECT_EQ((*chain)[1], Sha256(m2));
}

TEST(BlockHashTest, HashBlockExtendsAChainIncrementally) {
  const std::vector<uint32_t> tokens = {9, 8, 7, 6, 5, 4, 3, 2};
  absl::StatusOr<std::vector<BlockHash>> chain = ChainHashes(tokens, 2);
  ASSERT_TRUE(chain.ok());
  BlockHash parent = kRootParentHash;
  for (size_t i = 0; i < chain->size(); ++i) {
    parent = HashBlock(parent, std::span<const uint32_t>(tokens).subspan(2 * i, 2));
    EXPECT_EQ(parent, (*chain)[i]) << "block " << i;
  }
}

TEST(BlockHashTest, SharedPrefixesShareHashesAndDivergenceChangesEverythingAfter) {
  std::vector<uint32_t> a(64), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint32_t>(i * 31 + 5);
  b = a;
  b[40] ^= 1;  // block 5 (of 8) differs
  auto ca = ChainHashes(a, 8);
  auto cb = ChainHashes(b, 8);
  ASSERT_TRUE(ca.ok() && cb.ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*ca)[i], (*cb)[i]) << i;
  for (int i = 5; i < 8; ++i) EXPECT_NE((*ca)[i], (*cb)[i]) << i;

  // A longer prompt extends the chain without changing its prefix.
  std::vector<uint32_t> longer = a;
  longer.insert(longer.end(), {1, 2, 3, 4, 5, 6, 7, 8});
  auto cl = ChainHashes(longer, 8);
  ASSERT_TRUE(cl.ok());
  ASSERT_EQ(cl->size(), 9u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ((*ca)[i], (*cl)[i]);
}

TEST(BlockHashTest, BlockSizeAndExtrasSeparateChains) {
  std::vector<uint32_t> t(32, 7);
  auto c4 = ChainHashes(t, 4);
  auto c8 = ChainHashes(t, 8);
  const std::vector<uint8_t> salt = {1};
  auto c4s = ChainHashes(t, 4, salt);
  ASSERT_TRUE(c4.ok() && c8.ok() && c4s.ok());
  EXPECT_NE((*c4)[1], (*c8)[0]);  // same 8 tokens, different block structure
  EXPECT_NE((*c4)[0], (*c4s)[0]);
  // Identical token blocks at different depths hash differently (the parent is chained).
  EXPECT_NE((*c4)[0], (*c4)[1]);
}

TEST(BlockHashTest, RejectsBadArguments) {
  std::vector<uint32_t> t(10, 1);
  EXPECT_EQ(ChainHashes(t, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChainHashes(t, kMaxBlockTokens + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> extras(kMaxExtrasBytes + 1, 0);
  EXPECT_EQ(ChainHashes(t, 2, extras).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<uint32_t> too_long(kMaxChainBlocks + 1, 3);
  absl::StatusOr<std::vector<BlockHash>> c = ChainHashes(too_long, 1);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("exceeds"), std::string::npos);
  // Fewer tokens than one block: an empty chain, not an error.
  auto empty = ChainHashes(std::vector<uint32_t>{1, 2}, 4);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(BlockHashTest, HexIsLowercaseAndFull) {
  BlockHash h{};
  h[0] = 0xAB;
  h[31] = 0x0F;
  const std::string hex = HashToHex(h);
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.substr(0, 2), "ab");
  EXPECT_EQ(hex.substr(62, 2), "0f");
}

}  // namespace
}  // namespace leapcache::base
