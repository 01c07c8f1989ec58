// The metrics layer: registry naming rules, the three metric types, and the text exposition.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "service/metrics/registry.h"
#include "service/metrics/text_format.h"

namespace leapcache::metrics {
namespace {

TEST(MetricsTest, CountersGaugesAndHistograms) {
  Registry r;
  Family<Counter>& requests = r.AddCounter("leapcache_requests_total", "Requests.");
  Family<Gauge>& memory = r.AddGauge("leapcache_memory_bytes", "Memory.");
  Family<Histogram>& latency =
      r.AddHistogram("leapcache_latency_seconds", "Latency.", {0.001, 0.01, 0.1});
  Counter& ok = requests.Add({{"code", "OK"}});
  EXPECT_EQ(&ok, &requests.Add({{"code", "OK"}}));  // same labels, same series
  ok.Increment();
  ok.Increment(2);
  ok.Increment(-5);  // ignored: counters never go down
  requests.Add({{"code", "NOT_FOUND"}}).Increment();
  memory.Add({{"tier", "host"}}).Set(1024);
  Histogram& h = latency.Add({{"method", "Get"}});
  for (double v : {0.0005, 0.001, 0.005, 0.05, 5.0}) h.Observe(v);

  const std::vector<FamilySnapshot> s = r.Collect();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].name, "leapcache_requests_total");
  ASSERT_EQ(s[0].metrics.size(), 2u);
  EXPECT_EQ(s[0].metrics[1].labels.at("code"), "OK");
  EXPECT_EQ(s[0].metrics[1].value, 3);
  EXPECT_EQ(s[1].metrics[0].value, 1024);
  const HistogramSnapshot& hs = s[2].metrics[0].histogram;
  EXPECT_EQ(hs.cumulative_counts, (std::vector<uint64_t>{2, 3, 4}));  // le is inclusive
  EXPECT_EQ(hs.count, 5u);
  EXPECT_DOUBLE_EQ(hs.sum, 0.0005 + 0.001 + 0.005 + 0.05 + 5.0);
}

TEST(MetricsTest, ConcurrentIncrementsAreExact) {
  Registry r;
  Counter& c = r.AddCounter("leapcache_x_total", "x").Add({});
  Histogram& h = r.AddHistogram("leapcache_y_seconds", "y", {1.0}).Add({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), 80000);
  EXPECT_EQ(h.Snapshot().count, 80000u);
  EXPECT_EQ(h.Snapshot().cumulative_counts[0], 80000u);
}

TEST(MetricsTest, TextExposition) {
  Registry r;
  r.AddCounter("leapcache_requests_total", "Requests \\ by \"code\".\nSecond line.")
      .Add({{"code", "OK"}, {"method", "a\"b\\c\nd"}})
      .Increment(3);
  r.AddGauge("leapcache_ratio", "Ratio.").Add({}).Set(0.25);
  r.AddGauge("leapcache_big_bytes", "Big.").Add({}).Set(1099511627776.0);
  Histogram& h = r.AddHistogram("leapcache_latency_seconds", "Latency.", {0.005, 0.1})
                     .Add({{"method", "Get"}});
  h.Observe(0.001);
  h.Observe(1);
  EXPECT_EQ(SerializeText(r.Collect()),
            "# HELP leapcache_requests_total Requests \\\\ by \"code\".\\nSecond line.\n"
            "# TYPE leapcache_requests_total counter\n"
            "leapcache_requests_total{code=\"OK\",method=\"a\\\"b\\\\c\\nd\"} 3\n"
            "# HELP leapcache_ratio Ratio.\n"
            "# TYPE leapcache_ratio gauge\n"
            "leapcache_ratio 0.25\n"
            "# HELP leapcache_big_bytes Big.\n"
            "# TYPE leapcache_big_bytes gauge\n"
            "leapcache_big_bytes 1099511627776\n"
            "# HELP leapcache_latency_seconds Latency.\n"
            "# TYPE leapcache_latency_seconds histogram\n"
            "leapcache_latency_seconds_bucket{method=\"Get\",le=\"0.005\"} 1\n"
            "leapcache_latency_seconds_bucket{method=\"Get\",le=\"0.1\"} 1\n"
            "leapcache_latency_seconds_bucket{method=\"Get\",le=\"+Inf\"} 2\n"
            "leapcache_latency_seconds_sum{method=\"Get\"} 1.001\n"
            "leapcache_latency_seconds_count{method=\"Get\"} 2\n");
}

TEST(MetricsTest, ValuesAreWrittenAsTheFormatSpellsThem) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e-9), "1e-09");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
}

TEST(MetricsDeathTest, NamingRulesAreEnforcedAtRegistration) {
  EXPECT_DEATH(
      {
        Registry r;
        r.AddCounter("leapcache_requests", "no _total");
      },
      "must end in _total");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("other_bytes", "no prefix");
      },
      "lacks the prefix");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("leapcache_x", "a");
        r.AddGauge("leapcache_x", "b");
      },
      "registered twice");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("leapcache_bad-name", "a");
      },
      "invalid metric name");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("leapcache_x", "a").Add({{"__reserved", "v"}});
      },
      "invalid label name");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddHistogram("leapcache_h_seconds", "h", {1.0, 0.5});
      },
      "strictly ascending");
}

}  // namespace
}  // namespace leapcache::metrics
