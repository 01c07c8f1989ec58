// Fills a ServerConfig from its three sources, in one place: the table of settings in
// config_loader.cc. Precedence, lowest first: the defaults in config.h, the YAML file, LEAPCACHE_*
// environment variables, command-line flags. A setting named `memory_budget` is
//   YAML:         memory_budget: 8GiB          (a flat map of setting: value)
//   environment:  LEAPCACHE_MEMORY_BUDGET=8GiB
//   flag:         --memory-budget=8GiB  or  --memory-budget 8GiB  (underscores also accepted)
// The YAML file is named by --config PATH or LEAPCACHE_CONFIG.
//
// Contract: a value that is present but invalid in any source fails the load, even if a
// higher-precedence source would override it; so do unknown flags and unknown YAML keys (typos
// must not silently fall back to defaults). Unknown LEAPCACHE_* variables only warn, since other
// tools share the prefix. Errors are INVALID_ARGUMENT (NOT_FOUND for a missing YAML file) and
// name the setting, the value and where it came from. The result has passed ValidateConfig.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "service/config/config.h"

namespace leapcache::server {

// Environment variables as name -> value.
using Environment = std::map<std::string, std::string>;

struct LoadedConfig {
  ServerConfig config;
  // Setting name -> where its value came from ("flag --memory-budget", "environment variable
  // LEAPCACHE_MEMORY_BUDGET", "config file x.yaml line 3"); settings left at default are absent.
  std::map<std::string, std::string> sources;
  std::string config_file;  // the YAML file read; empty if none
  bool check_only = false;  // --check-config: validate, print, exit
  bool help = false;        // --help
  std::vector<std::string> warnings;
};

// `args` excludes the program name.
absl::StatusOr<LoadedConfig> LoadConfig(const std::vector<std::string>& args,
                                        const Environment& env);

// The process environment.
Environment CurrentEnvironment();

// The effective configuration as YAML (one "setting: value  # source" line per setting), which
// LoadConfig accepts back as a config file.
std::string DescribeConfig(const LoadedConfig& loaded);

// --help: usage and every setting with its default and meaning.
std::string ConfigUsage(const std::string& program);

}  // namespace leapcache::server
