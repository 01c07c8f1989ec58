// Lookup along prefix chains, head-range visibility across tensor-parallel degrees, and
// namespace isolation.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "base/block_hash.h"
#include "test_util.h"

namespace leapcache::core {
namespace {

using namespace leapcache::core::testing;  // NOLINT

constexpr int64_t kBlock = 4;  // tokens per block

std::vector<BlockHash> Chain(std::vector<uint32_t> tokens, std::span<const uint8_t> extras = {}) {
  absl::StatusOr<std::vector<BlockHash>> c = base::ChainHashes(tokens, kBlock, extras);
  EXPECT_TRUE(c.ok());
  return *c;
}

std::vector<uint32_t> Tokens(size_t n, uint32_t start) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

class LookupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = MakeStore({{"host", 256 * 4096}}, QuietOptions());
    ns_ = *store_->GetNamespace(*store_->RegisterNamespace(SmallSpec()));
  }

  // Puts a checkpoint at chain index i (after block i + 1).
  void PutAt(const NamespaceInfo& ns, const std::vector<BlockHash>& chain, int i,
             HeadRange heads = {0, 4}, uint64_t seed = 1) {
    ASSERT_TRUE(
        PutSeeded(*store_, ns, chain[i], Position{(i + 1) * kBlock, i + 1}, heads, seed).ok());
  }

  LookupResult Find(const NamespaceInfo& ns, const std::vector<BlockHash>& chain,
                    HeadRange heads = {0, 4}, int max_depth = 0) {
    LookupRequest q;
    q.ns = ns.id;
    q.chain = chain;
    q.heads = heads;
    q.max_depth = max_depth;
    q.block_tokens = kBlock;
    absl::StatusOr<LookupResult> r = store_->Lookup(q);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : LookupResult{};
  }

  std::unique_ptr<CheckpointStore> store_;
  NamespaceInfo ns_;
};

TEST_F(LookupTest, DeepestCheckpointWithGapsInTheChain) {
  const std::vector<BlockHash> chain = Chain(Tokens(8 * kBlock, 100));
  EXPECT_FALSE(Find(ns_, chain).hit);
  PutAt(ns_, chain, 1);
  PutAt(ns_, chain, 4);  // blocks 3, 4 and 6.. have no checkpoint
  LookupResult r = Find(ns_, chain);
  ASSERT_TRUE(r.hit);
  EXPECT_EQ(r.index, 4);
  EXPECT_EQ(r.position, (Position{5 * kBlock, 5}));
  // The engine caps the depth at its own attention-KV hit.
  r = Find(ns_, chain, {0, 4}, 4);
  ASSERT_TRUE(r.hit);
  EXPECT_EQ(r.index, 1);
  EXPECT_EQ(r.position.blocks, 2);
  EXPECT_FALSE(Find(ns_, chain, {0, 4}, 1).hit);
  // A max_depth beyond the chain is the whole chain.
  EXPECT_EQ(Find(ns_, chain, {0, 4}, 100).index, 4);
  // A shorter prompt that stops before the deep checkpoint.
  const std::vector<BlockHash> prefix(chain.begin(), chain.begin() + 4);
  EXPECT_EQ(Find(ns_, prefix).index, 1);
}

TEST_F(LookupTest, DivergingChainsShareOnlyTheirCommonPrefix) {
  std::vector<uint32_t> a = Tokens(6 * kBlock, 1);
  std::vector<uint32_t> b = a;
  b[3 * kBlock + 1] = 9999;  // diverges in block 4
  const std::vector<BlockHash> ca = Chain(a), cb = Chain(b);
  PutAt(ns_, ca, 2);  // shared block 3
  PutAt(ns_, ca, 5);  // only on a's branch
  PutAt(ns_, cb, 4, {0, 4}, 2);
  LookupResult ra = Find(ns_, ca);
  EXPECT_EQ(ra.index, 5);
  LookupResult rb = Find(ns_, cb);
  EXPECT_EQ(rb.index, 4);
  // A third branch sees only the shared checkpoint.
  std::vector<uint32_t> c = a;
  c[4 * kBlock] = 4242;
  EXPECT_EQ(Find(ns_, Chain(c)).index, 2);
  // The bytes at the branch point are a's.
  absl::StatusOr<ReadLease> lease = store_->Get(ns_.id, cb[2], {0, 4});
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(LeaseBytes(*lease), CheckpointBytes(ns_, 1, {0, 4}));
}

TEST_F(LookupTest, ACheckpointHitsOnlyAtItsExactPosition) {
  const std::vector<BlockHash> chain = Chain(Tokens(4 * kBlock, 7));
  PutAt(ns_, chain, 2);
  // The same hash presented at another chain index (a chain that does not start at the
  // prompt's first block) is not a hit: the state cannot resume there.
  const std::vector<BlockHash> shifted(chain.begin() + 2, chain.end());
  EXPECT_FALSE(Find(ns_, shifted).hit);
  EXPECT_TRUE(Find(ns_, chain).hit);
}

