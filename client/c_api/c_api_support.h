// What the C API's translation units share: the handles behind the opaque C types, the one
// conversion of an absl::Status into the C return code (with this thread's last message), the
// struct_size check, and the conversions between the C structs and the C++ client's types.
// Internal to libleapcache_c.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/c_api/leapcache_c.h"
#include "leapcache/client.h"
#include "leapcache/data_plane.h"

// The handles. A client either owns its C++ Client or borrows the one of an engine.
struct leapcache_client {
  std::unique_ptr<leapcache::client::Client> owned;
  leapcache::client::Client* client = nullptr;
};

struct leapcache_engine {
  std::unique_ptr<leapcache::client::AttachedEngine> engine;
  leapcache_client borrowed;  // engine->client(), handed out by leapcache_engine_client
};

namespace leapcache::c_api {

// This thread's last error message ("" before any).
const char* LastError();

// This thread's last batch call's per-item messages (leapcache_batch_error): cleared at the
// batch's start, one set per failed item.
void ClearBatchErrors();
void SetBatchError(size_t i, absl::string_view message);
const char* BatchError(size_t i);

// leapcache_lookup_batch and leapcache_engine_lookup_batch: the arguments checked, the batch
// answered by `call`, each result or code (and message) written back.
int LookupBatch(
    const leapcache_lookup_request* requests, size_t n, leapcache_lookup_result* results,
    int32_t* codes,
    const std::function<absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>>(
        std::span<const client::LookupRequest>)>& call);

// Records `status` as this thread's last error and returns its code (0 for OK).
int Fail(const absl::Status& status);
inline int Fail(absl::StatusCode code, const std::string& message) {
  return Fail(absl::Status(code, message));
}

// Runs `body` (returning int), turning any C++ exception into an error code: nothing may
// unwind through the C boundary.
template <typename Body>
int Guard(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(absl::StatusCode::kResourceExhausted, "out of memory");
  } catch (const std::exception& e) {
    return Fail(absl::StatusCode::kInternal, e.what());
  } catch (...) {
    return Fail(absl::StatusCode::kInternal, "unknown C++ exception");
  }
}

// INVALID_ARGUMENT naming `what` unless `p` is non-null and, for structs that carry it,
// p->struct_size == sizeof(*p).
absl::Status CheckNotNull(const void* p, const char* what);
template <typename T>
absl::Status CheckStruct(const T* p, const char* what) {
  if (absl::Status st = CheckNotNull(p, what); !st.ok()) return st;
  if (p->struct_size != sizeof(T)) {
    return absl::InvalidArgumentError(std::string(what) + ".struct_size is " +
                                      std::to_string(p->struct_size) + ", this library's is " +
                                      std::to_string(sizeof(T)));
  }
  return absl::OkStatus();
}

// NULL as "".
inline std::string Str(const char* s) { return s == nullptr ? std::string() : std::string(s); }
// Copies `s` into `out[n]`, truncated, NUL-terminated.
void CopyString(const std::string& s, char* out, size_t n);

absl::StatusOr<client::ClientOptions> ToOptions(const leapcache_client_options& o);
client::BlockHash ToHash(const uint8_t* hash);
client::HeadRange ToHeads(const leapcache_head_range* heads);  // NULL: all
client::LayerRange ToLayers(const leapcache_layer_range* layers);  // NULL: all
// nullopt for NULL or DTYPE_COMPACT; INVALID_ARGUMENT for unknown dtype or layout values.
absl::StatusOr<std::optional<client::DenseEncoding>> ToEncoding(const leapcache_encoding* e);
absl::StatusOr<client::PutTarget> ToPutTarget(const leapcache_put_target* t);
leapcache_storage_format FromFormat(const client::StorageFormat& f);

// The description of a checkpoint (client::Checkpoint or client::TransferredCheckpoint).
template <typename C>
leapcache_checkpoint_info FromCheckpoint(const C& c, uint64_t total_bytes) {
  leapcache_checkpoint_info out{};
  out.struct_size = sizeof(out);
  out.position = {c.position.tokens, c.position.blocks};
  out.heads = {c.heads.begin, c.heads.end};
  out.layers = c.layers;
  out.dk = c.dk;
  out.dv = c.dv;
  out.kind = static_cast<int32_t>(c.kind);
  out.format = FromFormat(c.format);
  if (c.dense.has_value()) {
    out.encoding = {static_cast<int32_t>(c.dense->dtype), static_cast<int32_t>(c.dense->layout)};
  } else {
    out.encoding = {LEAPCACHE_DTYPE_COMPACT, 0};
  }
  out.blob_bytes = c.blob_bytes;
  out.state_bytes = c.state_bytes;
  out.side_bytes = c.side_bytes;
  out.total_bytes = total_bytes;
  return out;
}

}  // namespace leapcache::c_api
