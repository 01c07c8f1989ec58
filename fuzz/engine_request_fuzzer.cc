// Fuzz target: what an attached engine sends the server, beyond StateCache: the DataPlane
// handlers (Attach with its offers, RegisterBuffer with its descriptor, transfers with their
// offsets and lengths, and the same through a transfer channel's request bytes) and the Decode
// handlers (sessions, slots, and Step in both forms: vectors in the message or over a data-plane
// buffer), on a real cache core (CPU backend, a small fresh store, data plane and decode table
// per input), fed sequences of serialized requests.
//
// An input is a sequence of records [kind: 1 byte][length: 2 bytes, little-endian][message], as
// in proto_request_fuzzer.cc. Namespace ids k in [1, registered] name the k-th namespace the
// input registered. Where UCX is built, one real engine lives for the whole run (a UCX worker
// with a 256 KiB host buffer registered): an Attach offer of kind UCX with an empty
// connection_info stands for that engine's worker address, and a UCX RegisterBuffer with an
// empty remote_key for its buffer's descriptor (every UCX buffer is that buffer), so transfers
// really move bytes over UCX at the offsets and lengths the input gives.
//
// Invariants: no crash, no sanitizer report; every handler answers OK or a code its proto
// documents for a bad request (never INTERNAL, UNKNOWN or, with no tokens file, a tenant
// refusal), and never without a message; a transfer writes nothing of the engine's buffer
// outside the range it was asked for, and a get's bytes there are the ones whose CRC-32C it
// answered; once the input's sessions are detached and closed and its puts aborted, nothing
// stays pending, reserved or leased.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "gpu/format/crc32c.h"
#include "leapcache/v1/data_plane.pb.h"
#include "leapcache/v1/decode.pb.h"
#include "leapcache/v1/state_cache.pb.h"
#include "service/core/checkpoint_store.h"
#include "service/core/clock.h"
#include "service/core/host_tier.h"
#include "service/decode/decode_session_table.h"
#include "service/facade/data_plane.h"
#include "service/facade/data_plane_transports.h"
#include "service/facade/put_pipeline.h"
#include "service/grpc/authorizer.h"
#include "service/grpc/data_plane_service.h"
#include "service/grpc/decode_service.h"
#include "service/grpc/state_cache_service.h"
#include "service/grpc/stream_watchdog.h"
#include "service/metrics/registry.h"
#include "transport/backend.h"

namespace {

namespace compute = leapcache::compute;
namespace core = leapcache::core;
namespace decode = leapcache::decode;
namespace server = leapcache::server;
namespace transport = leapcache::transport;
namespace v1 = leapcache::v1;

constexpr size_t kBudgetBytes = 4 << 20;
constexpr size_t kPageBytes = 64 << 10;
constexpr size_t kEngineBufferBytes = 256 << 10;
constexpr uint8_t kPoison = 0xa5;

void CheckStatus(const grpc::Status& st, const char* rpc) {
  if (st.ok()) return;
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::UNAVAILABLE:  // a transport that cannot reach the engine
    case grpc::StatusCode::UNIMPLEMENTED:  // a decode format the backend does not serve
      break;
    default:
      FUZZ_CHECK(false, "%s answered undocumented code %d: %s", rpc,
                 static_cast<int>(st.error_code()), st.error_message().c_str());
  }
  FUZZ_CHECK(!st.error_message().empty(), "%s failed without a message", rpc);
}

