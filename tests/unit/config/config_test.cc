// Server configuration: value syntax, the three sources and their precedence, and the
// cross-field checks, in-process (tests/integration/service/config_test.cc runs the binary).
#include "service/config/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/match.h"
#include "service/config/config_loader.h"
#include "service/config/config_values.h"

namespace leapcache::server {
namespace {

TEST(ConfigValuesTest, Bytes) {
  EXPECT_EQ(*ParseBytes("1048576"), 1048576u);
  EXPECT_EQ(*ParseBytes("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseBytes("8Gi"), 8ull << 30);
  EXPECT_EQ(*ParseBytes("10GB"), 10000000000ull);
  EXPECT_EQ(*ParseBytes(" 4 KiB "), 4096u);
  EXPECT_EQ(*ParseBytes("25%", true, 1000), 250u);
  EXPECT_FALSE(ParseBytes("25%").ok());  // percentages only where allowed
  EXPECT_FALSE(ParseBytes("150%", true, 1000).ok());
  EXPECT_FALSE(ParseBytes("-1").ok());
  EXPECT_FALSE(ParseBytes("1.5GiB").ok());
  EXPECT_FALSE(ParseBytes("12 parsecs").ok());
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("99999999999TiB").ok());  // overflow
  EXPECT_EQ(FormatBytes(1ull << 30), "1GiB");
  EXPECT_EQ(FormatBytes(1536 << 10), "1536KiB");
  EXPECT_EQ(FormatBytes(1000), "1000B");
  EXPECT_EQ(FormatBytes(0), "0B");
}

// Regression (found by fuzz/config_loader_fuzzer): numbers were printed with 6 significant
// digits, so --check-config showed 1234.57 for an effective 1234.5678 and its output, loaded
// back, changed the setting.
TEST(ConfigValuesTest, NumbersPrintExactly) {
  for (double v : {4096.0, 1234.5678, 0.1, 1e-300, 123456789.125, 1.0 / 3.0}) {
    absl::StatusOr<double> back = ParseNumber(FormatNumber(v));
    ASSERT_TRUE(back.ok()) << FormatNumber(v);
    EXPECT_EQ(*back, v) << FormatNumber(v);
  }
  EXPECT_EQ(FormatNumber(4096), "4096");
  EXPECT_EQ(FormatNumber(1234.5678), "1234.5678");
  absl::StatusOr<LoadedConfig> loaded = LoadConfig({"--eviction-half-life=1234.5678"}, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(absl::StrContains(DescribeConfig(*loaded), "eviction_half_life: 1234.5678  #"));
}

TEST(ConfigValuesTest, DurationsNumbersBools) {
  EXPECT_EQ(*ParseDurationValue("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDurationValue("1h30m"), absl::Minutes(90));
  EXPECT_FALSE(ParseDurationValue("-1s").ok());
  EXPECT_FALSE(ParseDurationValue("inf").ok());
  EXPECT_FALSE(ParseDurationValue("30").ok());
  EXPECT_EQ(*ParseInteger("12", 1, 100), 12);
  EXPECT_FALSE(ParseInteger("0", 1, 100).ok());
  EXPECT_FALSE(ParseInteger("1e3", 1, 10000).ok());
  EXPECT_FALSE(ParseNumber("nan").ok());
  EXPECT_TRUE(*ParseBool("Yes"));
  EXPECT_FALSE(*ParseBool("off"));
  EXPECT_FALSE(ParseBool("maybe").ok());
}

class ConfigLoaderTest : public ::testing::Test {
 protected:
  std::string Yaml(const std::string& text) {
    // Unique per process and file: ctest runs these tests in parallel processes.
    const std::string path = ::testing::TempDir() + "/config_loader_test_" +
                             std::to_string(getpid()) + "_" + std::to_string(counter_++) + ".yaml";
    std::ofstream(path) << text;
    return path;
  }
  int counter_ = 0;
};

TEST_F(ConfigLoaderTest, DefaultsPassValidation) {
  absl::StatusOr<LoadedConfig> c = LoadConfig({}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->sources.empty());
  EXPECT_EQ(c->config.memory_budget, ServerConfig().memory_budget);
  EXPECT_TRUE(ValidateConfig(ServerConfig()).ok());
}

TEST_F(ConfigLoaderTest, Precedence) {
  const std::string file = Yaml("memory_budget: 2GiB\nput_ttl: 5s\nspill_budget: 1GiB\n");
  const Environment env = {
      {"LEAPCACHE_CONFIG", file}, {"LEAPCACHE_MEMORY_BUDGET", "3GiB"}, {"LEAPCACHE_PUT_TTL", "6s"}};
  absl::StatusOr<LoadedConfig> c = LoadConfig({"--put-ttl", "7s"}, env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config_file, file);
  EXPECT_EQ(c->config.spill_budget, 1ull << 30);   // file
  EXPECT_EQ(c->config.memory_budget, 3ull << 30);  // environment over file
  EXPECT_EQ(c->config.put_ttl, absl::Seconds(7));  // flag over environment
  EXPECT_EQ(c->sources.at("put_ttl"), "flag --put-ttl");
  EXPECT_EQ(c->sources.at("memory_budget"), "environment variable LEAPCACHE_MEMORY_BUDGET");
  EXPECT_EQ(c->sources.at("spill_budget"), "config file " + file + " line 3");
  // --config beats LEAPCACHE_CONFIG; underscores work in flags too.
  const std::string other = Yaml("spill_budget: 2GiB\n");
  c = LoadConfig({"--config=" + other, "--memory_budget=1GiB"}, env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.spill_budget, 2ull << 30);
  EXPECT_EQ(c->config.memory_budget, 1ull << 30);
}

TEST_F(ConfigLoaderTest, EverySettingRoundTripsThroughDescribe) {
  absl::StatusOr<LoadedConfig> c =
      LoadConfig({"--listen=[::]:0", "--eviction-policy=lru", "--eviction-half-life=100.5",
                  "--promote-on-hit=false", "--max-put-ttl=1h", "--port-file=/tmp/a \"b\""},
                 {});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string described = DescribeConfig(*c);
  absl::StatusOr<LoadedConfig> again = LoadConfig({"--config", Yaml(described)}, {});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << described;
  EXPECT_EQ(again->config.listen, "[::]:0");
  EXPECT_EQ(again->config.port_file, "/tmp/a \"b\"");
  EXPECT_EQ(again->config.eviction_policy, core::EvictionPolicyKind::kLru);
  EXPECT_EQ(again->config.eviction_half_life, 100.5);
  EXPECT_FALSE(again->config.promote_on_hit);
  EXPECT_EQ(again->config.max_put_ttl, absl::Hours(1));
  // Same settings, every source now the file.
  std::string a = described, b = DescribeConfig(*again);
  EXPECT_EQ(a.substr(0, a.find("  #")), b.substr(0, b.find("  #")));
}

TEST_F(ConfigLoaderTest, StringsWithControlCharactersRoundTripThroughDescribe) {
  // A line break inside a quoted YAML scalar folds into a space on load: the description must
  // escape it (the config loader fuzzer found this with a multi-line listen address).
  const std::string odd = "a\nb\tc\x01d\\e\"f";
  absl::StatusOr<LoadedConfig> c = LoadConfig({"--port-file=" + odd}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string described = DescribeConfig(*c);
  absl::StatusOr<LoadedConfig> again = LoadConfig({"--config", Yaml(described)}, {});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << described;
  EXPECT_EQ(again->config.port_file, odd);
}

TEST_F(ConfigLoaderTest, ErrorsNameTheSettingValueAndSource) {
  absl::StatusOr<LoadedConfig> c = LoadConfig({}, {{"LEAPCACHE_MAX_THREADS", "lots"}});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "\"lots\" for max_threads"));
  EXPECT_TRUE(absl::StrContains(c.status().message(), "LEAPCACHE_MAX_THREADS"));

  c = LoadConfig({"--config", Yaml("put_ttl: 5s\nmax_thread: 3\n")}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "line 2: unknown setting \"max_thread\""))
      << c.status();

  c = LoadConfig({"--bogus=1"}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "unknown flag --bogus"));

  // The settings folded into compute_backend say so, in a file and as a flag.
  c = LoadConfig({"--config", Yaml("decode_backend: cuda\n")}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(),
                                "unknown setting \"decode_backend\" (replaced by compute_backend)"))
      << c.status();
  c = LoadConfig({"--encode-backend=cpu"}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "(replaced by compute_backend)"))
      << c.status();

