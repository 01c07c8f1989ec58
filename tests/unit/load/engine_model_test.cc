#include "load/engine_model.h"

#include <gtest/gtest.h>

#include <span>

#include "load/block_chain.h"
#include "load/prefix_tracker.h"

namespace leapcache::load {
namespace {

using V = std::vector<int64_t>;

TEST(Admission, EveryBlockPutsAllBlocksPastTheHit) {
  EXPECT_EQ(AdmittedBlocks(Admission::kEveryBlock, 5, -1, -1), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(AdmittedBlocks(Admission::kEveryBlock, 5, 2, 1), (V{3, 4}));
  EXPECT_EQ(AdmittedBlocks(Admission::kEveryBlock, 5, 4, 4), V{});
  EXPECT_EQ(AdmittedBlocks(Admission::kEveryBlock, 0, -1, -1), V{});
}

TEST(Admission, BranchPointsPutTheDivergenceAndTheLastBlock) {
  EXPECT_EQ(AdmittedBlocks(Admission::kBranchPoints, 8, -1, 3), (V{3, 7}));
  EXPECT_EQ(AdmittedBlocks(Admission::kBranchPoints, 8, 3, 3), (V{7}));  // branch already stored
  EXPECT_EQ(AdmittedBlocks(Admission::kBranchPoints, 8, -1, -1), (V{7}));
  EXPECT_EQ(AdmittedBlocks(Admission::kBranchPoints, 8, -1, 7), (V{7}));  // seen whole
  EXPECT_EQ(AdmittedBlocks(Admission::kBranchPoints, 8, 7, 7), V{});
}

TEST(Admission, LastBlockOnlyAndNames) {
  EXPECT_EQ(AdmittedBlocks(Admission::kLastBlock, 8, 2, 5), (V{7}));
  EXPECT_EQ(AdmittedBlocks(Admission::kLastBlock, 1, -1, -1), (V{0}));
  EXPECT_EQ(*ParseAdmission("branch-points"), Admission::kBranchPoints);
  EXPECT_FALSE(ParseAdmission("sometimes").ok());
}

TEST(ComputeModel, FlopModelIsAdditiveAndQuadraticInContext) {
  ComputeModel m;
  const double whole = PrefillSeconds(m, 0, 8192);
  EXPECT_NEAR(PrefillSeconds(m, 0, 4096) + PrefillSeconds(m, 4096, 8192), whole, whole * 1e-12);
  // The second half costs more than the first: its tokens attend to more.
  EXPECT_GT(PrefillSeconds(m, 4096, 8192), PrefillSeconds(m, 0, 4096));
  // 2 * params FLOPs per token with no attention layers.
  m.attention_layers = 0;
  EXPECT_NEAR(PrefillSeconds(m, 0, 1000), 2 * m.active_params * 1000 / (m.peak_flops * m.mfu),
              1e-15);
  EXPECT_EQ(PrefillSeconds(m, 500, 500), 0);
  m.prefill_tokens_per_s = 10000;
  EXPECT_DOUBLE_EQ(PrefillSeconds(m, 1000, 6000), 0.5);
  EXPECT_DOUBLE_EQ(DecodeSeconds(m, 120), 2.0);
}

TEST(ComputeModel, RejectsBadSettings) {
  ComputeModel m;
  m.mfu = 1.5;
  EXPECT_NE(ValidateComputeModel(m).message().find("mfu"), std::string::npos);
  m = ComputeModel();
  m.decode_tokens_per_s = 0;
  EXPECT_NE(ValidateComputeModel(m).message().find("decode_tokens_per_s"), std::string::npos);
  m = ComputeModel();
  m.prefill_tokens_per_s = -1;
  EXPECT_FALSE(ValidateComputeModel(m).ok());
  EXPECT_TRUE(ValidateComputeModel(ComputeModel()).ok());
}

TEST(PrefixTracker, FindsTheDeepestBlockAnEarlierChainReached) {
  PrefixTracker t;
  const std::vector<uint64_t> a = {1, 2, 3, 4}, b = {1, 2, 9}, c = {7};
  auto ca = *ChainFromBlockIds(a), cb = *ChainFromBlockIds(b), cc = *ChainFromBlockIds(c);
  EXPECT_EQ(t.ObserveAndFindBranch(ca), -1);
  EXPECT_EQ(t.ObserveAndFindBranch(cb), 1);  // leaves a's path after block 2
  EXPECT_EQ(t.ObserveAndFindBranch(ca), 3);  // seen whole
  EXPECT_EQ(t.ObserveAndFindBranch(cc), -1);
  t.Clear();
  EXPECT_EQ(t.ObserveAndFindBranch(ca), -1);
}

}  // namespace
}  // namespace leapcache::load
