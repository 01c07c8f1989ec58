// StreamWatchdog: which streams expire when, that a stream expires once, that a stream which
// ended is never called back, and what the metrics count.
#include "service/grpc/stream_watchdog.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "service/core/clock.h"
#include "service/metrics/registry.h"
#include "service/metrics/text_format.h"

namespace leapcache::server {
namespace {

class StreamWatchdogTest : public ::testing::Test {
 protected:
  StreamWatchdogTest()
      : watchdog_(StreamLimits{absl::Seconds(30), absl::Minutes(10)}, clock_, &registry_) {}

  // Watches a stream whose expiries land in `log`.
  StreamWatchdog::Entry* Watch(std::vector<StreamExpiry>* log,
                               const std::string& method = "StateCache/Get") {
    return watchdog_.Watch(method, [log](StreamExpiry why) { log->push_back(why); });
  }
  std::string Metrics() const { return metrics::SerializeText(registry_.Collect()); }

  core::FakeClock clock_;
  metrics::Registry registry_;
  StreamWatchdog watchdog_;
};

TEST_F(StreamWatchdogTest, AStreamWithoutProgressExpiresAsIdleOnceItsLimitPassed) {
  std::vector<StreamExpiry> log;
  StreamWatchdog::Entry* e = Watch(&log);
  clock_.Advance(absl::Seconds(29));
  EXPECT_EQ(watchdog_.Sweep(), 0);
  EXPECT_TRUE(log.empty());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(watchdog_.Sweep(), 1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], StreamExpiry::kIdle);
  // Once: later sweeps leave it alone, and the stream's own end is then a no-op.
  clock_.Advance(absl::Minutes(20));
  EXPECT_EQ(watchdog_.Sweep(), 0);
  EXPECT_EQ(log.size(), 1u);
  EXPECT_EQ(watchdog_.watched(), 0u);
  watchdog_.Unwatch(e);
}

TEST_F(StreamWatchdogTest, ProgressKeepsAStreamUntilItsMaximumAge) {
  std::vector<StreamExpiry> log;
  StreamWatchdog::Entry* e = Watch(&log);
  for (int i = 0; i < 19; ++i) {  // a message every 29 s for 9 min 11 s
    clock_.Advance(absl::Seconds(29));
    e->Progress();
    EXPECT_EQ(watchdog_.Sweep(), 0) << i;
  }
  clock_.Advance(absl::Seconds(29));  // 9 min 40 s
  e->Progress();
  EXPECT_EQ(watchdog_.Sweep(), 0);
  clock_.Advance(absl::Seconds(20));  // 10 min, and progress 20 s ago
  e->Progress();
  EXPECT_EQ(watchdog_.Sweep(), 1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], StreamExpiry::kAge);
  watchdog_.Unwatch(e);
}

TEST_F(StreamWatchdogTest, AStreamThatEndedIsNeverCalledBack) {
  std::vector<StreamExpiry> ended, running;
  StreamWatchdog::Entry* a = Watch(&ended);
  StreamWatchdog::Entry* b = Watch(&running, "StateCache/UploadPut");
  EXPECT_EQ(watchdog_.watched(), 2u);
  watchdog_.Unwatch(a);
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(watchdog_.Sweep(), 1);
  EXPECT_TRUE(ended.empty());
  EXPECT_EQ(running.size(), 1u);
  watchdog_.Unwatch(b);
}

TEST_F(StreamWatchdogTest, AStreamMayEndInsideItsOwnExpiry) {
  // Cancelling a call can run the stream's last callbacks inline, Unwatch() among them.
  StreamWatchdog::Entry* e = nullptr;
  int calls = 0;
  e = watchdog_.Watch("StateCache/Get", [&](StreamExpiry) {
    ++calls;
    watchdog_.Unwatch(e);
  });
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(watchdog_.Sweep(), 1);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(watchdog_.watched(), 0u);
}

TEST_F(StreamWatchdogTest, MetricsCountOpenAndExpiredStreamsByMethodAndReason) {
  std::vector<StreamExpiry> log;
  StreamWatchdog::Entry* get = Watch(&log);
  StreamWatchdog::Entry* upload = Watch(&log, "StateCache/UploadPut");
  Watch(&log);  // left to expire
  EXPECT_TRUE(absl::StrContains(Metrics(), "leapcache_streams_open{method=\"StateCache/Get\"} 2"))
      << Metrics();
  watchdog_.Unwatch(get);
  clock_.Advance(absl::Seconds(30));
  upload->Progress();
  EXPECT_EQ(watchdog_.Sweep(), 1);
  const std::string text = Metrics();
  EXPECT_TRUE(absl::StrContains(text, "leapcache_streams_open{method=\"StateCache/Get\"} 0"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "leapcache_streams_open{method=\"StateCache/UploadPut\"} 1"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "leapcache_streams_expired_total{method=\"StateCache/Get\",reason=\"idle\"} 1"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "leapcache_streams_expired_total{method=\"StateCache/UploadPut\",reason=\"idle\"} 0"))
      << text;
  watchdog_.Unwatch(upload);
}

}  // namespace
}  // namespace leapcache::server
