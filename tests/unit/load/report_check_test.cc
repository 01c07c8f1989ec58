#include "load/report_check.h"

#include <gtest/gtest.h>

#include <functional>
#include <ostream>

#include "load/latency_recorder.h"

namespace leapcache::load {
namespace {

// A run whose numbers all agree: 10 requests, 8 lookups, 3 hits fetched, 5 puts.
FormatRun Consistent() {
  FormatRun r;
  r.label = "leap8";
  r.checkpoint_bytes = 1000;
  ClientCounters& c = r.counters;
  c.requests = 10;
  c.requests_with_blocks = 8;
  c.lookups = 8;
  c.lookup_hits = 3;
  c.input_tokens = 10000;
  c.lookup_tokens = 8192;
  c.hit_tokens = 2048;
  c.gets = 3;
  c.gets_verified = 3;
  c.get_bytes = 3000;
  c.puts = 5;
  c.put_bytes = 5000;
  client::ServerStats& a = r.server.after;
  a.lookups = 8;
  a.lookup_hits = 3;
  a.puts_committed = 5;
  a.bytes_in = 5100;
  a.bytes_out = 3100;
  a.checkpoints = 2;
  a.tiers.push_back({"host", 4096, 4096, 2048, 0, 2});
  r.resident_checkpoints = 2;
  r.store_emptied = true;
  r.emptied_checkpoints = 2;
  return r;
}

TEST(ReportCheck, AConsistentRunHasNoViolations) {
  EXPECT_TRUE(CheckFormatRun(Consistent()).empty());
  LoadReport report;
  report.workload_requests = 10;
  report.runs = {Consistent()};
  EXPECT_TRUE(CheckReport(report).empty());
}

struct Breakage {
  const char* name;
  std::function<void(FormatRun&)> breakit;
  const char* expected;  // part of the violation's text
};

void PrintTo(const Breakage& b, std::ostream* os) { *os << b.name; }

class ReportCheckViolation : public ::testing::TestWithParam<Breakage> {};

TEST_P(ReportCheckViolation, IsReported) {
  FormatRun r = Consistent();
  GetParam().breakit(r);
  const std::vector<std::string> v = CheckFormatRun(r);
  ASSERT_FALSE(v.empty());
  bool found = false;
  for (const std::string& s : v) found |= s.find(GetParam().expected) != std::string::npos;
  EXPECT_TRUE(found) << v.front();
  EXPECT_EQ(v.front().rfind("leap8: ", 0), 0u) << v.front();
}

INSTANTIATE_TEST_SUITE_P(
    All, ReportCheckViolation,
    ::testing::Values(
        Breakage{"more_hits", [](FormatRun& r) { r.counters.lookup_hits = 9; }, "hits 9 > lookups 8"},
        Breakage{"token_hits", [](FormatRun& r) { r.counters.hit_tokens = 9000; }, "hit tokens 9000"},
        Breakage{"lookup_tokens", [](FormatRun& r) { r.counters.lookup_tokens = 20000; },
                 "> input tokens"},
        Breakage{"unverified", [](FormatRun& r) { r.counters.gets_verified = 2; },
                 "verified byte-exact 2 != gets 3"},
        Breakage{"mismatch", [](FormatRun& r) { r.counters.gets_mismatched = 1; }, "other bytes"},
        Breakage{"errors", [](FormatRun& r) { r.counters.errors = 2; }, "2 calls failed"},
        Breakage{"put_bytes", [](FormatRun& r) { r.counters.put_bytes = 4999; }, "put bytes 4999"},
        Breakage{"get_bytes", [](FormatRun& r) { r.counters.get_bytes = 1; }, "get bytes 1"},
        Breakage{"server_in", [](FormatRun& r) { r.server.after.bytes_in = 10; }, "server received"},
        Breakage{"server_lookups", [](FormatRun& r) { r.server.after.lookups = 7; },
                 "server counted 7 lookups"},
        Breakage{"tier_over", [](FormatRun& r) { r.server.after.tiers[0].used_bytes = 5000; },
                 "tier host uses 5000"},
        Breakage{"resident_over", [](FormatRun& r) { r.resident_checkpoints = 5; },
                 "5 resident checkpoints x 1000 bytes > memory 4096"},
        Breakage{"not_emptied", [](FormatRun& r) { r.emptied_checkpoints = 1; },
                 "deleted 1 checkpoints"},
        Breakage{"unfetched_hit", [](FormatRun& r) {
                   r.counters.gets = 2;
                   r.counters.gets_verified = 2;
                   r.counters.get_bytes = 2000;
                 }, "not all fetched"},
        Breakage{"lookups_vs_requests", [](FormatRun& r) { r.counters.lookups = 7; },
                 "lookups 7 != requests with a full block 8"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ReportCheck, AReportMustRunEveryRequestInEveryFormat) {
  LoadReport report;
  report.workload_requests = 11;
  report.runs = {Consistent()};
  const std::vector<std::string> v = CheckReport(report);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("ran 10 requests of 11"), std::string::npos);
  report.runs.clear();
  EXPECT_FALSE(CheckReport(report).empty());
}

TEST(LatencyRecorder, NearestRankPercentiles) {
  LatencyRecorder rec;
  for (int i = 100; i >= 1; --i) rec.Record(absl::Microseconds(i));
  const LatencySummary s = rec.Summarize();
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.p50_us, 50);
  EXPECT_DOUBLE_EQ(s.p90_us, 90);
  EXPECT_DOUBLE_EQ(s.p99_us, 99);
  EXPECT_DOUBLE_EQ(s.max_us, 100);
  EXPECT_DOUBLE_EQ(s.mean_us, 50.5);
  EXPECT_EQ(LatencyRecorder().Summarize().count, 0u);
}

}  // namespace
}  // namespace leapcache::load
