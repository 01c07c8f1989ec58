#include "service/core/namespace_registry.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/lock.h"
#include "base/format_status.h"
#include "base/status_macros.h"

namespace leapcache::core {
namespace {

absl::Status Validate(const NamespaceSpec& s, size_t max_slot_bytes, size_t slot_bytes) {
  if (s.tenant.empty() || s.tenant.size() > kMaxTenantBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant must be 1..", kMaxTenantBytes, " bytes (got ", s.tenant.size(), ")"));
  }
  // Tenants appear in tokens files (one "TOKEN TENANT" line each), logs and metric labels.
  for (size_t i = 0; i < s.tenant.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s.tenant[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tenant must be printable ASCII without spaces (byte ", i, " is 0x", absl::Hex(c), ")"));
    }
  }
  const ModelFingerprint& m = s.model;
  if (m.linear_layers < 1 || m.linear_layers > kMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear_layers must be in [1, ", kMaxLayers, "] (got ", m.linear_layers, ")"));
  }
  if (m.total_heads < 1 || m.total_heads > kMaxTotalHeads) {
    return absl::InvalidArgumentError(
        absl::StrCat("total_heads must be in [1, ", kMaxTotalHeads, "] (got ", m.total_heads, ")"));
  }
  if (absl::Status st = base::FromFormatStatus(ValidateSpec(s.format)); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("format: ", st.message()));
  }
  if (s.format.dk != m.dk || s.format.dv != m.dv) {
    return absl::InvalidArgumentError(
        absl::StrCat("format is dk=", s.format.dk, " dv=", s.format.dv,
                     " but the model's state is dk=", m.dk, " dv=", m.dv));
  }
  if (s.format.kind != m.kind) {
    return absl::InvalidArgumentError(absl::StrCat("format kind ", StateKindName(s.format.kind),
                                                   " differs from the model's kind ",
                                                   StateKindName(m.kind)));
  }
  if (m.conv.present()) {
    const ConvShape& c = m.conv;
    if (c.channels < 1 || c.channels > kMaxConvChannels || c.channels % m.total_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "conv.channels must be in [1, ", kMaxConvChannels, "] and a multiple of total_heads ",
          m.total_heads, " (got ", c.channels, ")"));
    }
    if (c.width < 1 || c.width > kMaxConvWidth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "conv.width (conv_kernel - 1) must be in [1, ", kMaxConvWidth, "] (got ", c.width, ")"));
    }
    if (DTypeBytes(c.dtype) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "conv.dtype must be fp32, bf16 or fp16 (got ", static_cast<int>(c.dtype), ")"));
    }
  }
  if (m.extra_bytes < 0 || m.extra_bytes > kMaxExtraBytes) {
    return absl::InvalidArgumentError(absl::StrCat("extra_bytes must be in [0, ", kMaxExtraBytes,
                                                   "] (got ", m.extra_bytes, ")"));
  }
  if (!std::isfinite(s.flops_per_token) || s.flops_per_token < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("flops_per_token must be finite and >= 0 (got ", s.flops_per_token, ")"));
  }
  if (slot_bytes > max_slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("a ", s.format.ToString(),
                                                   " blob with its side state takes ", slot_bytes,
                                                   " bytes, more than a page (", max_slot_bytes,
                                                   " bytes)"));
  }
  return absl::OkStatus();
}

// Length-prefixed tenant, then every identity field: distinct specs give distinct keys. The side
// state's fields follow only where present, so that the keys (and so the tags and ids) of
// namespaces without one are those they had before side states existed. Enums enter as their
// numbers (the wire's, see types.proto), never their names: renaming an enum must not change a
// key, and renumbering one is a format change.
std::string IdentityKey(const NamespaceSpec& s) {
  const BlobSpec& f = s.format;
  std::string key = absl::StrCat(
      s.tenant.size(), ":", s.tenant, "|", s.model.linear_layers, ",", s.model.total_heads, ",",
      s.model.dk, ",", s.model.dv, ",", static_cast<int>(s.model.kind), "|",
      static_cast<int>(f.codec), ",", static_cast<int>(f.kind), ",", f.dk, ",", f.dv, ",", f.bits,
      ",", f.p, ",", f.r, ",", f.smoothing ? 1 : 0);
  if (s.model.conv.present()) {
    absl::StrAppend(&key, "|conv=", s.model.conv.channels, ",", s.model.conv.width, ",",
                    static_cast<int>(s.model.conv.dtype));
  }
  if (s.model.extra_bytes != 0) absl::StrAppend(&key, "|extra=", s.model.extra_bytes);
  return key;
}

size_t ConvBytesPerHead(const ModelFingerprint& m) {
  if (!m.conv.present()) return 0;
  return static_cast<size_t>(m.conv.channels / m.total_heads) * m.conv.width *
         DTypeBytes(m.conv.dtype);
}

}  // namespace

absl::Status UnknownNamespaceError(NamespaceId id) {
  return absl::NotFoundError(absl::StrCat("unknown namespace ", id));
}

