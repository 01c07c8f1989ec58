// The load tester against the real leapcache-server binary: a short replay of a Mooncake trace
// excerpt with a budget small enough that the server evicts, checked for self-consistency both
// through the library (exact counters) and end to end through the leapcache-load binary (exit
// status, report files, plots).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "load/load_runner.h"
#include "load/mooncake_trace.h"
#include "load/report_check.h"
#include "load/state_pool.h"
#include "tests/integration/service/process.h"

namespace leapcache::load {
namespace {

using ::leapcache::testing::RunProgram;
using ::leapcache::testing::ServerProcess;

// 4 MiB (31 pages of 132 KiB) fits 3 fp32 checkpoints of the small shape below (16 blobs of
// 65,600 bytes, 2 to a page) and 15 4-bit ones (16 of 13,376 bytes, 10 to a page): every format
// evicts.
const std::vector<std::string> kServerArgs = {"--memory-budget=4MiB", "--page-bytes=132KiB"};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

client::ModelShape SmallShape() {
  client::ModelShape m;
  m.linear_layers = 4;
  m.total_heads = 4;
  return m;
}

TEST(LoadReplay, EveryFormatStaysConsistentUnderEviction) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(kServerArgs);
  ASSERT_TRUE(server.ok()) << server.status();
  MooncakeTraceOptions trace_options;
  trace_options.max_requests = 150;
  absl::StatusOr<std::vector<WorkloadRequest>> requests =
      LoadMooncakeTrace(LEAPCACHE_LOAD_TRACE, trace_options);
  ASSERT_TRUE(requests.ok()) << requests.status();
  const std::vector<LoadFormat> formats = *ParseFormats("fp32,leap4");
  StatePoolOptions pool_options;
  pool_options.distinct_states = 8;
  pool_options.trajectory_tokens = 64;
  absl::StatusOr<std::unique_ptr<StatePool>> pool =
      StatePool::Build(SmallShape(), formats, pool_options);
  ASSERT_TRUE(pool.ok()) << pool.status();

