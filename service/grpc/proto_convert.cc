#include "service/grpc/proto_convert.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace leapcache::server {
namespace {

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

}  // namespace

absl::StatusOr<core::BlockHash> HashFromProto(const std::string& bytes, absl::string_view field) {
  if (bytes.size() != core::kBlockHashBytes) {
    return Invalid(
        absl::StrCat(field, " must be ", core::kBlockHashBytes, " bytes (got ", bytes.size(), ")"));
  }
  core::BlockHash h;
  std::memcpy(h.data(), bytes.data(), h.size());
  return h;
}

absl::StatusOr<std::vector<core::BlockHash>> ChainFromProto(const std::string& bytes) {
  if (bytes.size() % core::kBlockHashBytes != 0) {
    return Invalid(absl::StrCat("chain must be whole ", core::kBlockHashBytes, "-byte hashes (got ",
                                bytes.size(), " bytes)"));
  }
  std::vector<core::BlockHash> chain(bytes.size() / core::kBlockHashBytes);
  if (!bytes.empty()) std::memcpy(chain.data(), bytes.data(), bytes.size());
  static_assert(sizeof(core::BlockHash) == core::kBlockHashBytes);
  return chain;
}

absl::StatusOr<core::NamespaceSpec> NamespaceSpecFromProto(
    const v1::RegisterNamespaceRequest& request) {
  core::NamespaceSpec s;
  s.tenant = request.tenant();
  const v1::ModelShape& m = request.model();
  const v1::StorageFormat& f = request.format();
  // Values above the core's limits stay above them (clamped into int), so the core's messages
  // report them as out of range.
  auto to_int = [](uint32_t v) {
    return static_cast<int>(std::min<uint32_t>(v, std::numeric_limits<int>::max()));
  };
  s.model.linear_layers = to_int(m.linear_layers());
  s.model.total_heads = to_int(m.total_heads());
  s.model.dk = to_int(m.dk());
  s.model.dv = to_int(m.dv());
  if (m.has_conv()) {
    s.model.conv.channels = to_int(m.conv().channels());
    s.model.conv.width = to_int(m.conv().width());
    switch (m.conv().dtype()) {
      case v1::CONV_DTYPE_FP32:
        s.model.conv.dtype = DType::kFp32;
        break;
      case v1::CONV_DTYPE_BF16:
        s.model.conv.dtype = DType::kBf16;
        break;
      case v1::CONV_DTYPE_FP16:
        s.model.conv.dtype = DType::kFp16;
        break;
      default:
        return Invalid(absl::StrCat(
            "model.conv.dtype must be CONV_DTYPE_FP32, CONV_DTYPE_BF16 or CONV_DTYPE_FP16 (got ",
            static_cast<int>(m.conv().dtype()), ")"));
    }
  }
  s.model.extra_bytes = to_int(m.extra_bytes());
  switch (m.kind()) {
    case v1::STATE_KIND_GDN:
      s.model.kind = StateKind::kGdn;
      break;
    case v1::STATE_KIND_KDA:
      s.model.kind = StateKind::kKda;
      break;
    default:
      return Invalid(absl::StrCat("model.kind must be STATE_KIND_GDN or STATE_KIND_KDA (got ",
                                  static_cast<int>(m.kind()), ")"));
  }
  if (f.codec() < v1::CODEC_FP32 || f.codec() > v1::CODEC_LEAP) {
    return Invalid(absl::StrCat("format.codec must be one of CODEC_FP32..CODEC_LEAP (1..6; got ",
                                static_cast<int>(f.codec()), ")"));
  }
  static_assert(static_cast<int>(Codec::kFp32) == v1::CODEC_FP32 &&
                static_cast<int>(Codec::kLeap) == v1::CODEC_LEAP);
  s.format.codec = static_cast<Codec>(f.codec());
  s.format.kind = s.model.kind;
  s.format.dk = s.model.dk;
  s.format.dv = s.model.dv;
  s.format.bits = to_int(f.bits());
  s.format.p = to_int(f.p());
  s.format.r = to_int(f.r());
  s.format.smoothing = f.smoothing();
  s.flops_per_token = request.flops_per_token();
  return s;
}

