#include "client/wire_convert.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace leapcache::client {

std::string HashBytes(const BlockHash& hash) {
  return std::string(reinterpret_cast<const char*>(hash.data()), hash.size());
}

void ToProto(const NamespaceSpec& spec, v1::RegisterNamespaceRequest* out) {
  out->set_tenant(spec.tenant);
  v1::ModelShape* m = out->mutable_model();
  // Negative values become huge ones, which the server rejects as out of range.
  m->set_linear_layers(static_cast<uint32_t>(spec.model.linear_layers));
  m->set_total_heads(static_cast<uint32_t>(spec.model.total_heads));
  m->set_dk(static_cast<uint32_t>(spec.model.dk));
  m->set_dv(static_cast<uint32_t>(spec.model.dv));
  m->set_kind(static_cast<v1::StateKind>(static_cast<int>(spec.model.kind)));
  if (spec.model.conv.has_value()) {
    v1::ConvShape* c = m->mutable_conv();
    c->set_channels(static_cast<uint32_t>(spec.model.conv->channels));
    c->set_width(static_cast<uint32_t>(spec.model.conv->width));
    c->set_dtype(static_cast<v1::ConvDType>(static_cast<int>(spec.model.conv->dtype)));
  }
  m->set_extra_bytes(static_cast<uint32_t>(spec.model.extra_bytes));
  v1::StorageFormat* f = out->mutable_format();
  f->set_codec(static_cast<v1::Codec>(static_cast<int>(spec.format.codec)));
  f->set_bits(static_cast<uint32_t>(spec.format.bits));
  f->set_p(static_cast<uint32_t>(spec.format.p));
  f->set_r(static_cast<uint32_t>(spec.format.r));
  f->set_smoothing(spec.format.smoothing);
  out->set_flops_per_token(spec.flops_per_token);
}

void ToProto(const HeadRange& heads, bool* present, v1::HeadRange* out) {
  *present = !heads.all();
  if (*present) {
    out->set_begin(static_cast<uint32_t>(heads.begin));
    out->set_end(static_cast<uint32_t>(heads.end));
  }
}

void ToProto(const LayerRange& layers, bool* present, v1::LayerRange* out) {
  *present = !layers.all();
  if (*present) {
    out->set_begin(static_cast<uint32_t>(layers.begin));
    out->set_end(static_cast<uint32_t>(layers.end));
  }
}

absl::Status CheckLayers(const LayerRange& layers) {
  if (layers.begin < 0 || layers.end < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers [", layers.begin, ", ", layers.end, ") has a negative bound"));
  }
  return absl::OkStatus();
}

void ToProto(const Position& position, v1::Position* out) {
  out->set_tokens(static_cast<uint64_t>(position.tokens));
  out->set_blocks(static_cast<uint64_t>(position.blocks));
}

void ToProto(const DenseEncoding& dense, v1::DenseEncoding* out) {
  out->set_dtype(static_cast<v1::DType>(static_cast<int>(dense.dtype)));
  out->set_layout(static_cast<v1::Layout>(static_cast<int>(dense.layout)));
}

Position FromProto(const v1::Position& position) {
  return Position{static_cast<int64_t>(position.tokens()), static_cast<int64_t>(position.blocks())};
}

HeadRange FromProto(const v1::HeadRange& heads) {
  return HeadRange{static_cast<int>(heads.begin()), static_cast<int>(heads.end())};
}

StorageFormat FromProto(const v1::StorageFormat& f) {
  StorageFormat out;
  out.codec = static_cast<Codec>(static_cast<int>(f.codec()));
  out.bits = static_cast<int>(f.bits());
  out.p = static_cast<int>(f.p());
  out.r = static_cast<int>(f.r());
  out.smoothing = f.smoothing();
  return out;
}

