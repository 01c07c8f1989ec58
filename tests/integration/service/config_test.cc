// leapcache-server's configuration as a user meets it: --check-config, the precedence of flags
// over LEAPCACHE_* environment variables over the YAML file over defaults, values that are
// present but invalid failing start-up with a message naming them, and the port file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/integration/service/process.h"

namespace leapcache::testing {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("config"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteYaml(const std::string& text) {
    const std::string path = dir_ + "/leapcache.yaml";
    std::ofstream(path) << text;
    return path;
  }

  // --check-config with `args` and `env`; stdout in `output`.
  RunResult Check(std::vector<std::string> args, const Env& env = {}) {
    args.insert(args.begin(), {ServerBinary(), "--check-config"});
    absl::StatusOr<RunResult> r = RunProgram(args, env);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }

  // The line of `setting` in a --check-config output.
  static std::string Line(const std::string& output, const std::string& setting) {
    for (absl::string_view line : absl::StrSplit(output, '\n')) {
      if (absl::StartsWith(line, setting + ": ")) return std::string(line);
    }
    return "";
  }

  std::string dir_;
};

TEST_F(ConfigTest, DefaultsAreValid) {
  const RunResult r = Check({});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Line(r.output, "memory_budget"), "memory_budget: 1GiB  # default");
  EXPECT_EQ(Line(r.output, "put_ttl"), "put_ttl: 30s  # default");
  EXPECT_EQ(Line(r.output, "eviction_policy"), "eviction_policy: state-aware  # default");
  EXPECT_EQ(Line(r.output, "max_message_bytes"), "max_message_bytes: 8MiB  # default");
}

