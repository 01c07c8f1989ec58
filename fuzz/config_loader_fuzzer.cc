// Fuzz target: the server's configuration loader (service/config/config_loader.h) on arbitrary
// YAML files.
//
// Invariants: no crash and no exception escapes (yaml-cpp throws; the loader must catch); every
// error has a message saying where it came from (the config file, or the setting that failed
// validation); a configuration it accepts passes ValidateConfig, and its description
// (DescribeConfig, which --check-config prints and documents as a loadable file) loads back to
// the same settings.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/scratch_file.h"
#include "service/config/config.h"
#include "service/config/config_loader.h"

namespace {

using leapcache::server::LoadConfig;
using leapcache::server::LoadedConfig;

// DescribeConfig without the "# source" comments: the settings' values only.
std::string Values(const LoadedConfig& loaded) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(DescribeConfig(loaded), '\n')) {
    absl::StrAppend(&out, line.substr(0, line.rfind("  # ")), "\n");
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = leapcache::fuzz::ScratchPath("config.yaml");
  static const std::string described = leapcache::fuzz::ScratchPath("described.yaml");
  FUZZ_CHECK(leapcache::fuzz::WriteScratch(path, data, size), "cannot write %s", path.c_str());

  absl::StatusOr<LoadedConfig> loaded = LoadConfig({"--config", path}, {});
  if (!loaded.ok()) {
    const std::string message(loaded.status().message());
    FUZZ_CHECK(absl::StrContains(message, "config file " + path) ||
                   absl::StartsWith(message, "invalid configuration: "),
               "error does not say where it came from: %s", message.c_str());
    return 0;
  }
  FUZZ_CHECK(leapcache::server::ValidateConfig(loaded->config).ok(), "accepted an invalid config");

  const std::string description = DescribeConfig(*loaded);
  FUZZ_CHECK(leapcache::fuzz::WriteScratch(
                 described, reinterpret_cast<const uint8_t*>(description.data()),
                 description.size()),
             "cannot write %s", described.c_str());
  absl::StatusOr<LoadedConfig> again = LoadConfig({"--config", described}, {});
  FUZZ_CHECK(again.ok(), "the description of an accepted config does not load: %s\n%s",
             std::string(again.status().message()).c_str(), description.c_str());
  FUZZ_CHECK(Values(*again) == Values(*loaded), "the description loads to other settings:\n%s\n%s",
             Values(*loaded).c_str(), Values(*again).c_str());
  // The description must be exact, not just stable: a printed value that rounds (as doubles
  // once did) would load back as another value.
  FUZZ_CHECK(again->config.eviction_half_life == loaded->config.eviction_half_life,
             "eviction_half_life %.17g described as a different value %.17g",
             loaded->config.eviction_half_life, again->config.eviction_half_life);
  FUZZ_CHECK(again->config.memory_budget == loaded->config.memory_budget &&
                 again->config.spill_budget == loaded->config.spill_budget &&
                 again->config.put_ttl == loaded->config.put_ttl &&
                 again->config.handshake_timeout == loaded->config.handshake_timeout,
             "a size or duration changed on the description round trip");
  return 0;
}