absl::StatusOr<core::HeadRange> HeadsFromProto(bool present, const v1::HeadRange& heads,
                                               int total_heads) {
  if (!present) return core::HeadRange{0, total_heads};
  if (heads.begin() > static_cast<uint32_t>(std::numeric_limits<int>::max()) ||
      heads.end() > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    return Invalid(absl::StrCat("heads [", heads.begin(), ", ", heads.end(), ") is outside [0, ",
                                total_heads, ")"));
  }
  return core::HeadRange{static_cast<int>(heads.begin()), static_cast<int>(heads.end())};
}

absl::StatusOr<std::optional<LayerRange>> LayersFromProto(bool present,
                                                          const v1::LayerRange& layers) {
  if (!present) return std::nullopt;
  constexpr uint32_t kMax = std::numeric_limits<int>::max();
  if (layers.begin() > kMax || layers.end() > kMax || layers.begin() >= layers.end()) {
    return Invalid(
        absl::StrCat("layers [", layers.begin(), ", ", layers.end(), ") is not a range of layers"));
  }
  return LayerRange{static_cast<int>(layers.begin()), static_cast<int>(layers.end())};
}

absl::StatusOr<core::Position> PositionFromProto(const v1::Position& p) {
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  if (p.tokens() > kMax || p.blocks() > kMax) {
    return Invalid(absl::StrCat("position (", p.tokens(), " tokens, ", p.blocks(),
                                " blocks) is out of range"));
  }
  return core::Position{static_cast<int64_t>(p.tokens()), static_cast<int64_t>(p.blocks())};
}

absl::StatusOr<compute::DenseFormat> DenseFromProto(const v1::DenseEncoding& dense) {
  compute::DenseFormat f;
  switch (dense.dtype()) {
    case v1::DTYPE_FP32:
      f.dtype = DType::kFp32;
      break;
    case v1::DTYPE_BF16:
      f.dtype = DType::kBf16;
      break;
    default:
      return Invalid(absl::StrCat("dense.dtype must be DTYPE_FP32 or DTYPE_BF16 (got ",
                                  static_cast<int>(dense.dtype()), ")"));
  }
  switch (dense.layout()) {
    case v1::LAYOUT_KV:
      f.layout = Orientation::kKV;
      break;
    case v1::LAYOUT_VK:
      f.layout = Orientation::kVK;
      break;
    default:
      return Invalid(absl::StrCat("dense.layout must be LAYOUT_KV or LAYOUT_VK (got ",
                                  static_cast<int>(dense.layout()), ")"));
  }
  return f;
}

void PositionToProto(const core::Position& position, v1::Position* out) {
  out->set_tokens(static_cast<uint64_t>(position.tokens));
  out->set_blocks(static_cast<uint64_t>(position.blocks));
}

void HeadsToProto(const core::HeadRange& heads, v1::HeadRange* out) {
  out->set_begin(static_cast<uint32_t>(heads.begin));
  out->set_end(static_cast<uint32_t>(heads.end));
}

v1::StateKind KindToProto(StateKind kind) {
  return kind == StateKind::kKda ? v1::STATE_KIND_KDA : v1::STATE_KIND_GDN;
}

void FormatToProto(const BlobSpec& format, v1::StorageFormat* out) {
  out->set_codec(static_cast<v1::Codec>(static_cast<int>(format.codec)));
  out->set_bits(static_cast<uint32_t>(format.bits));
  out->set_p(static_cast<uint32_t>(format.p));
  out->set_r(static_cast<uint32_t>(format.r));
  out->set_smoothing(format.smoothing);
}

