#include "service/facade/namespace_fingerprint.h"

#include <openssl/sha.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace leapcache::server {

std::string CanonicalModelFormat(const core::NamespaceSpec& s) {
  const BlobSpec& f = s.format;
  std::string text = absl::StrCat(
      "leapcache.v1 model=", s.model.linear_layers, ",", s.model.total_heads, ",", s.model.dk, ",",
      s.model.dv, ",", StateKindName(s.model.kind), " format=", CodecName(f.codec), ",", f.bits,
      ",", f.p, ",", f.r, ",", f.smoothing ? 1 : 0);
  // Only where present: the fingerprints of namespaces without them stay what they were.
  if (s.model.conv.present()) {
    absl::StrAppend(&text, " conv=", s.model.conv.channels, ",", s.model.conv.width, ",",
                    DTypeName(s.model.conv.dtype));
  }
  if (s.model.extra_bytes != 0) absl::StrAppend(&text, " extra=", s.model.extra_bytes);
  return text;
}

std::string NamespaceFingerprint(const core::NamespaceSpec& spec) {
  const std::string text = CanonicalModelFormat(spec);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

}  // namespace leapcache::server
