// Deepest-checkpoint semantics through the real server: lookups along chains with gaps, chains
// that diverge after a shared prefix, depth caps, head coverage, and hashes stored at another
// depth (a state hit is exact-position only); LookupBatch answers each lookup exactly as Lookup
// does alone.
#include <gtest/gtest.h>

#include <numeric>

#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr int64_t kBlock = 16;

class LookupTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    spec_ = SmallNamespace("tenant-lookup");
    ns_ = Register(spec_);
  }

  // The prompt's chain: `blocks` blocks, tokens from `seed` for blocks >= `diverge_at` and
  // shared (seed 0) before it.
  std::vector<client::BlockHash> Chain(int blocks, uint32_t seed, int diverge_at = 0) {
    std::vector<uint32_t> tokens(static_cast<size_t>(blocks) * kBlock);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool own = static_cast<int>(i / kBlock) >= diverge_at;
      tokens[i] = static_cast<uint32_t>(i * 31 + (own ? seed * 1000003u : 0u));
    }
    absl::StatusOr<std::vector<client::BlockHash>> chain = client::ChainHashes(tokens, kBlock);
    EXPECT_TRUE(chain.ok());
    return *chain;
  }

  // Puts the checkpoint after block i + 1 of `chain`.
  void PutAt(const std::vector<client::BlockHash>& chain, int i, client::HeadRange heads = {}) {
    std::vector<float> states = MakeStates(spec_, 1000 + i);
    if (!heads.all()) states = SliceHeads(spec_, states, heads.begin, heads.end);
    const client::PutTarget t{ns_.id, chain[i], {(i + 1) * kBlock, i + 1}, heads, {}};
    ASSERT_TRUE(client_->PutCompact(t, EncodeBlobs(spec_, states)).ok()) << "at " << i;
  }

  client::LookupResult Lookup(const std::vector<client::BlockHash>& chain, int max_depth = 0,
                              client::HeadRange heads = {}) {
    absl::StatusOr<client::LookupResult> r =
        client_->Lookup({ns_.id, chain, heads, max_depth, kBlock});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : client::LookupResult{};
  }

  client::NamespaceSpec spec_;
  client::NamespaceInfo ns_;
};

TEST_F(LookupTest, DeepestAlongAChainWithGaps) {
  const std::vector<client::BlockHash> chain = Chain(12, 1);
  EXPECT_FALSE(Lookup(chain).hit);
  for (int i : {1, 4, 5, 9}) PutAt(chain, i);  // gaps at 0, 2-3, 6-8, 10-11
  client::LookupResult r = Lookup(chain);
  ASSERT_TRUE(r.hit);
  EXPECT_EQ(r.index, 9);
  EXPECT_EQ(r.position.blocks, 10);
  EXPECT_EQ(r.position.tokens, 10 * kBlock);
  // Capped depths land on the deepest checkpoint within the cap, across the gaps.
  const std::pair<int, int> caps[] = {{12, 9}, {10, 9}, {9, 5}, {6, 5}, {5, 4}, {4, 1}, {2, 1}};
  for (const auto& [cap, expected] : caps) {
    r = Lookup(chain, cap);
    ASSERT_TRUE(r.hit) << "cap " << cap;
    EXPECT_EQ(r.index, expected) << "cap " << cap;
  }
  EXPECT_FALSE(Lookup(chain, 1).hit);
  // A prefix of the chain sees only what lies within it.
  const std::vector<client::BlockHash> prefix(chain.begin(), chain.begin() + 4);
  EXPECT_EQ(Lookup(prefix).index, 1);
  // The deepest one goes away: the next deepest answers.
  ASSERT_TRUE(client_->Delete(ns_.id, chain[9]).ok());
  EXPECT_EQ(Lookup(chain).index, 5);
}

TEST_F(LookupTest, DivergingChainsShareOnlyTheirCommonPrefix) {
  const std::vector<client::BlockHash> a = Chain(8, 1, /*diverge_at=*/3);
  const std::vector<client::BlockHash> b = Chain(8, 2, /*diverge_at=*/3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a[i], b[i]);
  for (int i = 3; i < 8; ++i) EXPECT_NE(a[i], b[i]);
  PutAt(a, 1);  // shared
  PutAt(a, 6);  // a's branch only
  PutAt(b, 4);  // b's branch only
  EXPECT_EQ(Lookup(a).index, 6);
  EXPECT_EQ(Lookup(b).index, 4);
  // A third branch off the same prefix hits only the shared checkpoint.
  EXPECT_EQ(Lookup(Chain(8, 3, 3)).index, 1);
  // A chain that diverges at the first block shares nothing.
  EXPECT_FALSE(Lookup(Chain(8, 4, 0)).hit);
  // The hit's bytes are those of its own branch.
  absl::StatusOr<client::Checkpoint> got = client_->Get({ns_.id, b[4], {}, std::nullopt});
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->bytes == EncodeBlobs(spec_, MakeStates(spec_, 1004)));
}

TEST_F(LookupTest, AHashAtAnotherDepthIsNotAHit) {
  const std::vector<client::BlockHash> chain = Chain(6, 1);
  PutAt(chain, 2);  // stored after block 3
  // The same hash presented at chain index 0 (e.g. an engine hashing a suffix): its state does
  // not resume there, so it is not a hit.
  const std::vector<client::BlockHash> shifted(chain.begin() + 2, chain.end());
  EXPECT_FALSE(Lookup(shifted).hit);
  EXPECT_EQ(Lookup(chain).index, 2);
}