  c = LoadConfig({"--put-ttl=1h"}, {});  // beyond max_put_ttl
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "max_put_ttl"));

  c = LoadConfig({"--config", "/nonexistent/leapcache.yaml"}, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  c = LoadConfig({"positional"}, {});
  EXPECT_FALSE(c.ok());
}

TEST_F(ConfigLoaderTest, UnknownEnvironmentVariablesOnlyWarn) {
  absl::StatusOr<LoadedConfig> c = LoadConfig({}, {{"LEAPCACHE_MEMORY_BUGDET", "1GiB"}});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_TRUE(absl::StrContains(c->warnings[0], "LEAPCACHE_MEMORY_BUGDET"));
}

TEST_F(ConfigLoaderTest, ControlFlags) {
  absl::StatusOr<LoadedConfig> c = LoadConfig({"--check-config"}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->check_only);
  c = LoadConfig({"--help"}, {{"LEAPCACHE_PUT_TTL", "bad"}});  // help needs no valid config
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->help);
  EXPECT_TRUE(absl::StrContains(ConfigUsage("leapcache-server"), "--memory-budget"));
}

TEST(ValidateConfigTest, CrossFieldRules) {
  ServerConfig c;
  c.chunk_bytes = c.max_message_bytes;
  EXPECT_FALSE(ValidateConfig(c).ok());
  c = ServerConfig();
  c.memory_budget = c.page_bytes - 1;
  EXPECT_FALSE(ValidateConfig(c).ok());
  c = ServerConfig();
  c.page_bytes = 5000;
  EXPECT_FALSE(ValidateConfig(c).ok());
  c = ServerConfig();
  c.max_message_bytes = 64 << 10;
  EXPECT_FALSE(ValidateConfig(c).ok());
  c = ServerConfig();
  c.metrics_listen = "";
  EXPECT_TRUE(ValidateConfig(c).ok());  // metrics disabled
  c.listen = "[::1:7470";
  EXPECT_FALSE(ValidateConfig(c).ok());
  for (const char* backend : {"cpu", "cuda", "auto"}) {
    c = ServerConfig();
    c.compute_backend = backend;
    EXPECT_TRUE(ValidateConfig(c).ok()) << backend;
  }
  c.compute_backend = "gpu";
  const absl::Status st = ValidateConfig(c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("compute_backend"), std::string::npos) << st;
}

TEST(ValidateConfigTest, HostTierMappingIsAutoOnOrOffAndOnNeedsCuda) {
  ServerConfig c;
  EXPECT_EQ(c.host_tier_mapping, "auto");
  for (const char* value : {"auto", "off"}) {
    c.host_tier_mapping = value;
    EXPECT_TRUE(ValidateConfig(c).ok()) << value;
  }
  c.host_tier_mapping = "on";
#ifdef LEAPCACHE_WITH_CUDA
  EXPECT_TRUE(ValidateConfig(c).ok());
#else
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
#endif
  c.host_tier_mapping = "pinned";
  const absl::Status st = ValidateConfig(c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("host_tier_mapping"), std::string::npos) << st;
}

}  // namespace
}  // namespace leapcache::server