TEST_F(LookupTest, TensorParallelHalvesBecomeVisibleToTp1OnlyWhenBothCommitted) {
  const std::vector<BlockHash> chain = Chain(Tokens(3 * kBlock, 50));
  const HeadRange rank0{0, 2}, rank1{2, 4}, all{0, 4};
  PutAt(ns_, chain, 2, rank0, 77);
  EXPECT_TRUE(Find(ns_, chain, rank0).hit);
  EXPECT_FALSE(Find(ns_, chain, rank1).hit);
  EXPECT_FALSE(Find(ns_, chain, all).hit);
  EXPECT_EQ(store_->Get(ns_.id, chain[2], all).status().code(), absl::StatusCode::kNotFound);

  // Rank 1 reserves and uploads but has not committed: still invisible to TP=1.
  PutRequest req;
  req.ns = ns_.id;
  req.hash = chain[2];
  req.position = Position{3 * kBlock, 3};
  req.heads = rank1;
  absl::StatusOr<Reservation> r = store_->Reserve(req);
  ASSERT_TRUE(r.ok());
  const std::vector<uint8_t> half = CheckpointBytes(ns_, 77, rank1);
  ASSERT_TRUE(store_->Upload(r->id, 0, half).ok());
  EXPECT_FALSE(Find(ns_, chain, all).hit);
  ASSERT_TRUE(store_->Commit(r->id, Crc(half)).ok());

  LookupResult hit = Find(ns_, chain, all);
  ASSERT_TRUE(hit.hit);
  EXPECT_EQ(hit.index, 2);
  EXPECT_TRUE(Find(ns_, chain, {1, 2}).hit);  // a TP=4 rank
  EXPECT_TRUE(Find(ns_, chain, {1, 3}).hit);  // straddles the two halves
  // A TP=1 read of the two halves is the same bytes as one TP=1 put would have stored.
  absl::StatusOr<ReadLease> lease = store_->Get(ns_.id, chain[2], all);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(LeaseBytes(*lease), CheckpointBytes(ns_, 77, all));
  ASSERT_TRUE(lease->host_addressable());
  EXPECT_EQ(std::vector<uint8_t>(lease->Unit(1, 3).begin(), lease->Unit(1, 3).end()),
            MakeBlob(ns_.spec.format, BlobSeed(77, 1, 3)));
  absl::StatusOr<ReadLease> straddle = store_->Get(ns_.id, chain[2], {1, 3});
  ASSERT_TRUE(straddle.ok());
  EXPECT_EQ(LeaseBytes(*straddle), CheckpointBytes(ns_, 77, {1, 3}));
}

TEST_F(LookupTest, KeysNeverMatchAcrossNamespaces) {
  const NamespaceInfo other_tenant =
      *store_->GetNamespace(*store_->RegisterNamespace(SmallSpec("tenant-b")));
  const NamespaceInfo other_format = *store_->GetNamespace(*store_->RegisterNamespace(
      SmallSpec("tenant-a", 2, 4, BlobSpec::Leap(StateKind::kGdn, 4, 16, 16))));
  const std::vector<BlockHash> chain = Chain(Tokens(2 * kBlock, 3));
  PutAt(ns_, chain, 1, {0, 4}, 1);
  EXPECT_TRUE(Find(ns_, chain).hit);
  EXPECT_FALSE(Find(other_tenant, chain).hit);
  EXPECT_FALSE(Find(other_format, chain).hit);
  EXPECT_EQ(store_->Get(other_tenant.id, chain[1], {0, 4}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(other_tenant.id, chain[1]).code(), absl::StatusCode::kNotFound);
  // The same key in another namespace is an independent checkpoint with its own bytes.
  PutAt(other_tenant, chain, 1, {0, 4}, 2);
  EXPECT_EQ(LeaseBytes(*store_->Get(ns_.id, chain[1], {0, 4})), CheckpointBytes(ns_, 1, {0, 4}));
  EXPECT_EQ(LeaseBytes(*store_->Get(other_tenant.id, chain[1], {0, 4})),
            CheckpointBytes(other_tenant, 2, {0, 4}));
  ASSERT_TRUE(store_->Delete(ns_.id, chain[1]).ok());
  EXPECT_FALSE(Find(ns_, chain).hit);
  EXPECT_TRUE(Find(other_tenant, chain).hit);
}

TEST_F(LookupTest, HashesAreComparedInFull) {
  // Two hashes equal in all but the last byte are different keys.
  BlockHash a = HashOf(5), b = HashOf(5);
  b[31] ^= 0x80;
  ASSERT_TRUE(PutSeeded(*store_, ns_, a, Position{kBlock, 1}, {0, 4}, 1).ok());
  EXPECT_EQ(store_->Get(ns_.id, b, {0, 4}).status().code(), absl::StatusCode::kNotFound);
  std::vector<BlockHash> chain = {b};
  EXPECT_FALSE(Find(ns_, chain).hit);
}

TEST_F(LookupTest, BadRequestsAreRejected) {
  const std::vector<BlockHash> chain = Chain(Tokens(2 * kBlock, 3));
  LookupRequest q;
  q.ns = ns_.id;
  q.chain = chain;
  q.heads = {0, 4};
  q.block_tokens = kBlock;
  ASSERT_TRUE(store_->Lookup(q).ok());
  const auto code = [&](LookupRequest bad) { return store_->Lookup(bad).status().code(); };
  LookupRequest bad = q;
  bad.ns = 42;
  EXPECT_EQ(code(bad), absl::StatusCode::kNotFound);
  bad = q;
  bad.chain = {};
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  std::vector<BlockHash> too_long(kMaxChainBlocks + 1);
  bad = q;
  bad.chain = too_long;
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  bad = q;
  bad.heads = {0, 5};
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  bad = q;
  bad.heads = {2, 2};
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  bad = q;
  bad.max_depth = -1;
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  bad = q;
  bad.block_tokens = 0;
  EXPECT_EQ(code(bad), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Get(ns_.id, chain[0], {3, 9}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Get(77, chain[0], {0, 4}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats().lookups, 1u);  // rejected requests are not counted as lookups
}

}  // namespace
}  // namespace leapcache::core
