#include "client/c_api/c_api_support.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace leapcache::c_api {
namespace {

// The message of this thread's last failed call: a thread-local, so that concurrent callers
// (Python threads, with the GIL released in each call) never see each other's errors.
thread_local std::string last_error;
// Item i's message of this thread's last batch call; items that succeeded hold "".
thread_local std::vector<std::string> batch_errors;

}  // namespace

const char* LastError() { return last_error.c_str(); }

void ClearBatchErrors() { batch_errors.clear(); }

void SetBatchError(size_t i, absl::string_view message) {
  if (batch_errors.size() <= i) batch_errors.resize(i + 1);
  batch_errors[i] = std::string(message);
}

const char* BatchError(size_t i) { return i < batch_errors.size() ? batch_errors[i].c_str() : ""; }

int Fail(const absl::Status& status) {
  if (status.ok()) return 0;
  last_error = std::string(status.message());
  return static_cast<int>(status.code());
}

absl::Status CheckNotNull(const void* p, const char* what) {
  if (p == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  return absl::OkStatus();
}

void CopyString(const std::string& s, char* out, size_t n) {
  if (n == 0) return;
  const size_t k = std::min(s.size(), n - 1);
  std::memcpy(out, s.data(), k);
  out[k] = '\0';
}

absl::StatusOr<client::ClientOptions> ToOptions(const leapcache_client_options& o) {
  client::ClientOptions c;
  if (o.target != nullptr) c.target = o.target;
  c.tls = o.tls != 0;
  c.tls_root_ca_file = Str(o.tls_root_ca_file);
  c.tls_client_cert_file = Str(o.tls_client_cert_file);
  c.tls_client_key_file = Str(o.tls_client_key_file);
  c.tls_server_name = Str(o.tls_server_name);
  c.token = Str(o.token);
  c.allow_token_without_tls = o.allow_token_without_tls != 0;
  if (o.connect_timeout_ms > 0) c.connect_timeout = absl::Milliseconds(o.connect_timeout_ms);
  if (o.rpc_timeout_ms > 0) c.rpc_timeout = absl::Milliseconds(o.rpc_timeout_ms);
  if (o.transfer_timeout_ms > 0) c.transfer_timeout = absl::Milliseconds(o.transfer_timeout_ms);
  if (o.chunk_bytes > 0) c.chunk_bytes = o.chunk_bytes;
  if (o.max_message_bytes > 0) c.max_message_bytes = o.max_message_bytes;
  return c;
}

client::BlockHash ToHash(const uint8_t* hash) {
  client::BlockHash h;
  std::memcpy(h.data(), hash, h.size());
  return h;
}

client::HeadRange ToHeads(const leapcache_head_range* heads) {
  if (heads == nullptr) return {};
  return {heads->begin, heads->end};
}

client::LayerRange ToLayers(const leapcache_layer_range* layers) {
  if (layers == nullptr) return {};
  return {layers->begin, layers->end};
}

absl::StatusOr<std::optional<client::DenseEncoding>> ToEncoding(const leapcache_encoding* e) {
  if (e == nullptr || e->dtype == LEAPCACHE_DTYPE_COMPACT) return std::nullopt;
  if (e->dtype != LEAPCACHE_DTYPE_FP32 && e->dtype != LEAPCACHE_DTYPE_BF16) {
    return absl::InvalidArgumentError(absl::StrCat("encoding.dtype ", e->dtype, " is unknown"));
  }
  if (e->layout != LEAPCACHE_LAYOUT_KV && e->layout != LEAPCACHE_LAYOUT_VK) {
    return absl::InvalidArgumentError(absl::StrCat("encoding.layout ", e->layout, " is unknown"));
  }
  return client::DenseEncoding{static_cast<client::DType>(e->dtype),
                               static_cast<client::Layout>(e->layout)};
}

absl::StatusOr<client::PutTarget> ToPutTarget(const leapcache_put_target* t) {
  if (absl::Status st = CheckStruct(t, "target"); !st.ok()) return st;
  if (t->ttl_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat("target.ttl_ms is negative (", t->ttl_ms, ")"));
  }
  client::PutTarget p;
  p.namespace_id = t->namespace_id;
  p.hash = ToHash(t->hash);
  p.position = {t->position.tokens, t->position.blocks};
  p.heads = {t->heads.begin, t->heads.end};
  p.ttl = absl::Milliseconds(t->ttl_ms);
  return p;
}

leapcache_storage_format FromFormat(const client::StorageFormat& f) {
  return {static_cast<int32_t>(f.codec), f.bits, f.p, f.r, f.smoothing ? 1 : 0};
}

int LookupBatch(
    const leapcache_lookup_request* requests, size_t n, leapcache_lookup_result* results,
    int32_t* codes,
    const std::function<absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>>(
        std::span<const client::LookupRequest>)>& call) {
  ClearBatchErrors();
  if (n > 0) {
    for (const auto& [p, what] : {std::pair<const void*, const char*>{requests, "requests"},
                                  {results, "results"},
                                  {codes, "codes"}}) {
      if (absl::Status st = CheckNotNull(p, what); !st.ok()) return Fail(st);
    }
  }
  std::vector<client::LookupRequest> batch(n);
  for (size_t i = 0; i < n; ++i) {
    const leapcache_lookup_request& r = requests[i];
    const std::string what = absl::StrCat("requests[", i, "]");
    if (absl::Status st = CheckStruct(&r, what.c_str()); !st.ok()) return Fail(st);
    const std::string out = absl::StrCat("results[", i, "]");
    if (absl::Status st = CheckStruct(&results[i], out.c_str()); !st.ok()) return Fail(st);
    if (r.chain == nullptr && r.chain_len > 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(what, ".chain is NULL")));
    }
    batch[i].namespace_id = r.namespace_id;
    // BlockHash is a byte array, so n * 32 contiguous bytes are n hashes.
    batch[i].chain = std::span<const client::BlockHash>(
        reinterpret_cast<const client::BlockHash*>(r.chain), r.chain_len);
    batch[i].heads = ToHeads(r.heads);
    batch[i].max_depth = r.max_depth;
    batch[i].block_tokens = r.block_tokens;
  }
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> answers = call(batch);
  if (!answers.ok()) return Fail(answers.status());
  for (size_t i = 0; i < n; ++i) {
    leapcache_lookup_result res{};
    res.struct_size = sizeof(res);
    res.index = -1;
    const absl::StatusOr<client::LookupResult>& a = (*answers)[i];
    codes[i] = static_cast<int32_t>(a.status().code());
    if (a.ok()) {
      res.hit = a->hit ? 1 : 0;
      res.index = a->hit ? a->index : -1;
      res.position = {a->position.tokens, a->position.blocks};
    } else {
      SetBatchError(i, a.status().message());
    }
    results[i] = res;
  }
  return 0;
}

}  // namespace leapcache::c_api
