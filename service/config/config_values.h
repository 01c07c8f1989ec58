// Value syntax of the server's settings, shared by flags, environment variables and the YAML
// file so a value means the same wherever it is written. Each parser returns INVALID_ARGUMENT
// saying what was expected; the caller adds which setting and which source it came from.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace leapcache::server {

// Bytes: a decimal integer with an optional unit, "B", "KB" "MB" "GB" "TB" (powers of 1000),
// "KiB" "MiB" "GiB" "TiB" or Kubernetes' "Ki" "Mi" "Gi" "Ti" (powers of 1024); e.g. 1048576,
// 512MiB, 8Gi, 10GB. With allow_percent, also "P%" (0 < P <= 100): that share of
// `physical_bytes`, rounded down. Overflow past 2^64 - 1 is an error.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text, bool allow_percent = false,
                                    uint64_t physical_bytes = 0);
// The largest binary unit that divides `bytes` exactly: "1GiB", "1536KiB", "1000B".
std::string FormatBytes(uint64_t bytes);

// Durations as absl::ParseDuration reads them ("30s", "500ms", "1h30m"); negative and infinite
// durations are errors.
absl::StatusOr<absl::Duration> ParseDurationValue(absl::string_view text);

// A decimal integer in [min, max].
absl::StatusOr<int64_t> ParseInteger(absl::string_view text, int64_t min, int64_t max);
// A finite decimal number.
absl::StatusOr<double> ParseNumber(absl::string_view text);
// The shortest decimal that ParseNumber reads back as exactly `value` ("4096", "1234.5678"), so
// --check-config prints the value in effect, not a rounding of it.
std::string FormatNumber(double value);
// true/false, yes/no, on/off, 1/0 (any case).
absl::StatusOr<bool> ParseBool(absl::string_view text);

// Physical memory of this host in bytes (sysconf), for percentage budgets.
uint64_t PhysicalMemoryBytes();

}  // namespace leapcache::server
