// The C API's client calls: connection, health, namespaces, lookup, gets and puts through
// caller buffers, delete/pin/unpin and stats, each one call of the C++ Client.
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/c_api/c_api_support.h"

namespace lc = leapcache::client;
using leapcache::c_api::CheckNotNull;
using leapcache::c_api::CheckStruct;
using leapcache::c_api::CopyString;
using leapcache::c_api::Fail;
using leapcache::c_api::Guard;

namespace {

// INVALID_ARGUMENT unless the client handle and the hash are there.
absl::Status CheckCall(const leapcache_client* client, const uint8_t* hash) {
  if (absl::Status st = CheckNotNull(client, "client"); !st.ok()) return st;
  return CheckNotNull(hash, "hash");
}

}  // namespace

extern "C" {

int leapcache_client_create(const leapcache_client_options* options, leapcache_client** out) {
  return Guard([&] {
    if (absl::Status st = CheckStruct(options, "options"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckNotNull(out, "out"); !st.ok()) return Fail(st);
    absl::StatusOr<lc::ClientOptions> o = leapcache::c_api::ToOptions(*options);
    if (!o.ok()) return Fail(o.status());
    absl::StatusOr<std::unique_ptr<lc::Client>> c = lc::Client::Create(*o);
    if (!c.ok()) return Fail(c.status());
    auto handle = std::make_unique<leapcache_client>();
    handle->owned = *std::move(c);
    handle->client = handle->owned.get();
    *out = handle.release();
    return 0;
  });
}

void leapcache_client_destroy(leapcache_client* client) {
  // A borrowed client (leapcache_engine_client) belongs to its engine.
  if (client != nullptr && client->owned != nullptr) delete client;
}

int leapcache_check_health(leapcache_client* client, const char* service, int32_t* serving) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(client, "client"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckNotNull(serving, "serving"); !st.ok()) return Fail(st);
    absl::StatusOr<bool> ok = client->client->CheckHealth(leapcache::c_api::Str(service));
    if (!ok.ok()) return Fail(ok.status());
    *serving = *ok ? 1 : 0;
    return 0;
  });
}

int leapcache_register_namespace(leapcache_client* client, const leapcache_namespace_spec* spec,
                                 leapcache_namespace_info* out) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(client, "client"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(spec, "spec"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(out, "out"); !st.ok()) return Fail(st);
    lc::NamespaceSpec s;
    s.tenant = leapcache::c_api::Str(spec->tenant);
    s.model.linear_layers = spec->linear_layers;
    s.model.total_heads = spec->total_heads;
    s.model.dk = spec->dk;
    s.model.dv = spec->dv;
    s.model.kind = static_cast<lc::StateKind>(spec->kind);
    s.format.codec = static_cast<lc::Codec>(spec->format.codec);
    s.format.bits = spec->format.bits;
    s.format.p = spec->format.p;
    s.format.r = spec->format.r;
    s.format.smoothing = spec->format.smoothing != 0;
    s.flops_per_token = spec->flops_per_token;
    if (spec->conv_channels != 0 || spec->conv_width != 0 || spec->conv_dtype != 0) {
      s.model.conv = lc::ConvShape{spec->conv_channels, spec->conv_width,
                                   static_cast<lc::ConvDType>(spec->conv_dtype)};
    }
    s.model.extra_bytes = spec->extra_bytes;
    absl::StatusOr<lc::NamespaceInfo> info = client->client->RegisterNamespace(s);
    if (!info.ok()) return Fail(info.status());
    leapcache_namespace_info r{};
    r.struct_size = sizeof(r);
    r.id = info->id;
    r.layout_fingerprint = info->layout_fingerprint;
    r.tag = info->tag;
    r.blob_bytes = info->blob_bytes;
    r.side_bytes = info->side_bytes;
    CopyString(info->fingerprint, r.fingerprint, sizeof(r.fingerprint));
    CopyString(info->format_label, r.format_label, sizeof(r.format_label));
    *out = r;
    return 0;
  });
}