absl::StatusOr<DenseEncoding> FromProto(const v1::DenseEncoding& dense) {
  if (dense.dtype() != v1::DTYPE_FP32 && dense.dtype() != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", dense.dtype()));
  }
  if (dense.layout() != v1::LAYOUT_KV && dense.layout() != v1::LAYOUT_VK) {
    return absl::InvalidArgumentError(absl::StrCat("unknown layout ", dense.layout()));
  }
  return DenseEncoding{static_cast<DType>(static_cast<int>(dense.dtype())),
                       static_cast<Layout>(static_cast<int>(dense.layout()))};
}

ServerStats FromProto(const v1::StatsResponse& s) {
  ServerStats out;
  for (const v1::TierStats& t : s.tiers()) {
    out.tiers.push_back({t.name(), t.page_bytes(), t.capacity_bytes(), t.used_bytes(),
                         t.reserved_bytes(), t.checkpoints()});
  }
  for (const v1::FormatMemoryStats& m : s.memory()) {
    out.memory.push_back({m.tier(), m.format(), m.blobs(), m.physical_bytes(), m.stored_bytes(),
                          m.fp32_equivalent_bytes()});
  }
  out.namespaces = s.namespaces();
  out.checkpoints = s.checkpoints();
  out.pending_puts = s.pending_puts();
  out.leases = s.leases();
  out.pinned = s.pinned();
  out.lookups = s.lookups();
  out.lookup_hits = s.lookup_hits();
  out.lookup_misses = s.lookup_misses();
  out.lookup_hit_tokens = s.lookup_hit_tokens();
  out.lookup_miss_tokens = s.lookup_miss_tokens();
  out.puts_reserved = s.puts_reserved();
  out.puts_refused = s.puts_refused();
  out.puts_committed = s.puts_committed();
  out.puts_rejected = s.puts_rejected();
  out.puts_aborted = s.puts_aborted();
  out.puts_expired = s.puts_expired();
  out.gets = s.gets();
  out.get_hits = s.get_hits();
  out.get_misses = s.get_misses();
  out.deletes = s.deletes();
  out.evictions = s.evictions();
  out.spills = s.spills();
  out.promotions = s.promotions();
  out.bytes_in = s.bytes_in();
  out.bytes_out = s.bytes_out();
  const v1::TenantUsage& t = s.tenant();
  out.tenant = {t.tenant(),      t.namespaces(),         t.bytes(),
                t.pinned_bytes(), t.pending_puts(),      t.quota_bytes(),
                t.quota_pinned_bytes(), t.quota_pending_puts(), t.quota_namespaces()};
  return out;
}

void ToProto(const LookupRequest& request, v1::LookupRequest* out) {
  std::string* chain = out->mutable_chain();
  chain->resize(request.chain.size() * sizeof(BlockHash));
  if (!request.chain.empty()) std::memcpy(chain->data(), request.chain.data(), chain->size());
  bool has_heads = false;
  ToProto(request.heads, &has_heads, out->mutable_heads());
  if (!has_heads) out->clear_heads();
  out->set_max_depth(static_cast<uint32_t>(std::max(0, request.max_depth)));
  out->set_block_tokens(
      static_cast<uint32_t>(std::clamp<int64_t>(request.block_tokens, 0, UINT32_MAX)));
}

LookupResult FromProto(const v1::LookupResponse& response) {
  LookupResult result;
  result.hit = response.hit();
  if (result.hit) {
    result.index = static_cast<int>(response.index());
    result.position = FromProto(response.position());
  }
  return result;
}

absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> FromProto(
    const v1::LookupBatchResponse& response, int lookups) {
  if (response.results_size() != lookups) {
    return absl::InternalError(absl::StrCat("LookupBatch answered ", response.results_size(),
                                            " of ", lookups, " lookups"));
  }
  std::vector<absl::StatusOr<LookupResult>> out;
  out.reserve(response.results_size());
  for (const v1::LookupBatchResult& r : response.results()) {
    if (r.code() != 0) {
      out.push_back(absl::Status(static_cast<absl::StatusCode>(r.code()), r.message()));
    } else {
      out.push_back(FromProto(r.lookup()));
    }
  }
  return out;
}

}  // namespace leapcache::client
