// Reading the files that settings name (TLS certificates and keys, the tokens file): whole,
// small files, read once at start. The size cap keeps a mistaken path (/dev/zero, a log file)
// from hanging or exhausting start-up; errors name the setting and the path.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace leapcache::server {

// Certificate chains, CA bundles and token lists are far below this.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

// The contents of `path`. INVALID_ARGUMENT "SETTING (PATH): ..." if it cannot be opened or read,
// is empty, or is larger than kMaxConfigFileBytes.
absl::StatusOr<std::string> ReadConfigFile(const std::string& setting, const std::string& path);

}  // namespace leapcache::server