int leapcache_lookup(leapcache_client* client, uint32_t namespace_id, const uint8_t* chain,
                     size_t chain_len, const leapcache_head_range* heads, int32_t max_depth,
                     int64_t block_tokens, leapcache_lookup_result* out) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(client, "client"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(out, "out"); !st.ok()) return Fail(st);
    if (chain == nullptr && chain_len > 0) return Fail(absl::InvalidArgumentError("chain is NULL"));
    // BlockHash is a byte array, so n * 32 contiguous bytes are n hashes.
    std::span<const lc::BlockHash> hashes(reinterpret_cast<const lc::BlockHash*>(chain), chain_len);
    lc::LookupRequest q;
    q.namespace_id = namespace_id;
    q.chain = hashes;
    q.heads = leapcache::c_api::ToHeads(heads);
    q.max_depth = max_depth;
    q.block_tokens = block_tokens;
    absl::StatusOr<lc::LookupResult> r = client->client->Lookup(q);
    if (!r.ok()) return Fail(r.status());
    leapcache_lookup_result res{};
    res.struct_size = sizeof(res);
    res.hit = r->hit ? 1 : 0;
    res.index = r->hit ? r->index : -1;
    res.position = {r->position.tokens, r->position.blocks};
    *out = res;
    return 0;
  });
}

int leapcache_lookup_batch(leapcache_client* client, const leapcache_lookup_request* requests,
                           size_t n, leapcache_lookup_result* results, int32_t* codes) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(client, "client"); !st.ok()) return Fail(st);
    return leapcache::c_api::LookupBatch(
        requests, n, results, codes,
        [&](std::span<const lc::LookupRequest> q) { return client->client->LookupBatch(q); });
  });
}

const char* leapcache_batch_error(size_t i) { return leapcache::c_api::BatchError(i); }

int leapcache_get_into(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash,
                       const leapcache_head_range* heads, const leapcache_encoding* encoding,
                       void* dst, uint64_t dst_bytes, leapcache_checkpoint_info* out) {
  return leapcache_get_layers_into(client, namespace_id, hash, heads, nullptr, encoding, dst,
                                   dst_bytes, out);
}

int leapcache_get_layers_into(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash,
                              const leapcache_head_range* heads,
                              const leapcache_layer_range* layers,
                              const leapcache_encoding* encoding, void* dst, uint64_t dst_bytes,
                              leapcache_checkpoint_info* out) {
  return Guard([&] {
    if (absl::Status st = CheckCall(client, hash); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(out, "out"); !st.ok()) return Fail(st);
    if (dst == nullptr && dst_bytes > 0) return Fail(absl::InvalidArgumentError("dst is NULL"));
    auto dense = leapcache::c_api::ToEncoding(encoding);
    if (!dense.ok()) return Fail(dense.status());
    lc::GetRequest q;
    q.namespace_id = namespace_id;
    q.hash = leapcache::c_api::ToHash(hash);
    q.heads = leapcache::c_api::ToHeads(heads);
    q.layers = leapcache::c_api::ToLayers(layers);
    q.dense = *dense;
    // Exactly the caller's size (checked before a byte is written): a shorter checkpoint would
    // leave stale bytes in the buffer that look like states, a longer one does not fit.
    absl::StatusOr<lc::Checkpoint> c =
        client->client->GetInto(q, std::span<uint8_t>(static_cast<uint8_t*>(dst), dst_bytes));
    if (!c.ok()) return Fail(c.status());
    *out = leapcache::c_api::FromCheckpoint(*c, dst_bytes);
    return 0;
  });
}

int leapcache_put_from(leapcache_client* client, const leapcache_put_target* target,
                       const leapcache_encoding* encoding, const void* src, uint64_t bytes) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(client, "client"); !st.ok()) return Fail(st);
    if (src == nullptr && bytes > 0) return Fail(absl::InvalidArgumentError("src is NULL"));
    absl::StatusOr<lc::PutTarget> t = leapcache::c_api::ToPutTarget(target);
    if (!t.ok()) return Fail(t.status());
    auto dense = leapcache::c_api::ToEncoding(encoding);
    if (!dense.ok()) return Fail(dense.status());
    std::span<const uint8_t> data(static_cast<const uint8_t*>(src), bytes);
    return Fail(dense->has_value() ? client->client->PutDense(*t, **dense, data)
                                   : client->client->PutCompact(*t, data));
  });
}