grpc::Status ToGrpc(const absl::Status& st) {
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

// The one real engine of the run (UCX builds): its backend, its buffer and what the service
// needs to reach them. Made once: a UCX worker per input would cost more than the input.
struct Engine {
  std::unique_ptr<transport::EngineBackend> backend;
  std::vector<uint8_t> memory = std::vector<uint8_t>(kEngineBufferBytes, kPoison);
  std::unique_ptr<transport::EngineBuffer> buffer;
  std::string address;
  transport::BufferDescriptor descriptor;
};

Engine* TheEngine() {
  static Engine* engine = [] () -> Engine* {
    const transport::Backend* b = transport::FindBackend(transport::TransportKind::kUcx);
    if (b == nullptr) return nullptr;
    auto e = std::make_unique<Engine>();
    absl::StatusOr<std::unique_ptr<transport::EngineBackend>> made = b->make_engine({"tcp"});
    if (!made.ok()) return nullptr;
    e->backend = *std::move(made);
    absl::StatusOr<std::unique_ptr<transport::EngineBuffer>> reg = e->backend->Register(
        e->memory.data(), e->memory.size(), transport::MemoryKind::kHost);
    FUZZ_CHECK(reg.ok(), "cannot register the engine's buffer");
    e->buffer = *std::move(reg);
    e->address = e->backend->connection_info();
    e->descriptor = *e->buffer->descriptor();
    return e.release();
  }();
  return engine;
}

std::shared_ptr<const server::DataPlaneTransports> TheTransports() {
  static auto* transports = new std::shared_ptr<const server::DataPlaneTransports>(
      server::DataPlaneTransports::Create({"tcp", 0}));
  return *transports;
}

// One input's server.
struct Harness {
  std::unique_ptr<core::CheckpointStore> store;
  std::unique_ptr<server::PutPipeline> puts;
  std::unique_ptr<server::Authorizer> auth;  // open: no tokens file
  std::unique_ptr<leapcache::metrics::Registry> registry;
  std::unique_ptr<server::StreamWatchdog> watchdog;  // never swept: no stream runs here
  std::unique_ptr<server::StateCacheService> state_cache;
  std::unique_ptr<server::DataPlane> plane;
  std::unique_ptr<server::DataPlaneService> data_plane;
  std::unique_ptr<decode::DecodeSessionTable> decode_sessions;
  std::unique_ptr<server::DecodeService> decode;
  server::DecodeService::StepStream step;  // one Step stream for the whole input
  std::vector<uint64_t> reserved;          // put ids this input reserved
  std::vector<uint32_t> namespaces;        // ids this input registered, in order
  std::vector<uint64_t> attached;          // data-plane sessions
  std::vector<uint64_t> decode_opened;     // decode sessions
};

template <typename Request>
void Remap(const Harness& h, Request& r) {
  const uint32_t k = r.namespace_id();
  if (k >= 1 && k <= h.namespaces.size()) r.set_namespace_id(h.namespaces[k - 1]);
}

std::unique_ptr<Harness> MakeHarness() {
  auto h = std::make_unique<Harness>();
  std::vector<std::unique_ptr<core::MemoryTier>> tiers;
  absl::StatusOr<std::unique_ptr<core::HostTier>> tier =
      core::HostTier::Create("host", kBudgetBytes, kPageBytes);
  FUZZ_CHECK(tier.ok(), "cannot make the tier");
  tiers.push_back(*std::move(tier));
  absl::StatusOr<std::unique_ptr<core::CheckpointStore>> store =
      core::CheckpointStore::Create(core::StoreOptions{}, std::move(tiers));
  FUZZ_CHECK(store.ok(), "cannot make the store");
  h->store = *std::move(store);
  h->puts = std::make_unique<server::PutPipeline>(h->store.get(), core::MonotonicClock());
  h->auth = std::make_unique<server::Authorizer>(std::nullopt, h->store.get(),
                                                 core::MonotonicClock());
  h->registry = std::make_unique<leapcache::metrics::Registry>();
  h->watchdog = std::make_unique<server::StreamWatchdog>(server::StreamLimits{},
                                                         core::MonotonicClock(), h->registry.get());
  h->state_cache = std::make_unique<server::StateCacheService>(
      h->store.get(), h->puts.get(), h->auth.get(), h->watchdog.get(),
      server::ServiceLimits{64 << 10});
  server::DataPlaneOptions options;
  options.ucx_transports = "tcp";
  options.max_session_ttl = absl::Minutes(1);
  options.max_transfer_time = absl::Seconds(5);  // a hang is a finding, not a wait
  options.chunk_bytes = 64 << 10;
  h->plane = std::make_unique<server::DataPlane>(h->store.get(), h->puts.get(), options,
                                                 TheTransports());
  h->data_plane =
      std::make_unique<server::DataPlaneService>(h->plane.get(), h->store.get(), h->auth.get());
  decode::DecodeOptions d;
  d.memory_budget = 8 << 20;
  d.max_sessions = 4;
  d.max_slots = 16;
  h->decode_sessions =
      std::make_unique<decode::DecodeSessionTable>(d, h->store.get(), &compute::CpuCompute());
  h->decode = std::make_unique<server::DecodeService>(h->decode_sessions.get(), h->store.get(),
                                                      h->auth.get(), h->plane.get());
  return h;
}

template <typename Message>
bool Parse(const uint8_t* data, size_t size, Message* m) {
  return m->ParseFromArray(data, static_cast<int>(size));
}

// The engine's buffer around a transfer: whatever the call answers, nothing outside
// [begin, end) of it may change; `begin`/`end` are set once the call's answer says what it
// wrote. A shadow of the buffer is kept from call to call.
class BufferWatch {
 public:
  explicit BufferWatch(Engine* e) : engine_(e) {
    if (engine_ != nullptr) before_ = engine_->memory;
  }
  void Check(uint64_t begin, uint64_t end, const char* rpc) const {
    if (engine_ == nullptr) return;
    const std::vector<uint8_t>& now = engine_->memory;
    for (uint64_t i = 0; i < now.size(); ++i) {
      if (i >= begin && i < end) continue;
      FUZZ_CHECK(now[i] == before_[i], "%s wrote byte %llu of the engine's buffer, outside "
                 "[%llu, %llu)", rpc, static_cast<unsigned long long>(i),
                 static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end));
    }
  }

 private:
  Engine* const engine_;
  std::vector<uint8_t> before_;
};