TEST_F(LookupTest, HitsNeedEveryRequestedHead) {
  const std::vector<client::BlockHash> chain = Chain(6, 1);
  PutAt(chain, 1);          // all heads
  PutAt(chain, 4, {0, 2});  // half the heads, deeper
  EXPECT_EQ(Lookup(chain).index, 1);
  EXPECT_EQ(Lookup(chain, 0, {0, 2}).index, 4);
  EXPECT_EQ(Lookup(chain, 0, {1, 2}).index, 4);
  EXPECT_EQ(Lookup(chain, 0, {2, 4}).index, 1);
  PutAt(chain, 4, {2, 4});  // the other half completes it
  EXPECT_EQ(Lookup(chain).index, 4);
}

TEST_F(LookupTest, TokenCountersFollowHitsAndMisses) {
  const std::vector<client::BlockHash> chain = Chain(8, 1);
  PutAt(chain, 2);
  const client::ServerStats before = Stats();
  Lookup(chain);        // hit at 3 blocks of 8
  Lookup(Chain(8, 7));  // miss of 8 blocks
  const client::ServerStats after = Stats();
  EXPECT_EQ(after.lookups - before.lookups, 2u);
  EXPECT_EQ(after.lookup_hits - before.lookup_hits, 1u);
  EXPECT_EQ(after.lookup_misses - before.lookup_misses, 1u);
  EXPECT_EQ(after.lookup_hit_tokens - before.lookup_hit_tokens, 3u * kBlock);
  EXPECT_EQ(after.lookup_miss_tokens - before.lookup_miss_tokens, (5u + 8u) * kBlock);
}

TEST_F(LookupTest, ABatchAnswersEachLookupAsLookupDoesAlone) {
  const std::vector<client::BlockHash> a = Chain(8, 1), b = Chain(8, 2), c = Chain(8, 3);
  PutAt(a, 5);
  PutAt(b, 2);
  PutAt(b, 6, {0, 2});
  const client::NamespaceInfo other = Register(SmallNamespace("tenant-lookup-other"));
  const std::vector<client::BlockHash> empty;
  std::vector<client::LookupRequest> batch = {
      {ns_.id, a, {}, 0, kBlock},          // hit at 5
      {ns_.id, a, {}, 4, kBlock},          // capped below it: miss
      {ns_.id, b, {}, 0, kBlock},          // hit at 2 (6 holds half the heads)
      {ns_.id, b, {0, 2}, 0, kBlock},      // hit at 6
      {ns_.id, c, {}, 0, kBlock},          // miss
      {other.id, a, {}, 0, kBlock},        // another namespace: miss
      {ns_.id, empty, {}, 0, kBlock},      // bad chain: INVALID_ARGUMENT
      {ns_.id, a, {0, 99}, 0, kBlock},     // bad heads: INVALID_ARGUMENT
      {987654, a, {}, 0, kBlock},          // unknown namespace: NOT_FOUND
      {ns_.id, a, {}, 0, kBlock},          // the first again
  };
  const client::ServerStats before = Stats();
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> got =
      client_->LookupBatch(batch);
  const client::ServerStats after = Stats();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const absl::StatusOr<client::LookupResult> alone = client_->Lookup(batch[i]);
    const absl::StatusOr<client::LookupResult>& in_batch = (*got)[i];
    ASSERT_EQ(in_batch.status(), alone.status()) << "lookup " << i;
    if (!alone.ok()) continue;
    EXPECT_EQ(in_batch->hit, alone->hit) << "lookup " << i;
    EXPECT_EQ(in_batch->index, alone->index) << "lookup " << i;
    EXPECT_EQ(in_batch->position.tokens, alone->position.tokens) << "lookup " << i;
    EXPECT_EQ(in_batch->position.blocks, alone->position.blocks) << "lookup " << i;
  }
  // What each answer is, and the counters of the seven answered lookups (two namespaces).
  EXPECT_EQ((*got)[0]->index, 5);
  EXPECT_FALSE((*got)[1]->hit);
  EXPECT_EQ((*got)[2]->index, 2);
  EXPECT_EQ((*got)[3]->index, 6);
  EXPECT_FALSE((*got)[4]->hit);
  EXPECT_FALSE((*got)[5]->hit);
  EXPECT_EQ((*got)[6].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*got)[7].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*got)[8].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*got)[9]->index, 5);
  EXPECT_EQ(after.lookups - before.lookups, 7u);
  EXPECT_EQ(after.lookup_hits - before.lookup_hits, 4u);
  EXPECT_EQ(after.lookup_misses - before.lookup_misses, 3u);
}

TEST_F(LookupTest, ABatchOfNoneOrOverTheLimitIsRefusedWhole) {
  const std::vector<client::BlockHash> a = Chain(2, 1);
  PutAt(a, 1);
  const client::ServerStats before = Stats();
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> none =
      client_->LookupBatch({});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument) << none.status();
  const std::vector<client::LookupRequest> over(4097, {ns_.id, a, {}, 0, kBlock});
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> too_many =
      client_->LookupBatch(over);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument) << too_many.status();
  EXPECT_NE(too_many.status().message().find("4096"), std::string::npos) << too_many.status();
  EXPECT_EQ(Stats().lookups, before.lookups);  // nothing looked up
  // The largest batch is answered whole.
  const std::vector<client::LookupRequest> full(4096, {ns_.id, a, {}, 0, kBlock});
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> all = client_->LookupBatch(full);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4096u);
  for (const absl::StatusOr<client::LookupResult>& r : *all) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->index, 1);
  }
}

}  // namespace
}  // namespace leapcache::testing
