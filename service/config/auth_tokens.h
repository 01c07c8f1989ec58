// TokenTable: the bearer tokens of the tokens_file setting, each naming the tenant it acts for.
//
// File format: one "TOKEN TENANT" per line: the token is the first whitespace-separated word,
// the tenant the rest of the line (trimmed; 1..256 bytes, as namespace tenants). Blank lines and
// lines starting with '#' are ignored. A token is 16..4096 printable ASCII characters (no
// spaces): short tokens are guessable, and gRPC metadata values are ASCII. A token may appear
// once; a tenant may have several tokens (rotation: add the new one, move clients, drop the old).
//
// Lookup compares the SHA-256 of the presented token with every stored digest in constant time
// (CRYPTO_memcmp, no early exit across entries), so neither timing nor length reveals how much
// of a token matched. The file is read once; the table is immutable and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace leapcache::server {

class TokenTable {
 public:
  // INVALID_ARGUMENT naming tokens_file, the path and the line for an unreadable file, a
  // malformed line, a bad token or tenant, a duplicate token, or a file without tokens.
  static absl::StatusOr<TokenTable> Load(const std::string& path);
  // The same from the file's text; `origin` names it in errors.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text, const std::string& origin);

  // The tenant `token` acts for; nullopt for an unknown token.
  std::optional<std::string> TenantFor(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::array<uint8_t, 32> digest;  // SHA-256 of the token
    std::string tenant;
  };
  std::vector<Entry> entries_;
};

}  // namespace leapcache::server