// A call during which the service may move bytes of the engine's buffer.
grpc::Status During(Engine* engine, const std::function<grpc::Status()>& call) {
  if (engine == nullptr) return call();
  grpc::Status out;
  (void)engine->backend->During([&] {
    out = call();
    return absl::OkStatus();
  });
  return out;
}

void RunRecord(Harness& h, uint8_t kind, const uint8_t* data, size_t size) {
  Engine* const engine = TheEngine();
  grpc::ServerContext context;
  grpc::ServerContext* const ctx = &context;
  switch (kind % 18) {
    case 0: {
      v1::RegisterNamespaceRequest r;
      v1::RegisterNamespaceResponse out;
      if (!Parse(data, size, &r)) return;
      const grpc::Status st = h.state_cache->RegisterNamespace(ctx, &r, &out);
      CheckStatus(st, "RegisterNamespace");
      if (st.ok()) h.namespaces.push_back(out.namespace_id());
      return;
    }
    case 1: {
      v1::ReservePutRequest r;
      v1::ReservePutResponse out;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      if (r.ttl_ms() > 60000) r.set_ttl_ms(60000);
      const grpc::Status st = h.state_cache->ReservePut(ctx, &r, &out);
      CheckStatus(st, "ReservePut");
      if (st.ok()) h.reserved.push_back(out.put_id());
      return;
    }
    case 2: {
      v1::UploadPutRequest r;
      if (!Parse(data, size, &r)) return;
      const std::string& bytes = r.data();
      CheckStatus(ToGrpc(h.puts->Upload(r.put_id(), r.offset(),
                                        std::span<const uint8_t>(
                                            reinterpret_cast<const uint8_t*>(bytes.data()),
                                            bytes.size()))),
                  "UploadPut");
      return;
    }
    case 3: {
      v1::CommitPutRequest r;
      v1::CommitPutResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(h.state_cache->CommitPut(ctx, &r, &out), "CommitPut");
      return;
    }
    case 4: {
      v1::AttachRequest r;
      v1::AttachResponse out;
      if (!Parse(data, size, &r)) return;
      for (v1::TransportOffer& o : *r.mutable_offers()) {
        if (engine != nullptr && o.kind() == v1::TRANSPORT_KIND_UCX &&
            o.connection_info().empty()) {
          o.set_connection_info(engine->address);
        }
      }
      if (r.session_ttl_ms() > 60000) r.set_session_ttl_ms(60000);
      const grpc::Status st = h.data_plane->Attach(ctx, &r, &out);
      CheckStatus(st, "Attach");
      if (st.ok()) {
        FUZZ_CHECK(out.session_id() != 0, "a session id of 0");
        h.attached.push_back(out.session_id());
      }
      return;
    }
    case 5: {
      v1::KeepaliveRequest r;
      v1::KeepaliveResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(h.data_plane->Keepalive(ctx, &r, &out), "Keepalive");
      return;
    }
    case 6: {
      v1::DetachRequest r;
      v1::DetachResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(h.data_plane->Detach(ctx, &r, &out), "Detach");
      return;
    }
    case 7: {
      v1::RegisterBufferRequest r;
      v1::RegisterBufferResponse out;
      if (!Parse(data, size, &r)) return;
      // A UCX buffer is always the real engine's memory: an engine that lies about its own
      // addresses only harms itself, and here its memory is this process's. The key is the
      // input's (UCX has to refuse or use it) unless empty.
      v1::BufferDescriptor* b = r.mutable_buffer();
      if (engine != nullptr && b->transport() == v1::TRANSPORT_KIND_UCX) {
        b->set_address(engine->descriptor.address);
        b->set_bytes(engine->descriptor.bytes);
        if (b->remote_key().empty()) {
          b->set_memory(v1::MEMORY_KIND_HOST);
          b->set_remote_key(engine->descriptor.key);
        }
      }
      CheckStatus(h.data_plane->RegisterBuffer(ctx, &r, &out), "RegisterBuffer");
      return;
    }
    case 8: {
      v1::ReleaseBufferRequest r;
      v1::ReleaseBufferResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(h.data_plane->ReleaseBuffer(ctx, &r, &out), "ReleaseBuffer");
      return;
    }
    case 9: {
      v1::TransferGetRequest r;
      v1::TransferGetResponse out;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      const BufferWatch watch(engine);
      const grpc::Status st =
          During(engine, [&] { return h.data_plane->TransferGet(ctx, &r, &out); });
      CheckStatus(st, "TransferGet");
      if (st.ok() && engine != nullptr) {
        // Only the real engine's buffer is ever registered with a UCX key that works.
        const uint64_t n = out.header().total_bytes();
        FUZZ_CHECK(r.offset() <= kEngineBufferBytes && n <= kEngineBufferBytes - r.offset(),
                   "a get of %llu bytes at %llu succeeded in a %zu-byte buffer",
                   static_cast<unsigned long long>(n), static_cast<unsigned long long>(r.offset()),
                   kEngineBufferBytes);
        watch.Check(r.offset(), r.offset() + n, "TransferGet");
        FUZZ_CHECK(leapcache::Crc32c(engine->memory.data() + r.offset(), n) == out.crc32c(),
                   "the get's bytes are not the ones whose CRC-32C it answered");
      } else {
        watch.Check(r.offset(), kEngineBufferBytes, "TransferGet");
      }
      return;
    }
    case 10: {
      v1::TransferPutRequest r;
      v1::TransferPutResponse out;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      if (r.ttl_ms() > 60000) r.set_ttl_ms(60000);
      // The bytes the put names are the engine's to give: make the CRC match now and then, so
      // that puts commit and read back.
      if (engine != nullptr && (r.crc32c() & 1) && r.offset() <= kEngineBufferBytes &&
          r.length() <= kEngineBufferBytes - r.offset()) {
        r.set_crc32c(leapcache::Crc32c(engine->memory.data() + r.offset(), r.length()));
      }
      const BufferWatch watch(engine);
      CheckStatus(During(engine, [&] { return h.data_plane->TransferPut(ctx, &r, &out); }),
                  "TransferPut");
      watch.Check(0, 0, "TransferPut");  // a put only reads the engine's buffer
      return;
    }
    case 11: {
      v1::OpenDecodeSessionRequest r;
      v1::OpenDecodeSessionResponse out;
      if (!Parse(data, size, &r)) return;
      Remap(h, r);
      const grpc::Status st = h.decode->OpenSession(ctx, &r, &out);
      CheckStatus(st, "OpenSession");
      if (st.ok()) h.decode_opened.push_back(out.session_id());
      return;
    }
    case 12: {
      v1::ResetSlotRequest r;
      v1::ResetSlotResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(h.decode->ResetSlot(ctx, &r, &out), "ResetSlot");
      return;
    }
    case 13: {
      v1::LoadSlotRequest r;
      v1::LoadSlotResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(h.decode->LoadSlot(ctx, &r, &out), "LoadSlot");
      return;
    }
    case 14: {
      v1::CommitSlotRequest r;
      v1::CommitSlotResponse out;
      if (!Parse(data, size, &r)) return;
      CheckStatus(h.decode->CommitSlot(ctx, &r, &out), "CommitSlot");
      return;
    }
    case 15: {
      v1::StepRequest r;
      v1::StepResponse out;
      if (!Parse(data, size, &r)) return;
      const BufferWatch watch(engine);
      const absl::Status st = [&] {
        absl::Status s;
        (void)During(engine, [&] {
          s = h.decode->StepOnce(*ctx, r, &h.step, &out);
          return grpc::Status::OK;
        });
        return s;
      }();
      CheckStatus(ToGrpc(st), "Step");
      if (r.has_buffers()) {
        const uint64_t at = r.buffers().output_offset();
        watch.Check(at, at + h.step.out.size(), "Step");
        FUZZ_CHECK(out.o().empty(), "a data-plane step answered o in the message");
      } else {
        watch.Check(0, 0, "Step");
        if (st.ok()) {
          FUZZ_CHECK(out.o().size() % static_cast<size_t>(r.slot_size()) == 0,
                     "o of %zu bytes for a batch of %d", out.o().size(), r.slot_size());
        }
      }
      return;
    }
    case 17: {
      // A transfer channel's request, as the mailbox would carry it, on a channel of the
      // input's last data-plane session: the bytes as they are (a garble is the channel's to
      // refuse), namespace ids remapped where they parse.
      const uint64_t session = h.attached.empty() ? 0 : h.attached.back();
      v1::TransferChannelRequest r;
      std::string bytes(reinterpret_cast<const char*>(data), size);
      if (!Parse(data, size, &r)) {
        r.Clear();
      } else {
        if (r.has_get()) Remap(h, *r.mutable_get());
        if (r.has_put()) {
          Remap(h, *r.mutable_put());
          if (r.put().ttl_ms() > 60000) r.mutable_put()->set_ttl_ms(60000);
        }
        if (r.has_lookups()) {
          for (v1::LookupRequest& q : *r.mutable_lookups()->mutable_lookups()) Remap(h, q);
        }
        bytes = r.SerializeAsString();
      }
      const server::DataPlaneCall open = server::DataPlaneCallOf(*ctx, "");
      const BufferWatch watch(engine);
      std::string reply;
      (void)During(engine, [&] {
        h.data_plane->AnswerChannelRequest(
            open, session,
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
            &reply);
        return grpc::Status::OK;
      });
      v1::TransferChannelReply answer;
      FUZZ_CHECK(answer.ParseFromString(reply), "a transfer channel reply does not parse");
      const absl::StatusCode code = static_cast<absl::StatusCode>(answer.code());
      CheckStatus(grpc::Status(static_cast<grpc::StatusCode>(code), answer.message()),
                  "a transfer channel request");
      const bool got = code == absl::StatusCode::kOk && r.has_get();
      if (got && engine != nullptr) {
        const uint64_t at = r.get().offset(), n = answer.get().header().total_bytes();
        FUZZ_CHECK(at <= kEngineBufferBytes && n <= kEngineBufferBytes - at,
                   "a channel get of %llu bytes at %llu succeeded in a %zu-byte buffer",
                   static_cast<unsigned long long>(n), static_cast<unsigned long long>(at),
                   kEngineBufferBytes);
        watch.Check(at, at + n, "a channel get");
        FUZZ_CHECK(leapcache::Crc32c(engine->memory.data() + at, n) == answer.get().crc32c(),
                   "the channel get's bytes are not the ones whose CRC-32C it answered");
      } else if (r.has_get()) {
        watch.Check(r.get().offset(), kEngineBufferBytes, "a channel get");
      } else {
        watch.Check(0, 0, "a channel request");
      }
      FUZZ_CHECK(code == absl::StatusCode::kOk ||
                     (!answer.has_get() && !answer.has_put() && !answer.has_lookups()),
                 "a failed channel request answered a transfer");
      FUZZ_CHECK(reply.size() <= server::MailboxChannelOptions{}.capacity,
                 "a channel reply of %zu bytes does not fit the mailbox", reply.size());
      if (code == absl::StatusCode::kOk && r.has_lookups()) {
        FUZZ_CHECK(answer.lookups().results_size() == r.lookups().lookups_size(),
                   "%d lookup results for %d lookups", answer.lookups().results_size(),
                   r.lookups().lookups_size());
      }
      return;
    }
    default: {
      v1::CloseDecodeSessionRequest r;
      v1::CloseDecodeSessionResponse out;
      if (!Parse(data, size, &r)) return;
      if (h.step.session != nullptr && h.step.session->info().id == r.session_id()) {
        h.step.session = nullptr;  // a stream holds its session; closing ends it for the stream
      }
      CheckStatus(h.decode->CloseSession(ctx, &r, &out), "CloseSession");
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<Harness> h = MakeHarness();
  size_t at = 0;
  while (at + 3 <= size) {
    const uint8_t kind = data[at];
    const size_t length = std::min<size_t>(data[at + 1] | (data[at + 2] << 8), size - at - 3);
    RunRecord(*h, kind, data + at + 3, length);
    at += 3 + length;
  }
  // Everything the input left open is ended; then nothing may stay pending, reserved or leased.
  grpc::ServerContext context;
  for (uint64_t id : h->attached) {
    v1::DetachRequest r;
    v1::DetachResponse out;
    r.set_session_id(id);
    (void)h->data_plane->Detach(&context, &r, &out);
  }
  FUZZ_CHECK(h->plane->sessions() == 0, "%zu data-plane sessions outlive their detach",
             h->plane->sessions());
  h->step.session = nullptr;
  for (uint64_t id : h->decode_opened) {
    v1::CloseDecodeSessionRequest r;
    v1::CloseDecodeSessionResponse out;
    r.set_session_id(id);
    (void)h->decode->CloseSession(&context, &r, &out);
  }
  FUZZ_CHECK(h->decode_sessions->Stats().sessions == 0, "decode sessions outlive their close");
  FUZZ_CHECK(h->decode_sessions->Stats().state_bytes == 0, "decode state memory left behind");
  for (uint64_t id : h->reserved) {
    absl::Status st = h->puts->Abort(id);
    FUZZ_CHECK(st.ok() || st.code() == absl::StatusCode::kNotFound ||
                   st.code() == absl::StatusCode::kDeadlineExceeded,
               "abort of put %llu: %s", static_cast<unsigned long long>(id),
               std::string(st.message()).c_str());
  }
  const core::StoreStats stats = h->store->Stats();
  FUZZ_CHECK(stats.pending_puts == 0, "%llu puts still pending",
             static_cast<unsigned long long>(stats.pending_puts));
  FUZZ_CHECK(stats.leases == 0, "%llu read leases still held",
             static_cast<unsigned long long>(stats.leases));
  for (const core::TierStats& t : stats.tiers) {
    FUZZ_CHECK(t.reserved_bytes == 0, "tier %s keeps %llu reserved bytes", t.name.c_str(),
               static_cast<unsigned long long>(t.reserved_bytes));
  }
  return 0;
}