  RunnerOptions options;
  options.target = (*server)->target();
  options.model = SmallShape();
  options.admission = Admission::kBranchPoints;
  ProgressLine progress(false);
  std::vector<FormatRun> runs;
  for (size_t f = 0; f < formats.size(); ++f) {
    absl::StatusOr<FormatRun> run = RunFormat(*requests, **pool, f, formats[f], options, progress);
    ASSERT_TRUE(run.ok()) << run.status();
    const std::vector<std::string> violations = CheckFormatRun(*run);
    EXPECT_TRUE(violations.empty()) << violations.front();
    const ClientCounters& c = run->counters;
    EXPECT_EQ(c.requests, requests->size());
    EXPECT_GT(c.lookup_hits, 0u) << formats[f].label;
    EXPECT_EQ(c.gets_verified, c.gets);
    EXPECT_GT(c.gets_verified, 0u);
    EXPECT_GT(Delta(run->server.before.evictions, run->server.after.evictions), 0u)
        << "the budget is meant to overflow";
    for (const client::TierStats& t : run->server.after.tiers) {
      EXPECT_LE(t.used_bytes, t.capacity_bytes);
    }
    // The budget in whole pages.
    EXPECT_EQ(run->budget_bytes, (4u << 20) / (132u << 10) * (132u << 10));
    runs.push_back(*std::move(run));
  }
  // Same budget, smaller checkpoints: the 4-bit format keeps more of them.
  EXPECT_GT(runs[1].resident_checkpoints, runs[0].resident_checkpoints);
  // The store was emptied after each format.
  absl::StatusOr<std::unique_ptr<client::Client>> c =
      client::Client::Create([&] {
        client::ClientOptions o;
        o.target = (*server)->target();
        return o;
      }());
  ASSERT_TRUE(c.ok());
  absl::StatusOr<client::ServerStats> stats = (*c)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->checkpoints, 0u);
  absl::StatusOr<int> code = (*server)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

TEST(LoadReplay, CheckpointsWithConvStatesAreVerifiedUnitForUnit) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(kServerArgs);
  ASSERT_TRUE(server.ok()) << server.status();
  MooncakeTraceOptions trace_options;
  trace_options.max_requests = 60;
  absl::StatusOr<std::vector<WorkloadRequest>> requests =
      LoadMooncakeTrace(LEAPCACHE_LOAD_TRACE, trace_options);
  ASSERT_TRUE(requests.ok()) << requests.status();
  client::ModelShape model = SmallShape();
  model.conv = client::ConvShape{model.total_heads * 24, 3, client::ConvDType::kBf16};
  model.extra_bytes = 8;
  const std::vector<LoadFormat> formats = *ParseFormats("leap8");
  StatePoolOptions pool_options;
  pool_options.distinct_states = 8;
  pool_options.trajectory_tokens = 64;
  absl::StatusOr<std::unique_ptr<StatePool>> pool =
      StatePool::Build(model, formats, pool_options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ((*pool)->side_bytes(), 24u * 3 * 2 + 8);

  RunnerOptions options;
  options.target = (*server)->target();
  options.model = model;
  options.admission = Admission::kBranchPoints;
  ProgressLine progress(false);
  absl::StatusOr<FormatRun> run = RunFormat(*requests, **pool, 0, formats[0], options, progress);
  ASSERT_TRUE(run.ok()) << run.status();
  const std::vector<std::string> violations = CheckFormatRun(*run);
  EXPECT_TRUE(violations.empty()) << violations.front();
  EXPECT_GT(run->counters.gets_verified, 0u);
  EXPECT_EQ(run->counters.gets_verified, run->counters.gets);
  absl::StatusOr<int> code = (*server)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

TEST(LoadReplay, BinaryWritesAConsistentReportAndPlots) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(kServerArgs);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string out = ::leapcache::testing::MakeTempDir("load_report");
  absl::StatusOr<::leapcache::testing::RunResult> run = RunProgram(
      {LEAPCACHE_LOAD_BIN, "--server=" + (*server)->target(), "--trace=" LEAPCACHE_LOAD_TRACE,
       "--out=" + out, "--check", "--pool_states=8", "--state_tokens=64", "--engines=2",
       "--slots=2"},
      {}, absl::Seconds(100));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0) << run->output;
  EXPECT_NE(run->output.find("self-consistent"), std::string::npos) << run->output;
  const std::string json = ReadAll(out + "/report.json");
  EXPECT_NE(json.find("\"consistent\": true"), std::string::npos);
  EXPECT_NE(json.find("\"workload_requests\": 300"), std::string::npos);
  for (const char* f : {"fp32", "bf16", "leap8", "leap6", "leap4"}) {
    EXPECT_NE(json.find(std::string("\"format\": \"") + f + "\""), std::string::npos) << f;
  }
  EXPECT_NE(ReadAll(out + "/report.md").find("## At one memory budget"), std::string::npos);
  for (const char* png : {"/headline.png", "/latency.png"}) {
    const std::string bytes = ReadAll(out + png);
    ASSERT_GT(bytes.size(), 8u) << png;
    EXPECT_EQ(bytes.substr(1, 3), "PNG") << png;
  }
  absl::StatusOr<int> code = (*server)->Stop();
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

TEST(LoadReplay, BadFlagsAreRejectedWithTheFlagNamed) {
  const std::string out = ::leapcache::testing::MakeTempDir("load_bad_flags");
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--scenario=chatty"}, "scenario"},
      {{"--formats=fp32,int3"}, "int3"},
      {{"--kind=mamba"}, "--kind"},
      {{"--engines=0"}, "engines"},
      {{"--trace=/nonexistent/trace.jsonl"}, "cannot read trace"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {LEAPCACHE_LOAD_BIN, "--out=" + out,
                                     "--server=127.0.0.1:1"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    // stderr is inherited (it shows in the log); the exit status says it failed before any run.
    absl::StatusOr<::leapcache::testing::RunResult> r = RunProgram(argv, {}, absl::Seconds(30));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 1) << c.args.front();
    EXPECT_EQ(r->output.find("requests/s"), std::string::npos);
  }
}

}  // namespace
}  // namespace leapcache::load
