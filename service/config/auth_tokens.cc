#include "service/config/auth_tokens.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "service/config/config_files.h"

namespace leapcache::server {
namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxTenantBytes = 256;  // as RegisterNamespace's tenant

std::array<uint8_t, 32> Digest(absl::string_view token) {
  std::array<uint8_t, 32> d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

bool IsTokenChar(char c) { return c > ' ' && c < 0x7f; }

}  // namespace

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadConfigFile("tokens_file", path);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text, const std::string& origin) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    auto error = [&](absl::string_view problem) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens_file (", origin, ") line ", line_number, ": ", problem));
    };
    size_t end = 0;
    while (end < line.size() && !absl::ascii_isspace(static_cast<unsigned char>(line[end]))) ++end;
    const absl::string_view token = line.substr(0, end);
    const absl::string_view tenant = absl::StripAsciiWhitespace(line.substr(end));
    // Messages never quote the token: the file is a secret.
    if (tenant.empty()) return error("expected \"TOKEN TENANT\", found no tenant");
    if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
      return error(absl::StrCat("token must be ", kMinTokenBytes, "..", kMaxTokenBytes,
                                " characters (got ", token.size(), ")"));
    }
    for (char c : token) {
      if (!IsTokenChar(c)) return error("token must be printable ASCII without spaces");
    }
    if (tenant.size() > kMaxTenantBytes) {
      return error(absl::StrCat("tenant must be at most ", kMaxTenantBytes, " bytes (got ",
                                tenant.size(), ")"));
    }
    const std::array<uint8_t, 32> digest = Digest(token);
    for (const Entry& e : table.entries_) {
      if (e.digest == digest) return error("duplicate token (already listed on an earlier line)");
    }
    table.entries_.push_back({digest, std::string(tenant)});
  }
  if (table.entries_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens_file (", origin, "): no tokens (expected \"TOKEN TENANT\" lines)"));
  }
  return table;
}

std::optional<std::string> TokenTable::TenantFor(absl::string_view token) const {
  const std::array<uint8_t, 32> digest = Digest(token);
  // Every entry is compared, match or not, so the time does not depend on which one matched.
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    const bool equal = CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0;
    if (equal) found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return found->tenant;
}

}  // namespace leapcache::server
