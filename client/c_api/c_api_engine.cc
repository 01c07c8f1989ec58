// The C API's data plane: an attached engine (data_plane.h's AttachedEngine), its buffer
// registrations and its transfers into and out of them.
#include "absl/strings/str_cat.h"
#include "client/c_api/c_api_support.h"

namespace lc = leapcache::client;
using leapcache::c_api::CheckNotNull;
using leapcache::c_api::CheckStruct;
using leapcache::c_api::Fail;
using leapcache::c_api::Guard;

extern "C" {

int leapcache_engine_attach(const leapcache_client_options* options,
                            const leapcache_attach_options* attach, leapcache_engine** out) {
  return Guard([&] {
    if (absl::Status st = CheckStruct(options, "options"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(attach, "attach"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckNotNull(out, "out"); !st.ok()) return Fail(st);
    if (attach->transports == nullptr && attach->n_transports > 0) {
      return Fail(absl::InvalidArgumentError("attach.transports is NULL"));
    }
    absl::StatusOr<lc::ClientOptions> o = leapcache::c_api::ToOptions(*options);
    if (!o.ok()) return Fail(o.status());
    lc::EngineIdentity id;
    id.name = leapcache::c_api::Str(attach->name);
    id.host = leapcache::c_api::Str(attach->host);
    id.pid = attach->pid;
    id.gpu_uuid = leapcache::c_api::Str(attach->gpu_uuid);
    id.gpu_index = attach->gpu_index;
    lc::AttachOptions a;
    if (attach->n_transports > 0) {
      a.transports.clear();
      for (size_t i = 0; i < attach->n_transports; ++i) {
        // Unknown values reach Attach, which names them (INVALID_ARGUMENT).
        a.transports.push_back(static_cast<lc::Transport>(attach->transports[i]));
      }
    }
    a.ucx_transports = leapcache::c_api::Str(attach->ucx_transports);
    if (attach->session_ttl_ms > 0) a.session_ttl = absl::Milliseconds(attach->session_ttl_ms);
    absl::StatusOr<std::unique_ptr<lc::AttachedEngine>> e = lc::AttachedEngine::Attach(*o, id, a);
    if (!e.ok()) return Fail(e.status());
    auto handle = std::make_unique<leapcache_engine>();
    handle->engine = *std::move(e);
    handle->borrowed.client = &handle->engine->client();
    *out = handle.release();
    return 0;
  });
}

void leapcache_engine_destroy(leapcache_engine* engine) {
  // The destructor detaches; nothing it does may throw through here.
  try {
    delete engine;
  } catch (...) {
  }
}

int32_t leapcache_engine_transport(const leapcache_engine* engine) {
  return engine == nullptr ? 0 : static_cast<int32_t>(engine->engine->transport());
}

uint64_t leapcache_engine_session_id(const leapcache_engine* engine) {
  return engine == nullptr ? 0 : engine->engine->session_id();
}

leapcache_client* leapcache_engine_client(leapcache_engine* engine) {
  return engine == nullptr ? nullptr : &engine->borrowed;
}

int leapcache_engine_register_buffer(leapcache_engine* engine, void* ptr, uint64_t bytes,
                                     int32_t memory, uint64_t* buffer_id) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(engine, "engine"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckNotNull(buffer_id, "buffer_id"); !st.ok()) return Fail(st);
    absl::StatusOr<lc::BufferId> id =
        engine->engine->RegisterBuffer(ptr, bytes, static_cast<lc::MemoryKind>(memory));
    if (!id.ok()) return Fail(id.status());
    *buffer_id = *id;
    return 0;
  });
}

int leapcache_engine_release_buffer(leapcache_engine* engine, uint64_t buffer_id) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(engine, "engine"); !st.ok()) return Fail(st);
    return Fail(engine->engine->ReleaseBuffer(buffer_id));
  });
}

int leapcache_engine_lookup_batch(leapcache_engine* engine,
                                  const leapcache_lookup_request* requests, size_t n,
                                  leapcache_lookup_result* results, int32_t* codes) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(engine, "engine"); !st.ok()) return Fail(st);
    return leapcache::c_api::LookupBatch(
        requests, n, results, codes,
        [&](std::span<const lc::LookupRequest> q) { return engine->engine->LookupBatch(q); });
  });
}

int leapcache_engine_get_into(leapcache_engine* engine, uint32_t namespace_id,
                              const uint8_t* hash, const leapcache_head_range* heads,
                              const leapcache_encoding* encoding, uint64_t buffer_id,
                              uint64_t offset, leapcache_checkpoint_info* out) {
  return leapcache_engine_get_layers_into(engine, namespace_id, hash, heads, nullptr, encoding,
                                          buffer_id, offset, out);
}

