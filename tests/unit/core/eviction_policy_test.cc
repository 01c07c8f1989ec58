#include "service/core/eviction_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace leapcache::core {
namespace {

std::vector<uint64_t> Order(const EvictionPolicy& p) {
  std::vector<uint64_t> ids;
  p.ForEachVictim([&](uint64_t id) {
    ids.push_back(id);
    return true;
  });
  return ids;
}

TEST(LruPolicyTest, EvictsLeastRecentlyUsedFirst) {
  auto lru = MakeLruPolicy();
  lru->Insert(1, 100.0, 1);
  lru->Insert(2, 1.0, 2);
  lru->Insert(3, 50.0, 3);
  EXPECT_EQ(Order(*lru), (std::vector<uint64_t>{1, 2, 3}));  // value is ignored
  lru->Touch(1, 4);
  EXPECT_EQ(Order(*lru), (std::vector<uint64_t>{2, 3, 1}));
  lru->Remove(3);
  lru->Remove(42);  // absent: no-op
  EXPECT_EQ(Order(*lru), (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(lru->size(), 2u);
  EXPECT_TRUE(lru->Contains(2));
  EXPECT_FALSE(lru->Contains(3));
}

TEST(LruPolicyTest, InsertWithAnOldTickKeepsItsRecency) {
  // A checkpoint spilled from a faster tier keeps its last access, so it is not the newest here.
  auto lru = MakeLruPolicy();
  lru->Insert(1, 1, 10);
  lru->Insert(2, 1, 20);
  lru->Insert(3, 1, 15);
  EXPECT_EQ(Order(*lru), (std::vector<uint64_t>{1, 3, 2}));
}

TEST(LruPolicyTest, VisitStopsWhenAsked) {
  auto lru = MakeLruPolicy();
  for (uint64_t i = 1; i <= 5; ++i) lru->Insert(i, 1, i);
  std::vector<uint64_t> seen;
  lru->ForEachVictim([&](uint64_t id) {
    seen.push_back(id);
    return seen.size() < 2;
  });
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2}));
}

TEST(StateAwarePolicyTest, LowValueGoesFirstAtEqualRecency) {
  auto p = MakeStateAwarePolicy(1000);
  p->Insert(1, 8.0, 1);  // deep prefix
  p->Insert(2, 1.0, 2);  // shallow
  p->Insert(3, 4.0, 3);
  EXPECT_EQ(Order(*p), (std::vector<uint64_t>{2, 3, 1}));
}

TEST(StateAwarePolicyTest, RecencyDecaysValue) {
  // Value 8 at tick 0 vs value 1 at tick t: log2(8) + 0 vs 0 + t / H, so the deep entry loses
  // once the shallow one is more than 3 half-lives newer.
  auto p = MakeStateAwarePolicy(10);
  p->Insert(1, 8.0, 0);
  p->Insert(2, 1.0, 29);
  EXPECT_EQ(Order(*p), (std::vector<uint64_t>{2, 1}));
  p->Touch(2, 31);
  EXPECT_EQ(Order(*p), (std::vector<uint64_t>{1, 2}));
  // Touching the deep one brings it back.
  p->Touch(1, 40);
  EXPECT_EQ(Order(*p), (std::vector<uint64_t>{2, 1}));
}

TEST(StateAwarePolicyTest, EqualValuesFallBackToLru) {
  auto p = MakeStateAwarePolicy(1e12);  // decay negligible
  p->Insert(7, 3.0, 5);
  p->Insert(3, 3.0, 6);
  p->Insert(9, 3.0, 4);
  EXPECT_EQ(Order(*p), (std::vector<uint64_t>{9, 7, 3}));
}

TEST(StateAwarePolicyTest, PriorityFormula) {
  EXPECT_DOUBLE_EQ(StateAwarePriority(8.0, 20, 10.0), 3.0 + 2.0);
  EXPECT_DOUBLE_EQ(StateAwarePriority(1.0, 0, 10.0), 0.0);
  // Ranking by priority equals ranking by value x 2^-(now - tick) / H at any `now`.
  const double now = 1000, h = 64;
  const double a = 12.0 * std::exp2(-(now - 900) / h), b = 3.0 * std::exp2(-(now - 990) / h);
  EXPECT_EQ(a < b, StateAwarePriority(12.0, 900, h) < StateAwarePriority(3.0, 990, h));
  EXPECT_TRUE(std::isfinite(StateAwarePriority(0.0, 1, 1.0)));
}

}  // namespace
}  // namespace leapcache::core
