// The C API's attached decode: a decode session (decode_session.h's DecodeSession), its steps on
// host arrays or in an engine's registered buffer, and its slots' resets, loads and commits.
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "client/c_api/c_api_support.h"
#include "leapcache/decode_session.h"

namespace lc = leapcache::client;
using leapcache::c_api::CheckNotNull;
using leapcache::c_api::CheckStruct;
using leapcache::c_api::Fail;
using leapcache::c_api::Guard;

// A DecodeSession is one decode loop, not for concurrent use: the handle serializes its calls.
struct leapcache_decode_session {
  std::mutex mu;
  std::unique_ptr<lc::DecodeSession> session;
};

namespace {

absl::StatusOr<lc::DType> ToDType(int32_t dtype, const char* what) {
  if (dtype == LEAPCACHE_DTYPE_FP32) return lc::DType::kFp32;
  if (dtype == LEAPCACHE_DTYPE_BF16) return lc::DType::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat(what, " must be LEAPCACHE_DTYPE_FP32 or BF16 (got ", dtype, ")"));
}

absl::StatusOr<lc::StepChannel> ToStepChannel(int32_t channel) {
  switch (channel) {
    case LEAPCACHE_STEP_CHANNEL_AUTO:
      return lc::StepChannel::kAuto;
    case LEAPCACHE_STEP_CHANNEL_STREAM:
      return lc::StepChannel::kStream;
    case LEAPCACHE_STEP_CHANNEL_SHM:
      return lc::StepChannel::kSharedMemory;
    default:
      return absl::InvalidArgumentError(absl::StrCat("step_channel ", channel,
                                                     " is not one of "
                                                     "LEAPCACHE_STEP_CHANNEL_*"));
  }
}

lc::DecodeSessionInfo FromInfo(const leapcache_decode_info& info) {
  lc::DecodeSessionInfo out;
  out.id = info.id;
  out.layers = info.layers;
  out.heads = {info.heads.begin, info.heads.end};
  out.dk = info.dk;
  out.dv = info.dv;
  out.kind = info.kind == LEAPCACHE_KIND_KDA ? lc::StateKind::kKda : lc::StateKind::kGdn;
  out.state_bytes = info.state_bytes;
  return out;
}

// Runs `body(session)` under the handle's lock.
template <typename Body>
int WithSession(leapcache_decode_session* s, Body&& body) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(s, "session"); !st.ok()) return Fail(st);
    std::lock_guard<std::mutex> lock(s->mu);
    return body(*s->session);
  });
}

}  // namespace

