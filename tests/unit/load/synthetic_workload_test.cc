#include "load/synthetic_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace leapcache::load {
namespace {

SyntheticOptions Options(Scenario s, uint64_t seed = 1) {
  SyntheticOptions o;
  o.scenario = s;
  o.requests = 2000;
  o.seed = seed;
  o.population = 16;
  return o;
}

bool SameWorkload(const std::vector<WorkloadRequest>& a, const std::vector<WorkloadRequest>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].arrival_s != b[i].arrival_s || a[i].input_tokens != b[i].input_tokens ||
        a[i].output_tokens != b[i].output_tokens || a[i].block_ids != b[i].block_ids) {
      return false;
    }
  }
  return true;
}

// The longest common prefix of two requests' full blocks.
size_t SharedBlocks(const WorkloadRequest& a, const WorkloadRequest& b, int64_t bt) {
  const size_t n = std::min(FullBlocks(a, bt), FullBlocks(b, bt));
  size_t i = 0;
  while (i < n && a.block_ids[i] == b.block_ids[i]) ++i;
  return i;
}

class ScenarioTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(ScenarioTest, DeterministicForASeedAndDifferentAcrossSeeds) {
  absl::StatusOr<std::vector<WorkloadRequest>> a = GenerateSyntheticWorkload(Options(GetParam(), 5));
  absl::StatusOr<std::vector<WorkloadRequest>> b = GenerateSyntheticWorkload(Options(GetParam(), 5));
  absl::StatusOr<std::vector<WorkloadRequest>> c = GenerateSyntheticWorkload(Options(GetParam(), 6));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(SameWorkload(*a, *b));
  EXPECT_FALSE(SameWorkload(*a, *c));
}

TEST_P(ScenarioTest, RequestsAreWellFormedAndShareprefixes) {
  const SyntheticOptions o = Options(GetParam());
  absl::StatusOr<std::vector<WorkloadRequest>> w = GenerateSyntheticWorkload(o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), static_cast<size_t>(o.requests));
  double prev = 0;
  size_t sharing = 0;
  for (size_t i = 0; i < w->size(); ++i) {
    const WorkloadRequest& r = (*w)[i];
    EXPECT_GT(r.arrival_s, prev);
    prev = r.arrival_s;
    EXPECT_EQ(static_cast<int64_t>(r.block_ids.size()),
              (r.input_tokens + o.block_tokens - 1) / o.block_tokens);
    EXPECT_GE(FullBlocks(r, o.block_tokens), 1);
    EXPECT_LE(FullBlocks(r, o.block_tokens), o.max_context_blocks + 4);
    EXPECT_GT(r.output_tokens, 0);
    // Every prompt ends in a partial block nobody else has.
    for (size_t j = (i > 50 ? i - 50 : 0); j < i; ++j) {
      EXPECT_NE((*w)[j].block_ids.back(), r.block_ids.back());
      if (SharedBlocks((*w)[j], r, o.block_tokens) > 0) {
        ++sharing;
        break;
      }
    }
  }
  // Zipf over 16 prefixes: most requests share a prefix with one of the 50 before them.
  EXPECT_GT(sharing, w->size() / 2);
}

INSTANTIATE_TEST_SUITE_P(All, ScenarioTest,
                         ::testing::Values(Scenario::kSystemPrompt, Scenario::kChat,
                                           Scenario::kAgent, Scenario::kFewShot, Scenario::kMixed),
                         [](const auto& info) {
                           std::string n = ScenarioName(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(SyntheticWorkload, ChatTurnsExtendTheirConversation) {
  absl::StatusOr<std::vector<WorkloadRequest>> w =
      GenerateSyntheticWorkload(Options(Scenario::kChat));
  ASSERT_TRUE(w.ok());
  // A later turn contains an earlier turn's full blocks as its prefix, plus more.
  size_t extended = 0;
  for (size_t i = 1; i < w->size(); ++i) {
    const WorkloadRequest& r = (*w)[i];
    for (size_t j = (i > 32 ? i - 32 : 0); j < i; ++j) {
      const WorkloadRequest& e = (*w)[j];
      const size_t full = FullBlocks(e, 512);
      if (full < static_cast<size_t>(FullBlocks(r, 512)) && SharedBlocks(e, r, 512) == full &&
          full > 2) {
        ++extended;
        break;
      }
    }
  }
  EXPECT_GT(extended, w->size() / 4);
}

TEST(SyntheticWorkload, ParsesScenariosAndRejectsBadOptions) {
  EXPECT_EQ(*ParseScenario("few-shot"), Scenario::kFewShot);
  EXPECT_FALSE(ParseScenario("chatty").ok());
  SyntheticOptions o;
  o.requests = 0;
  EXPECT_NE(GenerateSyntheticWorkload(o).status().message().find("requests"), std::string::npos);
  o = SyntheticOptions();
  o.rate_per_s = 0;
  EXPECT_NE(GenerateSyntheticWorkload(o).status().message().find("rate"), std::string::npos);
  o = SyntheticOptions();
  o.zipf_s = -1;
  EXPECT_NE(GenerateSyntheticWorkload(o).status().message().find("zipf"), std::string::npos);
  o = SyntheticOptions();
  o.population = 0;
  EXPECT_NE(GenerateSyntheticWorkload(o).status().message().find("population"), std::string::npos);
  o = SyntheticOptions();
  o.block_tokens = 1;
  EXPECT_NE(GenerateSyntheticWorkload(o).status().message().find("block_tokens"), std::string::npos);
}

}  // namespace
}  // namespace leapcache::load