TEST_F(ConfigTest, FlagsOverrideEnvironmentOverrideFileOverrideDefaults) {
  const std::string yaml =
      WriteYaml("memory_budget: 256MiB\nput_ttl: 20s\neviction_policy: lru\nchunk_bytes: 512KiB\n");
  const Env env = {{"LEAPCACHE_MEMORY_BUDGET", "512MiB"}, {"LEAPCACHE_PUT_TTL", "15s"}};
  const RunResult r = Check({"--config", yaml, "--memory-budget=128MiB"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Line(r.output, "memory_budget"), "memory_budget: 128MiB  # flag --memory-budget");
  EXPECT_EQ(Line(r.output, "put_ttl"), "put_ttl: 15s  # environment variable LEAPCACHE_PUT_TTL");
  EXPECT_EQ(Line(r.output, "eviction_policy"),
            absl::StrCat("eviction_policy: lru  # config file ", yaml, " line 3"));
  EXPECT_EQ(Line(r.output, "chunk_bytes"),
            absl::StrCat("chunk_bytes: 512KiB  # config file ", yaml, " line 4"));
  EXPECT_EQ(Line(r.output, "max_put_ttl"), "max_put_ttl: 10m  # default");

  // Without the flag the environment wins; without both, the file; LEAPCACHE_CONFIG names it.
  EXPECT_EQ(Line(Check({"--config", yaml}, env).output, "memory_budget"),
            "memory_budget: 512MiB  # environment variable LEAPCACHE_MEMORY_BUDGET");
  EXPECT_EQ(Line(Check({}, {{"LEAPCACHE_CONFIG", yaml}}).output, "memory_budget"),
            absl::StrCat("memory_budget: 256MiB  # config file ", yaml, " line 1"));
}

TEST_F(ConfigTest, CheckConfigOutputIsAValidConfigFile) {
  const RunResult first = Check({"--memory-budget=3GiB", "--listen=[::1]:0", "--page-bytes=64KiB"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string yaml = WriteYaml(first.output);
  const RunResult second = Check({"--config", yaml});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  for (const char* s : {"memory_budget", "listen", "page_bytes", "put_ttl", "metrics_listen"}) {
    EXPECT_EQ(Line(first.output, s).substr(0, Line(first.output, s).find("  #")),
              Line(second.output, s).substr(0, Line(second.output, s).find("  #")));
  }
}

TEST_F(ConfigTest, InvalidValuesFailNamingTheSettingAndSource) {
  struct Case {
    std::vector<std::string> args;
    Env env;
    std::string yaml;
    std::string what;  // the setting at fault, for the failure trace
  };
  const std::vector<Case> cases = {
      {{"--memory-budget=lots"}, {}, "", "memory_budget"},
      {{"--put-ttl=-1s"}, {}, "", "put_ttl"},
      {{"--eviction-policy=random"}, {}, "", "eviction_policy"},
      {{"--max-threads=1"}, {}, "", "max_threads"},
      {{"--listen=7470"}, {}, "", "listen"},
      {{"--page-bytes=1000"}, {}, "", "page_bytes"},
      {{"--memory-budget=200%"}, {}, "", "memory_budget"},
      {{"--no-such-flag=1"}, {}, "", "no-such-flag"},
      {{"--memory-budget"}, {}, "", "memory-budget"},
      {{}, {{"LEAPCACHE_PUT_TTL", "soon"}}, "", "LEAPCACHE_PUT_TTL"},
      // Invalid even where a flag would override it: a present value must be valid.
      {{"--put-ttl=5s"}, {{"LEAPCACHE_PUT_TTL", "soon"}}, "", "LEAPCACHE_PUT_TTL"},
      {{}, {}, "memory_budget: [1, 2]\n", "memory_budget"},
      {{}, {}, "memory_budgett: 1GiB\n", "memory_budgett"},
      {{}, {}, "{not yaml", "config file"},
      // Relations between settings.
      {{"--put-ttl=20m"}, {}, "", "max_put_ttl"},
      {{"--chunk-bytes=8MiB"}, {}, "", "chunk_bytes"},
      {{"--memory-budget=512KiB"}, {}, "", "memory_budget"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    if (!c.yaml.empty()) {
      args.push_back("--config");
      args.push_back(WriteYaml(c.yaml));
    }
    SCOPED_TRACE(c.what);
    // --check-config and a real start both fail with status 1; the start never listens.
    EXPECT_EQ(Check(args, c.env).exit_code, 1);
    std::vector<std::string> start = {ServerBinary(), "--listen=127.0.0.1:0",
                                      "--metrics-listen=127.0.0.1:0"};
    start.insert(start.end(), args.begin(), args.end());
    absl::StatusOr<RunResult> r = RunProgram(start, c.env, absl::Seconds(30));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 1);
    EXPECT_FALSE(absl::StrContains(r->output, "listening on"));
  }
  // A missing config file.
  EXPECT_EQ(Check({"--config", dir_ + "/absent.yaml"}).exit_code, 1);
}

TEST_F(ConfigTest, ErrorMessagesNameTheSettingAndWhereItCameFrom) {
  // stderr goes to the test log; capture it through a shell redirect.
  const std::string err = dir_ + "/stderr.txt";
  absl::StatusOr<RunResult> r =
      RunProgram({"/bin/sh", "-c", absl::StrCat("\"", ServerBinary(), "\" --check-config 2>", err)},
                 {{"LEAPCACHE_MEMORY_BUDGET", "lots"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(text, "invalid value \"lots\" for memory_budget"));
  EXPECT_TRUE(absl::StrContains(text, "environment variable LEAPCACHE_MEMORY_BUDGET"));
  EXPECT_TRUE(absl::StrContains(text, "expected a byte size")) << text;
}

TEST_F(ConfigTest, PortFileHoldsTheBoundPort) {
  const std::string port_file = dir_ + "/port";
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({"--memory-budget=8MiB", "--port-file=" + port_file});
  ASSERT_TRUE(server.ok()) << server.status();
  std::ifstream in(port_file);
  int port = 0;
  in >> port;
  EXPECT_EQ(port, (*server)->grpc_port());
  absl::StatusOr<int> code = (*server)->Stop();
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

TEST_F(ConfigTest, SettingsFromTheEnvironmentReachTheServer) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start({}, {{"LEAPCACHE_MEMORY_BUDGET", "8MiB"},
                                {"LEAPCACHE_PAGE_BYTES", "64KiB"},
                                {"LEAPCACHE_SPILL_BUDGET", "4MiB"}});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<RunResult> stats =
      RunProgram({LEAPCACHE_CLI_BIN, "--server", (*server)->target(), "stats"});
  ASSERT_TRUE(stats.ok());
  EXPECT_TRUE(absl::StrContains(stats->output, "tier host: 0 / 8388608 bytes used"))
      << stats->output;
  EXPECT_TRUE(absl::StrContains(stats->output, "tier spill: 0 / 4194304 bytes used"))
      << stats->output;
  EXPECT_EQ(*(*server)->Stop(), 0);
}

}  // namespace
}  // namespace leapcache::testing