int leapcache_delete(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash) {
  return Guard([&] {
    if (absl::Status st = CheckCall(client, hash); !st.ok()) return Fail(st);
    return Fail(client->client->Delete(namespace_id, leapcache::c_api::ToHash(hash)));
  });
}

int leapcache_pin(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash) {
  return Guard([&] {
    if (absl::Status st = CheckCall(client, hash); !st.ok()) return Fail(st);
    return Fail(client->client->Pin(namespace_id, leapcache::c_api::ToHash(hash)));
  });
}

int leapcache_unpin(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash) {
  return Guard([&] {
    if (absl::Status st = CheckCall(client, hash); !st.ok()) return Fail(st);
    return Fail(client->client->Unpin(namespace_id, leapcache::c_api::ToHash(hash)));
  });
}

int leapcache_stats_get(leapcache_client* client, leapcache_stats* out) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(client, "client"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(out, "out"); !st.ok()) return Fail(st);
    absl::StatusOr<lc::ServerStats> s = client->client->Stats();
    if (!s.ok()) return Fail(s.status());
    // ~2 KiB of arrays: built in place rather than on the stack and copied.
    std::memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    out->n_tiers = static_cast<uint32_t>(s->tiers.size());
    for (size_t i = 0; i < s->tiers.size() && i < LEAPCACHE_MAX_STATS_TIERS; ++i) {
      const lc::TierStats& t = s->tiers[i];
      leapcache_tier_stats& o = out->tiers[i];
      CopyString(t.name, o.name, sizeof(o.name));
      o.page_bytes = t.page_bytes;
      o.capacity_bytes = t.capacity_bytes;
      o.used_bytes = t.used_bytes;
      o.reserved_bytes = t.reserved_bytes;
      o.checkpoints = t.checkpoints;
    }
    out->n_memory = static_cast<uint32_t>(s->memory.size());
    for (size_t i = 0; i < s->memory.size() && i < LEAPCACHE_MAX_STATS_FORMATS; ++i) {
      const lc::FormatMemoryStats& m = s->memory[i];
      leapcache_format_memory_stats& o = out->memory[i];
      CopyString(m.tier, o.tier, sizeof(o.tier));
      CopyString(m.format, o.format, sizeof(o.format));
      o.blobs = m.blobs;
      o.physical_bytes = m.physical_bytes;
      o.stored_bytes = m.stored_bytes;
      o.fp32_equivalent_bytes = m.fp32_equivalent_bytes;
    }
    out->namespaces = s->namespaces;
    out->checkpoints = s->checkpoints;
    out->pending_puts = s->pending_puts;
    out->leases = s->leases;
    out->pinned = s->pinned;
    out->lookups = s->lookups;
    out->lookup_hits = s->lookup_hits;
    out->lookup_misses = s->lookup_misses;
    out->lookup_hit_tokens = s->lookup_hit_tokens;
    out->lookup_miss_tokens = s->lookup_miss_tokens;
    out->puts_reserved = s->puts_reserved;
    out->puts_refused = s->puts_refused;
    out->puts_committed = s->puts_committed;
    out->puts_rejected = s->puts_rejected;
    out->puts_aborted = s->puts_aborted;
    out->puts_expired = s->puts_expired;
    out->gets = s->gets;
    out->get_hits = s->get_hits;
    out->get_misses = s->get_misses;
    out->deletes = s->deletes;
    out->evictions = s->evictions;
    out->spills = s->spills;
    out->promotions = s->promotions;
    out->bytes_in = s->bytes_in;
    out->bytes_out = s->bytes_out;
    CopyString(s->tenant.tenant, out->tenant, sizeof(out->tenant));
    out->tenant_namespaces = s->tenant.namespaces;
    out->tenant_bytes = s->tenant.bytes;
    out->tenant_pinned_bytes = s->tenant.pinned_bytes;
    out->tenant_pending_puts = s->tenant.pending_puts;
    out->quota_bytes = s->tenant.quota_bytes;
    out->quota_pinned_bytes = s->tenant.quota_pinned_bytes;
    out->quota_pending_puts = s->tenant.quota_pending_puts;
    out->quota_namespaces = s->tenant.quota_namespaces;
    return 0;
  });
}

}  // extern "C"