uint64_t NamespaceTag(const NamespaceSpec& spec) {
  const std::string text = absl::StrCat("leapcache.v1 namespace ", IdentityKey(spec));
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  uint64_t tag = 0;
  for (int i = 7; i >= 0; --i) tag = (tag << 8) | digest[i];
  return tag == 0 ? 1 : tag;
}

std::string FormatLabel(const BlobSpec& spec) {
  return IsIntegerCodec(spec.codec) ? absl::StrCat(CodecName(spec.codec), spec.bits)
                                    : std::string(CodecName(spec.codec));
}

bool SameBlobSpec(const BlobSpec& a, const BlobSpec& b) {
  return a.kind == b.kind && a.dk == b.dk && a.dv == b.dv && a.codec == b.codec &&
         a.bits == b.bits && a.p == b.p && a.r == b.r && a.smoothing == b.smoothing;
}

absl::StatusOr<NamespaceId> NamespaceRegistry::Register(const NamespaceSpec& spec) {
  // The layout is only defined for a valid format, and the side state for a valid shape, so
  // validate those parts before computing them.
  size_t blob_bytes = 0;
  size_t conv_bytes = 0;
  size_t slot_bytes = 0;
  if (ValidateSpec(spec.format).ok()) {
    blob_bytes = ComputeLayout(spec.format).blob_bytes();
    if (Validate(spec, SIZE_MAX, 0).ok()) conv_bytes = ConvBytesPerHead(spec.model);
    const size_t unit_bytes =
        blob_bytes + conv_bytes + static_cast<size_t>(std::max(0, spec.model.extra_bytes));
    slot_bytes = (unit_bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  }
  LC_RETURN_IF_ERROR(Validate(spec, max_slot_bytes_, slot_bytes));
  std::string key = IdentityKey(spec);

  base::WriterLock lock(&mu_);
  if (auto it = ids_.find(key); it != ids_.end()) return it->second;
  if (infos_.size() >= kMaxNamespaces) {
    return absl::ResourceExhaustedError(
        absl::StrCat("at most ", kMaxNamespaces, " namespaces can be registered"));
  }
  TenantCount& tenant = tenants_[spec.tenant];
  if (per_tenant_ > 0 && tenant.namespaces >= per_tenant_) {
    ++tenant.refused;
    return absl::ResourceExhaustedError(absl::StrCat("tenant ", spec.tenant, " holds ",
                                                     tenant.namespaces,
                                                     " namespaces, its quota (tenant_max_namespaces)"));
  }
  ++tenant.namespaces;
  auto info = std::make_unique<NamespaceInfo>();
  info->tag = NamespaceTag(spec);
  // The tag's low 32 bits, or the next free id after them: another namespace may hold them in
  // 1 of 2^32 / size() registrations.
  NamespaceId id = static_cast<NamespaceId>(info->tag);
  while (id == 0 || infos_.contains(id)) ++id;
  info->id = id;
  info->spec = spec;
  info->format_label = FormatLabel(spec.format);
  info->blob_bytes = blob_bytes;
  info->conv_bytes = conv_bytes;
  info->side_bytes = conv_bytes + static_cast<size_t>(spec.model.extra_bytes);
  info->unit_bytes = blob_bytes + info->side_bytes;
  info->slot_bytes = slot_bytes;
  info->fp32_bytes_per_blob = 4ull * spec.model.dk * spec.model.dv + info->side_bytes;
  info->flops_per_token =
      spec.flops_per_token > 0
          ? spec.flops_per_token
          : 8.0 * spec.model.dk * spec.model.dv * spec.model.total_heads * spec.model.linear_layers;
  infos_.emplace(id, std::move(info));
  ids_.emplace(std::move(key), id);
  return id;
}

absl::StatusOr<const NamespaceInfo*> NamespaceRegistry::Find(NamespaceId id) const {
  base::ReaderLock lock(&mu_);
  auto it = infos_.find(id);
  if (it == infos_.end()) return UnknownNamespaceError(id);
  return it->second.get();
}

absl::StatusOr<const NamespaceInfo*> NamespaceRegistry::FindTagged(NamespaceId id,
                                                                   uint64_t tag) const {
  LC_ASSIGN_OR_RETURN(const NamespaceInfo* info, Find(id));
  if (tag != 0 && tag != info->tag) {
    return absl::FailedPreconditionError(absl::StrCat(
        "namespace ", id, " is not the namespace of namespace_tag ", absl::Hex(tag, absl::kZeroPad16),
        " (the id was issued for another namespace, e.g. before the server restarted): register "
        "the namespace again"));
  }
  return info;
}

size_t NamespaceRegistry::size() const {
  base::ReaderLock lock(&mu_);
  return infos_.size();
}

void NamespaceRegistry::FillTenants(std::map<std::string, TenantStats>* tenants) const {
  base::ReaderLock lock(&mu_);
  for (const auto& [name, count] : tenants_) {
    TenantStats& t = (*tenants)[name];
    t.namespaces += count.namespaces;
    t.refused_namespaces += count.refused;
  }
}

}  // namespace leapcache::core