void DenseToProto(const compute::DenseFormat& dense, v1::DenseEncoding* out) {
  out->set_dtype(dense.dtype == DType::kFp32 ? v1::DTYPE_FP32 : v1::DTYPE_BF16);
  out->set_layout(dense.layout == Orientation::kKV ? v1::LAYOUT_KV : v1::LAYOUT_VK);
}

void StatsToProto(const core::StoreStats& s, v1::StatsResponse* out) {
  for (const core::TierStats& t : s.tiers) {
    v1::TierStats* p = out->add_tiers();
    p->set_name(t.name);
    p->set_page_bytes(t.page_bytes);
    p->set_capacity_bytes(t.capacity_bytes);
    p->set_used_bytes(t.used_bytes);
    p->set_reserved_bytes(t.reserved_bytes);
    p->set_checkpoints(t.checkpoints);
  }
  for (const core::FormatMemoryStats& m : s.memory) {
    v1::FormatMemoryStats* p = out->add_memory();
    p->set_tier(m.tier);
    p->set_format(m.format);
    p->set_blobs(m.blobs);
    p->set_physical_bytes(m.physical_bytes);
    p->set_stored_bytes(m.stored_bytes);
    p->set_fp32_equivalent_bytes(m.fp32_equivalent_bytes);
  }
  out->set_namespaces(s.namespaces);
  out->set_checkpoints(s.checkpoints);
  out->set_pending_puts(s.pending_puts);
  out->set_leases(s.leases);
  out->set_pinned(s.pinned);
  out->set_lookups(s.lookups);
  out->set_lookup_hits(s.lookup_hits);
  out->set_lookup_misses(s.lookup_misses);
  out->set_lookup_hit_tokens(s.lookup_hit_tokens);
  out->set_lookup_miss_tokens(s.lookup_miss_tokens);
  out->set_puts_reserved(s.puts_reserved);
  out->set_puts_refused(s.puts_refused);
  out->set_puts_committed(s.puts_committed);
  out->set_puts_rejected(s.puts_rejected);
  out->set_puts_aborted(s.puts_aborted);
  out->set_puts_expired(s.puts_expired);
  out->set_gets(s.gets);
  out->set_get_hits(s.get_hits);
  out->set_get_misses(s.get_misses);
  out->set_deletes(s.deletes);
  out->set_evictions(s.evictions);
  out->set_spills(s.spills);
  out->set_promotions(s.promotions);
  out->set_bytes_in(s.bytes_in);
  out->set_bytes_out(s.bytes_out);
}

absl::StatusOr<core::HeadRange> ResolveHeads(const core::CheckpointStore& store,
                                             core::NamespaceId ns, bool present,
                                             const v1::HeadRange& heads) {
  if (present) return HeadsFromProto(true, heads, 0);
  absl::StatusOr<core::NamespaceInfo> info = store.GetNamespace(ns);
  if (!info.ok()) return info.status();
  return HeadsFromProto(false, heads, info->spec.model.total_heads);
}

void GetHeaderToProto(const ReadShape& s, v1::GetHeader* h) {
  PositionToProto(s.position, h->mutable_position());
  HeadsToProto(s.heads, h->mutable_heads());
  h->set_layers(static_cast<uint32_t>(s.layers));
  h->set_first_layer(static_cast<uint32_t>(s.first_layer));
  h->set_dk(static_cast<uint32_t>(s.format.dk));
  h->set_dv(static_cast<uint32_t>(s.format.dv));
  h->set_kind(KindToProto(s.format.kind));
  FormatToProto(s.format, h->mutable_format());
  h->set_total_bytes(s.total_bytes);
  h->set_blob_bytes(s.blob_bytes);
  h->set_state_bytes(s.state_bytes);
  h->set_side_bytes(s.side_bytes);
  if (s.dense.has_value()) {
    DenseToProto(*s.dense, h->mutable_dense());
  } else {
    h->mutable_compact();
  }
}

}  // namespace leapcache::server
