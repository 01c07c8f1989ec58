#include "service/core/head_range.h"

#include <gtest/gtest.h>

namespace leapcache::core {
namespace {

TEST(HeadRangeTest, RangeBasics) {
  HeadRange r{2, 6};
  EXPECT_EQ(r.size(), 4);
  EXPECT_FALSE(r.empty());
  EXPECT_TRUE(r.Contains(2));
  EXPECT_FALSE(r.Contains(6));
  EXPECT_TRUE(r.Overlaps({5, 9}));
  EXPECT_FALSE(r.Overlaps({6, 9}));
  EXPECT_FALSE(r.Overlaps({0, 2}));
  EXPECT_TRUE((HeadRange{3, 3}).empty());
}

TEST(HeadRangeSetTest, TensorParallelHalvesMergeAndCoverTheWhole) {
  HeadRangeSet s;
  s.Add({16, 32});
  EXPECT_FALSE(s.Covers({0, 32}));
  EXPECT_TRUE(s.Covers({16, 32}));
  EXPECT_TRUE(s.Covers({20, 24}));  // a TP=8 rank inside a TP=2 half
  s.Add({0, 16});
  ASSERT_EQ(s.ranges().size(), 1u);
  EXPECT_EQ(s.ranges()[0], (HeadRange{0, 32}));
  EXPECT_TRUE(s.Covers({0, 32}));
  EXPECT_EQ(s.heads(), 32);
}

TEST(HeadRangeSetTest, GapsAreNotCovered) {
  HeadRangeSet s;
  s.Add({0, 4});
  s.Add({8, 12});
  EXPECT_FALSE(s.Covers({0, 12}));
  EXPECT_FALSE(s.Covers({3, 5}));
  EXPECT_TRUE(s.Overlaps({3, 5}));
  EXPECT_FALSE(s.Overlaps({4, 8}));
  s.Add({4, 8});  // fills the gap: everything merges
  EXPECT_EQ(s.ranges().size(), 1u);
  EXPECT_TRUE(s.Covers({0, 12}));
  EXPECT_EQ(s.ToString(), "{[0, 12)}");
}

TEST(HeadRangeSetTest, OutOfOrderAddsStaySorted) {
  HeadRangeSet s;
  s.Add({10, 12});
  s.Add({0, 2});
  s.Add({5, 6});
  ASSERT_EQ(s.ranges().size(), 3u);
  EXPECT_EQ(s.ranges()[0].begin, 0);
  EXPECT_EQ(s.ranges()[1].begin, 5);
  EXPECT_EQ(s.ranges()[2].begin, 10);
  s.Clear();
  EXPECT_TRUE(s.empty());
}

}  // namespace
}  // namespace leapcache::core