extern "C" {

int leapcache_decode_open(const leapcache_client_options* options,
                          const leapcache_decode_options* decode, leapcache_decode_session** out) {
  return Guard([&] {
    if (absl::Status st = CheckStruct(options, "options"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(decode, "decode"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckNotNull(out, "out"); !st.ok()) return Fail(st);
    absl::StatusOr<lc::ClientOptions> o = leapcache::c_api::ToOptions(*options);
    if (!o.ok()) return Fail(o.status());
    absl::StatusOr<lc::StepChannel> channel = ToStepChannel(decode->step_channel);
    if (!channel.ok()) return Fail(channel.status());
    lc::DecodeSessionOptions d;
    d.namespace_id = decode->namespace_id;
    d.namespace_tag = decode->namespace_tag;
    d.heads = {decode->heads.begin, decode->heads.end};
    d.slots = decode->slots;
    d.l2norm_qk = decode->l2norm_qk != 0;
    d.scale = decode->scale;
    d.step_channel = *channel;
    absl::StatusOr<std::unique_ptr<lc::DecodeSession>> s = lc::DecodeSession::Open(*o, d);
    if (!s.ok()) return Fail(s.status());
    auto handle = std::make_unique<leapcache_decode_session>();
    handle->session = *std::move(s);
    *out = handle.release();
    return 0;
  });
}

void leapcache_decode_destroy(leapcache_decode_session* session) {
  // The destructor closes the session; nothing it does may throw through here.
  try {
    delete session;
  } catch (...) {
  }
}

int leapcache_decode_info_get(const leapcache_decode_session* session, leapcache_decode_info* out) {
  return Guard([&] {
    if (absl::Status st = CheckNotNull(session, "session"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(out, "out"); !st.ok()) return Fail(st);
    const lc::DecodeSessionInfo& i = session->session->info();  // fixed once open
    leapcache_decode_info info{};
    info.struct_size = sizeof(info);
    info.id = i.id;
    info.layers = i.layers;
    info.heads = {i.heads.begin, i.heads.end};
    info.dk = i.dk;
    info.dv = i.dv;
    info.kind = static_cast<int32_t>(i.kind);
    leapcache::c_api::CopyString(i.backend, info.backend, sizeof(info.backend));
    info.state_bytes = i.state_bytes;
    *out = info;
    return 0;
  });
}

uint64_t leapcache_decode_input_bytes(const leapcache_decode_info* info, size_t batch,
                                      int32_t dtype) {
  absl::StatusOr<lc::DType> d = ToDType(dtype, "dtype");
  if (info == nullptr || info->struct_size != sizeof(*info) || !d.ok()) return 0;
  return lc::PackedStepInputBytes(FromInfo(*info), batch, *d);
}

uint64_t leapcache_decode_output_bytes(const leapcache_decode_info* info, size_t batch,
                                       int32_t out_dtype) {
  absl::StatusOr<lc::DType> d = ToDType(out_dtype, "out_dtype");
  if (info == nullptr || info->struct_size != sizeof(*info) || !d.ok()) return 0;
  return lc::StepOutputBytes(FromInfo(*info), batch, *d);
}

int leapcache_decode_step_host(leapcache_decode_session* session, const leapcache_decode_step* step,
                               void* o, uint64_t o_bytes) {
  return WithSession(session, [&](lc::DecodeSession& s) {
    if (absl::Status st = CheckStruct(step, "step"); !st.ok()) return Fail(st);
    absl::StatusOr<lc::DType> dtype = ToDType(step->dtype, "step.dtype");
    if (!dtype.ok()) return Fail(dtype.status());
    absl::StatusOr<lc::DType> out_dtype = ToDType(step->out_dtype, "step.out_dtype");
    if (!out_dtype.ok()) return Fail(out_dtype.status());
    const lc::DecodeSessionInfo& info = s.info();
    const size_t bh = step->batch * static_cast<size_t>(info.heads.size());
    const size_t elem = *dtype == lc::DType::kBf16 ? 2 : 4;
    struct Array {
      const void* p;
      size_t bytes;
      const char* name;
    };
    for (const Array& a :
         {Array{step->slots, step->batch * sizeof(int32_t), "step.slots"},
          Array{step->q, bh * info.dk * elem, "step.q"},
          Array{step->k, bh * info.dk * elem, "step.k"},
          Array{step->v, bh * info.dv * elem, "step.v"},
          Array{step->g, bh * info.gate_size() * sizeof(float), "step.g"},
          Array{step->beta, bh * sizeof(float), "step.beta"}, Array{o, o_bytes, "o"}}) {
      if (a.p == nullptr && a.bytes > 0) {
        return Fail(absl::InvalidArgumentError(absl::StrCat(a.name, " is NULL")));
      }
    }
    auto bytes = [](const void* p, size_t n) {
      return std::span<const uint8_t>(static_cast<const uint8_t*>(p), n);
    };
    lc::DecodeStep d;
    d.layer = step->layer;
    d.slot = std::span<const int32_t>(step->slots, step->batch);
    d.dtype = *dtype;
    d.q = bytes(step->q, bh * info.dk * elem);
    d.k = bytes(step->k, bh * info.dk * elem);
    d.v = bytes(step->v, bh * info.dv * elem);
    d.g = std::span<const float>(step->g, bh * info.gate_size());
    d.beta = std::span<const float>(step->beta, bh);
    d.out_dtype = *out_dtype;
    return Fail(s.Step(d, std::span<uint8_t>(static_cast<uint8_t*>(o), o_bytes)));
  });
}

int leapcache_decode_step_in_buffer(leapcache_decode_session* session, leapcache_engine* engine,
                                    const leapcache_decode_buffer_step* step) {
  return WithSession(session, [&](lc::DecodeSession& s) {
    if (absl::Status st = CheckNotNull(engine, "engine"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckStruct(step, "step"); !st.ok()) return Fail(st);
    if (step->slots == nullptr && step->batch > 0) {
      return Fail(absl::InvalidArgumentError("step.slots is NULL"));
    }
    absl::StatusOr<lc::DType> dtype = ToDType(step->dtype, "step.dtype");
    if (!dtype.ok()) return Fail(dtype.status());
    absl::StatusOr<lc::DType> out_dtype = ToDType(step->out_dtype, "step.out_dtype");
    if (!out_dtype.ok()) return Fail(out_dtype.status());
    lc::DecodeBufferStep d;
    d.layer = step->layer;
    d.slot = std::span<const int32_t>(step->slots, step->batch);
    d.dtype = *dtype;
    d.out_dtype = *out_dtype;
    d.buffer = step->buffer_id;
    d.input_offset = step->input_offset;
    d.output_offset = step->output_offset;
    return Fail(s.StepInBuffer(*engine->engine, d));
  });
}

int32_t leapcache_decode_stepping_through_channel(const leapcache_decode_session* session) {
  if (session == nullptr) return 0;
  auto* s = const_cast<leapcache_decode_session*>(session);
  std::lock_guard<std::mutex> lock(s->mu);
  return s->session->stepping_through_channel() ? 1 : 0;
}

int leapcache_decode_reset(leapcache_decode_session* session, int32_t slot) {
  return WithSession(session, [&](lc::DecodeSession& s) { return Fail(s.Reset(slot)); });
}

int leapcache_decode_load(leapcache_decode_session* session, int32_t slot, const uint8_t* hash,
                          leapcache_position* out) {
  return WithSession(session, [&](lc::DecodeSession& s) {
    if (absl::Status st = CheckNotNull(hash, "hash"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckNotNull(out, "out"); !st.ok()) return Fail(st);
    absl::StatusOr<lc::Position> p = s.Load(slot, leapcache::c_api::ToHash(hash));
    if (!p.ok()) return Fail(p.status());
    *out = {p->tokens, p->blocks};
    return 0;
  });
}

int leapcache_decode_commit(leapcache_decode_session* session, int32_t slot, const uint8_t* hash,
                            const leapcache_position* position) {
  return WithSession(session, [&](lc::DecodeSession& s) {
    if (absl::Status st = CheckNotNull(hash, "hash"); !st.ok()) return Fail(st);
    if (absl::Status st = CheckNotNull(position, "position"); !st.ok()) return Fail(st);
    return Fail(
        s.Commit(slot, leapcache::c_api::ToHash(hash), {position->tokens, position->blocks}));
  });
}

int leapcache_decode_close(leapcache_decode_session* session) {
  return WithSession(session, [&](lc::DecodeSession& s) { return Fail(s.Close()); });
}

}  // extern "C"