int leapcache_engine_get_layers_into(leapcache_engine* engine, uint32_t namespace_id,
                                     const uint8_t* hash, const leapcache_head_range* heads,
                                     const leapcache_layer_range* layers,
                                     const leapcache_encoding* encoding, uint64_t buffer_id,
                                     uint64_t offset, leapcache_checkpoint_info* out) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(engine, "engine"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckNotNull(hash, "hash"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(out, "out"); !st.ok()) return Fail(st);
    auto dense = leapcache::c_api::ToEncoding(encoding);
    if (!dense.ok()) return Fail(dense.status());
    lc::GetRequest q;
    q.namespace_id = namespace_id;
    q.hash = leapcache::c_api::ToHash(hash);
    q.heads = leapcache::c_api::ToHeads(heads);
    q.layers = leapcache::c_api::ToLayers(layers);
    q.dense = *dense;
    absl::StatusOr<lc::TransferredCheckpoint> c = engine->engine->GetInto(q, buffer_id, offset);
    if (!c.ok()) return Fail(c.status());
    leapcache_checkpoint_info info = leapcache::c_api::FromCheckpoint(*c, c->total_bytes);
    info.crc32c = c->crc32c;
    *out = info;
    return 0;
  });
}

int leapcache_engine_get_batch(leapcache_engine* engine, const leapcache_engine_get* gets, size_t n,
                               leapcache_checkpoint_info* infos, int32_t* codes) {
  return Guard([&] {
    leapcache::c_api::ClearBatchErrors();
    if (absl::Status st = CheckNotNull(engine, "engine"); !st.ok()) return Fail(st);
    if (n > 0) {
      for (const auto& [p, what] : {std::pair<const void*, const char*>{gets, "gets"},
                                    {infos, "infos"},
                                    {codes, "codes"}}) {
        if (absl::Status st = CheckNotNull(p, what); !st.ok()) return Fail(st);
      }
    }
    std::vector<lc::GetItem> items(n);
    for (size_t i = 0; i < n; ++i) {
      const leapcache_engine_get& g = gets[i];
      const std::string what = absl::StrCat("gets[", i, "]");
      if (absl::Status st = CheckStruct(&g, what.c_str()); !st.ok()) return Fail(st);
      const std::string out = absl::StrCat("infos[", i, "]");
      if (absl::Status st = CheckStruct(&infos[i], out.c_str()); !st.ok()) return Fail(st);
      if (g.hash == nullptr) {
        return Fail(absl::InvalidArgumentError(absl::StrCat(what, ".hash is NULL")));
      }
      auto dense = leapcache::c_api::ToEncoding(g.encoding);
      if (!dense.ok()) {
        return Fail(absl::Status(dense.status().code(),
                                 absl::StrCat(what, ": ", dense.status().message())));
      }
      lc::GetItem& item = items[i];
      item.request.namespace_id = g.namespace_id;
      item.request.hash = leapcache::c_api::ToHash(g.hash);
      item.request.heads = leapcache::c_api::ToHeads(g.heads);
      item.request.layers = leapcache::c_api::ToLayers(g.layers);
      item.request.dense = *dense;
      item.buffer = g.buffer_id;
      item.offset = g.offset;
    }
    absl::StatusOr<std::vector<absl::StatusOr<lc::TransferredCheckpoint>>> answers =
        engine->engine->GetBatch(items);
    if (!answers.ok()) return Fail(answers.status());
    for (size_t i = 0; i < n; ++i) {
      const absl::StatusOr<lc::TransferredCheckpoint>& a = (*answers)[i];
      codes[i] = static_cast<int32_t>(a.status().code());
      if (a.ok()) {
        infos[i] = leapcache::c_api::FromCheckpoint(*a, a->total_bytes);
        infos[i].crc32c = a->crc32c;
      } else {
        leapcache::c_api::SetBatchError(i, a.status().message());
      }
    }
    return 0;
  });
}

int leapcache_engine_put_from(leapcache_engine* engine, const leapcache_put_target* target,
                              const leapcache_encoding* encoding, uint64_t buffer_id,
                              uint64_t offset, uint64_t length) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(engine, "engine"); !st.ok()) return Fail(st);
    absl::StatusOr<lc::PutTarget> t = leapcache::c_api::ToPutTarget(target);
    if (!t.ok()) return Fail(t.status());
    auto dense = leapcache::c_api::ToEncoding(encoding);
    if (!dense.ok()) return Fail(dense.status());
    return Fail(engine->engine->PutFrom(*t, *dense, buffer_id, offset, length));
  });
}

int leapcache_engine_detach(leapcache_engine* engine) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(engine, "engine"); !st.ok()) return Fail(st);
    return Fail(engine->engine->Detach());
  });
}

}  // extern "C"
