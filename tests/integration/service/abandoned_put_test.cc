// A writer killed between reserve and commit (SIGKILL, after a finished partial upload or in the
// middle of an upload stream): nothing becomes visible, and the reservation's memory and heads
// come back within the put TTL plus the reaper interval; the key can then be put normally.
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/match.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr absl::Duration kTtl = absl::Seconds(2);
constexpr absl::Duration kReaper = absl::Milliseconds(100);

class AbandonedPutTest : public ServiceTest, public ::testing::WithParamInterface<const char*> {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=4MiB", "--page-bytes=4KiB", "--put-ttl=2s", "--reaper-interval=100ms"};
  }
};

TEST_P(AbandonedPutTest, KilledWriterLeavesNothingVisibleAndItsSpaceComesBack) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-abandon");
  const client::NamespaceInfo ns = Register(spec);
  const client::BlockHash key = TestHash(42);
  const std::array<client::BlockHash, 1> chain = {key};
  const client::ServerStats baseline = Stats();

  absl::StatusOr<std::unique_ptr<Child>> writer =
      Child::Spawn({LEAPCACHE_ABANDONED_WRITER_BIN, server_->target(), std::to_string(ns.id),
                    client::HashToHex(key), "1", GetParam()});
  ASSERT_TRUE(writer.ok()) << writer.status();
  absl::StatusOr<std::string> reserved = (*writer)->ReadLine(absl::Seconds(30));
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  ASSERT_TRUE(absl::StartsWith(*reserved, "reserved ")) << *reserved;
  absl::StatusOr<std::string> ready = (*writer)->ReadLine(absl::Seconds(30));
  ASSERT_TRUE(ready.ok()) << ready.status();
  ASSERT_EQ(*ready, "ready");

  // In flight: holds memory, invisible.
  client::ServerStats s = Stats();
  EXPECT_EQ(s.pending_puts, 1u);
  EXPECT_GT(s.tiers[0].reserved_bytes, 0u);
  EXPECT_FALSE(client_->Lookup({ns.id, chain, {}, 0, 16})->hit);

  (*writer)->Signal(SIGKILL);
  absl::StatusOr<int> code = (*writer)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 128 + SIGKILL);
  const absl::Time killed = absl::Now();

  // Never visible while it waits to be reclaimed.
  absl::Duration reclaimed_after = absl::InfiniteDuration();
  while (absl::Now() - killed < kTtl + absl::Seconds(10)) {
    EXPECT_FALSE(client_->Lookup({ns.id, chain, {}, 0, 16})->hit);
    EXPECT_EQ(client_->Get({ns.id, key, {}, std::nullopt}).status().code(),
              absl::StatusCode::kNotFound);
    s = Stats();
    if (s.pending_puts == 0 && s.tiers[0].reserved_bytes == 0) {
      reclaimed_after = absl::Now() - killed;
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  // The put's deadline counts from its reservation, before the kill: within TTL + reaper + slack.
  ASSERT_LT(reclaimed_after, kTtl + kReaper + absl::Seconds(2))
      << "the abandoned put was not reclaimed";
  std::printf("abandoned put reclaimed %s after the kill (TTL %s)\n",
              absl::FormatDuration(reclaimed_after).c_str(), absl::FormatDuration(kTtl).c_str());
  EXPECT_EQ(s.tiers[0].used_bytes, baseline.tiers[0].used_bytes);
  EXPECT_EQ(s.puts_expired, baseline.puts_expired + 1);
  EXPECT_EQ(s.checkpoints, 0u);

  // The key's heads are free again.
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 42));
  ASSERT_TRUE(client_->PutCompact({ns.id, key, {16, 1}, {}, {}}, blobs).ok());
  absl::StatusOr<client::Checkpoint> got = client_->Get({ns.id, key, {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);
}

INSTANTIATE_TEST_SUITE_P(Modes, AbandonedPutTest, ::testing::Values("uploaded", "streaming"));

}  // namespace
}  // namespace leapcache::testing
