#include "service/core/checkpoint_index.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace leapcache::core {
namespace {

using testing::HashOf;

const auto kLive = [](uint64_t) { return true; };
const auto kDead = [](uint64_t) { return false; };

CheckpointKey Key(uint64_t i, NamespaceId ns = 1) { return CheckpointKey{ns, HashOf(i)}; }

TEST(CheckpointIndexTest, PendingHeadsAreInvisibleUntilCommitted) {
  CheckpointIndex index;
  const Position pos{32, 2};
  ASSERT_TRUE(index.BeginPut(Key(1), pos, {0, 2}, kLive).ok());
  EXPECT_FALSE(index.Find(Key(1), {0, 2}).has_value());
  EXPECT_FALSE(index.FindEntry(Key(1)).has_value());
  index.CommitPut(Key(1), {0, 2}, [](uint64_t current) {
    EXPECT_EQ(current, 0u);
    return uint64_t{7};
  });
  std::optional<IndexHit> hit = index.Find(Key(1), {0, 2});
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->entry_id, 7u);
  EXPECT_EQ(hit->position, pos);
  EXPECT_FALSE(index.Find(Key(1), {0, 4}).has_value());
  EXPECT_EQ(index.committed_keys(), 1u);
}

TEST(CheckpointIndexTest, ConflictsAreRefusedWithoutChange) {
  CheckpointIndex index;
  ASSERT_TRUE(index.BeginPut(Key(1), {16, 1}, {0, 2}, kLive).ok());
  EXPECT_EQ(index.BeginPut(Key(1), {16, 1}, {1, 3}, kLive).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index.BeginPut(Key(1), {32, 2}, {2, 4}, kLive).code(),
            absl::StatusCode::kInvalidArgument);
  index.CommitPut(Key(1), {0, 2}, [](uint64_t) { return uint64_t{3}; });
  EXPECT_EQ(index.BeginPut(Key(1), {16, 1}, {0, 1}, kLive).code(),
            absl::StatusCode::kAlreadyExists);
  // A refused put on a fresh key leaves nothing behind.
  ASSERT_TRUE(index.BeginPut(Key(2), {16, 1}, {0, 2}, kLive).ok());
  index.EndPut(Key(2), {0, 2});
  ASSERT_TRUE(index.BeginPut(Key(2), {48, 3}, {0, 2}, kLive).ok());  // any position again
}

TEST(CheckpointIndexTest, ADeadEntryIsForgottenByTheNextPut) {
  CheckpointIndex index;
  ASSERT_TRUE(index.BeginPut(Key(1), {16, 1}, {0, 4}, kLive).ok());
  index.CommitPut(Key(1), {0, 4}, [](uint64_t) { return uint64_t{5}; });
  // The residency table evicted entry 5; the index has not been told yet.
  EXPECT_TRUE(index.Find(Key(1), {0, 4}).has_value());
  ASSERT_TRUE(index.BeginPut(Key(1), {16, 1}, {0, 4}, kDead).ok());
  index.CommitPut(Key(1), {0, 4}, [](uint64_t current) {
    EXPECT_EQ(current, 0u);
    return uint64_t{6};
  });
  index.Unlink(Key(1), 5);  // the late unlink of the old entry is a no-op
  ASSERT_TRUE(index.Find(Key(1), {0, 4}).has_value());
  EXPECT_EQ(index.Find(Key(1), {0, 4})->entry_id, 6u);
  index.Unlink(Key(1), 6);
  EXPECT_FALSE(index.Find(Key(1), {0, 4}).has_value());
  EXPECT_EQ(index.committed_keys(), 0u);
}

TEST(CheckpointIndexTest, RemoveKeepsPutsInFlight) {
  CheckpointIndex index;
  ASSERT_TRUE(index.BeginPut(Key(1), {16, 1}, {0, 2}, kLive).ok());
  index.CommitPut(Key(1), {0, 2}, [](uint64_t) { return uint64_t{1}; });
  ASSERT_TRUE(index.BeginPut(Key(1), {16, 1}, {2, 4}, kLive).ok());
  EXPECT_EQ(index.Remove(Key(1)), std::optional<uint64_t>(1));
  EXPECT_FALSE(index.Remove(Key(1)).has_value());
  index.CommitPut(Key(1), {2, 4}, [](uint64_t current) {
    EXPECT_EQ(current, 0u);
    return uint64_t{2};
  });
  EXPECT_TRUE(index.Find(Key(1), {2, 4}).has_value());
  EXPECT_FALSE(index.Find(Key(1), {0, 2}).has_value());
}

TEST(CheckpointIndexTest, NamespacesSeparateEqualHashes) {
  CheckpointIndex index;
  ASSERT_TRUE(index.BeginPut(Key(1, 1), {16, 1}, {0, 2}, kLive).ok());
  index.CommitPut(Key(1, 1), {0, 2}, [](uint64_t) { return uint64_t{1}; });
  EXPECT_FALSE(index.Find(Key(1, 2), {0, 2}).has_value());
  ASSERT_TRUE(index.BeginPut(Key(1, 2), {48, 3}, {0, 2}, kLive).ok());  // no conflict
}

}  // namespace
}  // namespace leapcache::core
