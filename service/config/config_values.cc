#include "service/config/config_values.h"

#include <unistd.h>

#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace leapcache::server {
namespace {

absl::Status Expected(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("expected ", what));
}

struct Unit {
  const char* suffix;
  uint64_t factor;
};
// Longest suffixes first, so "GiB" is not read as "B".
constexpr Unit kUnits[] = {
    {"KiB", 1ull << 10},
    {"MiB", 1ull << 20},
    {"GiB", 1ull << 30},
    {"TiB", 1ull << 40},
    {"Ki", 1ull << 10},
    {"Mi", 1ull << 20},
    {"Gi", 1ull << 30},
    {"Ti", 1ull << 40},
    {"KB", 1000ull},
    {"MB", 1000000ull},
    {"GB", 1000000000ull},
    {"TB", 1000000000000ull},
    {"B", 1},
};

}  // namespace

absl::StatusOr<uint64_t> ParseBytes(absl::string_view text, bool allow_percent,
                                    uint64_t physical_bytes) {
  const char* what = allow_percent ? "a byte size such as 1073741824, 512MiB, 8GiB or 25%"
                                   : "a byte size such as 1048576, 512KiB or 1MiB";
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (allow_percent && !t.empty() && t.back() == '%') {
    double percent = 0;
    if (!absl::SimpleAtod(t.substr(0, t.size() - 1), &percent) || !(percent > 0) || percent > 100) {
      return Expected("a percentage of physical memory in (0, 100], e.g. 25%");
    }
    return static_cast<uint64_t>(std::floor(static_cast<double>(physical_bytes) * percent / 100));
  }
  uint64_t factor = 1;
  for (const Unit& u : kUnits) {
    const absl::string_view suffix(u.suffix);
    if (t.size() > suffix.size() && t.substr(t.size() - suffix.size()) == suffix) {
      factor = u.factor;
      t = absl::StripTrailingAsciiWhitespace(t.substr(0, t.size() - suffix.size()));
      break;
    }
  }
  uint64_t n = 0;
  if (t.empty() || t.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(t, &n)) {
    return Expected(what);
  }
  if (n > std::numeric_limits<uint64_t>::max() / factor) {
    return absl::InvalidArgumentError("byte size overflows 64 bits");
  }
  return n * factor;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr Unit kBinary[] = {
      {"TiB", 1ull << 40}, {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}};
  if (bytes == 0) return "0B";
  for (const Unit& u : kBinary) {
    if (bytes % u.factor == 0) return absl::StrCat(bytes / u.factor, u.suffix);
  }
  return absl::StrCat(bytes, "B");
}

absl::StatusOr<absl::Duration> ParseDurationValue(absl::string_view text) {
  absl::Duration d;
  const std::string t(absl::StripAsciiWhitespace(text));
  if (!absl::ParseDuration(t, &d) || d < absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return Expected("a duration such as 30s, 500ms or 10m");
  }
  return d;
}

absl::StatusOr<int64_t> ParseInteger(absl::string_view text, int64_t min, int64_t max) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) || v < min || v > max) {
    return Expected(absl::StrCat("an integer in [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<double> ParseNumber(absl::string_view text) {
  double v = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &v) || !std::isfinite(v)) {
    return Expected("a finite number");
  }
  return v;
}

std::string FormatNumber(double value) {
  for (int precision = 6; precision < 17; ++precision) {
    const std::string text = absl::StrFormat("%.*g", precision, value);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == value) return text;
  }
  return absl::StrFormat("%.17g", value);  // always reads back exactly
}

absl::StatusOr<bool> ParseBool(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  return Expected("true or false");
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace leapcache::server
