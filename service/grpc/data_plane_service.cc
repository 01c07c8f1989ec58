#include "service/grpc/data_plane_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/crc32c.h"
#include "service/core/namespace_registry.h"
#include "base/status_macros.h"
#include "service/facade/checkpoint_reader.h"
#include "service/grpc/grpc_status.h"
#include "service/grpc/proto_convert.h"

namespace leapcache::server {
namespace {

using transport::TransportKind;

constexpr size_t kMaxEngineNameBytes = 256;

absl::StatusOr<TransportKind> TransportFromProto(v1::TransportKind kind, const std::string& field) {
  switch (kind) {
    case v1::TRANSPORT_KIND_INLINE:
      return TransportKind::kInline;
    case v1::TRANSPORT_KIND_UCX:
      return TransportKind::kUcx;
    case v1::TRANSPORT_KIND_NCCL:
      return TransportKind::kNccl;
    case v1::TRANSPORT_KIND_CUDA_IPC:
      return TransportKind::kCudaIpc;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is unspecified or unknown (", static_cast<int>(kind), ")"));
  }
}

absl::StatusOr<transport::MemoryKind> MemoryFromProto(v1::MemoryKind kind) {
  switch (kind) {
    case v1::MEMORY_KIND_HOST:
      return transport::MemoryKind::kHost;
    case v1::MEMORY_KIND_CUDA:
      return transport::MemoryKind::kCuda;
    default:
      return absl::InvalidArgumentError(absl::StrCat("buffer.memory is unspecified or unknown (",
                                                     static_cast<int>(kind), ")"));
  }
}

// The session's call guard: the session locked, not ended, on a transport with a connection.
absl::Status CheckTransferable(EngineSession& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  if (s.ended) return absl::NotFoundError("the session has ended");
  if (s.connection == nullptr) {
    return absl::FailedPreconditionError(
        "the session's transport is inline: move checkpoints with StateCache.Get and the put RPCs");
  }
  return absl::OkStatus();
}

absl::StatusOr<transport::RemoteRegion*> FindBuffer(EngineSession& s, uint64_t id)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  auto it = s.buffers.find(id);
  if (it == s.buffers.end()) {
    return absl::NotFoundError(absl::StrCat("buffer_id ", id, " is not registered in the session"));
  }
  return it->second.get();
}

absl::Status CheckRange(const transport::BufferDescriptor& d, uint64_t offset, uint64_t bytes,
                        const char* what) {
  if (offset > d.bytes || bytes > d.bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat(what, " [", offset, ", ", offset + bytes,
                                              ") does not fit the ", d.bytes, "-byte buffer"));
  }
  return absl::OkStatus();
}

// Whether a failed transfer left the session's connection unusable: the engine is gone, or a
// transfer passed its deadline (transfers in flight cannot be recalled).
bool ConnectionLost(const transport::PeerConnection& c, const absl::Status& st) {
  return !c.health().ok() || st.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

DataPlaneService::DataPlaneService(core::CheckpointStore* store, PutPipeline* puts,
                                   const Authorizer* auth, const DataPlaneOptions& options)
    : store_(store), puts_(puts), auth_(auth), options_(options),
      transports_(DataPlaneTransports::Create({options.ucx_transports, options.cuda_device})),
      sessions_(options.reap_interval) {}

DataPlaneService::~DataPlaneService() = default;

absl::Time DataPlaneService::TransferDeadline(const grpc::ServerContext& context) const {
  const absl::Time cap = absl::Now() + options_.max_transfer_time;
  const auto call = context.deadline();
  if (call == std::chrono::system_clock::time_point::max()) return cap;
  return std::min(cap, absl::FromChrono(call));
}

absl::StatusOr<EngineSessionTable::Use> DataPlaneService::SessionFor(
    const grpc::ServerContext& context, uint64_t session_id) {
  LC_ASSIGN_OR_RETURN(const std::string caller, auth_->Caller(context));
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, sessions_.Acquire(session_id));
  if (use->tenant != caller) {
    return absl::PermissionDeniedError(absl::StrCat(
        "session_id ", session_id, " belongs to another tenant than the caller's token"));
  }
  return use;
}

grpc::Status DataPlaneService::Attach(grpc::ServerContext* context,
                                      const v1::AttachRequest* request,
                                      v1::AttachResponse* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const v1::EngineIdentity& id = request->identity();
  if (id.name().empty() || id.name().size() > kMaxEngineNameBytes) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "identity.name must be 1..", kMaxEngineNameBytes, " bytes (got ", id.name().size(), ")")));
  }
  if (request->offers().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("offers is empty (offer at least inline)"));
  }
  std::vector<transport::Offer> offers;
  for (int i = 0; i < request->offers_size(); ++i) {
    const v1::TransportOffer& o = request->offers(i);
    absl::StatusOr<TransportKind> kind =
        TransportFromProto(o.kind(), absl::StrCat("offers[", i, "].kind"));
    if (!kind.ok()) return ToGrpcStatus(kind.status());
    offers.push_back({*kind, o.connection_info(), o.cuda_memory()});
  }
  absl::Duration ttl = absl::Milliseconds(request->session_ttl_ms());
  if (ttl == absl::ZeroDuration()) ttl = options_.default_session_ttl;
  if (ttl > options_.max_session_ttl) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("session_ttl_ms ", request->session_ttl_ms(), " is over the maximum ",
                     absl::ToInt64Milliseconds(options_.max_session_ttl))));
  }
  const transport::PeerInfo peer =
      transports_->Peer(id.host(), static_cast<pid_t>(id.pid()), id.gpu_uuid());
  absl::StatusOr<transport::Offer> chosen = transports_->Choose(offers, peer);
  if (!chosen.ok()) return ToGrpcStatus(chosen.status());
  absl::StatusOr<std::unique_ptr<transport::PeerConnection>> connection =
      transports_->Connect(*chosen, peer);
  if (!connection.ok()) return ToGrpcStatus(connection.status());
  if (*connection != nullptr) response->set_connection_info((*connection)->connection_info());

  EngineIdentity identity{id.name(), id.host(), id.pid(), id.gpu_uuid(), id.gpu_index()};
  const uint64_t session_id = sessions_.Add(std::make_unique<EngineSession>(
      std::move(identity), *std::move(caller), chosen->kind, ttl, std::move(connection).value()));
  response->set_session_id(session_id);
  response->set_transport(static_cast<v1::TransportKind>(chosen->kind));
  response->set_session_ttl_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(ttl)));
  response->set_cuda_direct(transports_->capabilities(chosen->kind).cuda ==
                            transport::CudaAccess::kDirect);
  return grpc::Status::OK;
}

grpc::Status DataPlaneService::Keepalive(grpc::ServerContext* context,
                                         const v1::KeepaliveRequest* request,
                                         v1::KeepaliveResponse*) {
  return ToGrpcStatus(SessionFor(*context, request->session_id()).status());
}

grpc::Status DataPlaneService::Detach(grpc::ServerContext* context,
                                      const v1::DetachRequest* request, v1::DetachResponse*) {
  {
    absl::StatusOr<EngineSessionTable::Use> use = SessionFor(*context, request->session_id());
    if (!use.ok()) return ToGrpcStatus(use.status());
  }
  return ToGrpcStatus(sessions_.Remove(request->session_id()));
}

grpc::Status DataPlaneService::RegisterBuffer(grpc::ServerContext* context,
                                              const v1::RegisterBufferRequest* request,
                                              v1::RegisterBufferResponse* response) {
  absl::StatusOr<EngineSessionTable::Use> use = SessionFor(*context, request->session_id());
  if (!use.ok()) return ToGrpcStatus(use.status());
  EngineSession& s = **use;
  absl::MutexLock lock(&s.mu);
  if (absl::Status st = CheckTransferable(s); !st.ok()) return ToGrpcStatus(st);
  const v1::BufferDescriptor& b = request->buffer();
  absl::StatusOr<TransportKind> kind = TransportFromProto(b.transport(), "buffer.transport");
  if (!kind.ok()) return ToGrpcStatus(kind.status());
  absl::StatusOr<transport::MemoryKind> memory = MemoryFromProto(b.memory());
  if (!memory.ok()) return ToGrpcStatus(memory.status());
  transport::BufferDescriptor d{*kind, *memory, b.address(), b.bytes(), b.remote_key()};
  absl::StatusOr<std::unique_ptr<transport::RemoteRegion>> region = s.connection->Import(d);
  if (!region.ok()) return ToGrpcStatus(region.status());
  const uint64_t buffer_id = s.next_buffer_id++;
  s.buffers[buffer_id] = std::move(region).value();
  response->set_buffer_id(buffer_id);
  return grpc::Status::OK;
}

grpc::Status DataPlaneService::ReleaseBuffer(grpc::ServerContext* context,
                                             const v1::ReleaseBufferRequest* request,
                                             v1::ReleaseBufferResponse*) {
  absl::StatusOr<EngineSessionTable::Use> use = SessionFor(*context, request->session_id());
  if (!use.ok()) return ToGrpcStatus(use.status());
  EngineSession& s = **use;
  absl::MutexLock lock(&s.mu);
  if (s.buffers.erase(request->buffer_id()) == 0) {
    return ToGrpcStatus(absl::NotFoundError(
        absl::StrCat("buffer_id ", request->buffer_id(), " is not registered in the session")));
  }
  return grpc::Status::OK;
}

grpc::Status DataPlaneService::TransferGet(grpc::ServerContext* context,
                                           const v1::TransferGetRequest* request,
                                           v1::TransferGetResponse* response) {
  absl::StatusOr<EngineSessionTable::Use> use = SessionFor(*context, request->session_id());
  if (!use.ok()) return ToGrpcStatus(use.status());
  EngineSession& s = **use;
  absl::MutexLock lock(&s.mu);
  if (absl::Status st = CheckTransferable(s); !st.ok()) return ToGrpcStatus(st);
  absl::StatusOr<transport::RemoteRegion*> region = FindBuffer(s, request->buffer_id());
  if (!region.ok()) return ToGrpcStatus(region.status());
  const absl::Time deadline = TransferDeadline(*context);
  // A two-sided transport's previous get must have been taken by the engine.
  if (absl::Status st = s.connection->Settle(deadline); !st.ok()) {
    if (ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use->id(), s);
    return ToGrpcStatus(st);
  }

  ReadRequest r;
  r.ns = request->namespace_id();
  if (absl::Status st = auth_->Namespace(s.tenant, r.ns); !st.ok()) return ToGrpcStatus(st);
  if (absl::Status st = store_->CheckNamespaceTag(r.ns, request->namespace_tag()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  absl::StatusOr<core::BlockHash> hash = HashFromProto(request->hash(), "hash");
  if (!hash.ok()) return ToGrpcStatus(hash.status());
  r.hash = *hash;
  absl::StatusOr<core::HeadRange> heads =
      ResolveHeads(*store_, r.ns, request->has_heads(), request->heads());
  if (!heads.ok()) return ToGrpcStatus(heads.status());
  r.heads = *heads;
  if (request->has_dense()) {
    absl::StatusOr<DenseFormat> dense = DenseFromProto(request->dense());
    if (!dense.ok()) return ToGrpcStatus(dense.status());
    r.dense = *dense;
  }
  // The read lease lives as long as `reader`: until the last byte landed or the call failed.
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::Open(*store_, r, options_.decoder);
  if (!reader.ok()) return ToGrpcStatus(reader.status());
  const ReadShape& shape = (*reader)->shape();
  const uint64_t base = request->offset();
  if (absl::Status st = CheckRange((*region)->descriptor(), base, shape.total_bytes,
                                   "the checkpoint's bytes at offset");
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  // A connection that takes device memory serves a checkpoint held in the GPU tier of the
  // service's device without a trip through host memory: its blobs as device ops, copied into
  // the engine's buffer (CUDA IPC) or gathered and sent (NCCL). Otherwise the bytes go through
  // the session's staging memory below.
  std::vector<const uint8_t*> on_device;
  if (s.connection->takes_device_memory()) {
    on_device = (*reader)->TakeDeviceBlobs(options_.cuda_device);
  }
  if (!on_device.empty()) {
    std::vector<transport::TransferOp> ops;
    ops.reserve(on_device.size());
    for (size_t i = 0; i < on_device.size(); ++i) {
      // The transport only reads a write's local span.
      ops.push_back({transport::Direction::kWrite,
                     std::span<uint8_t>(const_cast<uint8_t*>(on_device[i]), shape.blob_bytes),
                     base + i * shape.blob_bytes, transport::MemoryKind::kCuda});
    }
    if (absl::Status st = s.connection->Execute(**region, ops, deadline); !st.ok()) {
      if (ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use->id(), s);
      return ToGrpcStatus(st);
    }
  } else if (s.connection->two_sided()) {
    // The engine receives the whole checkpoint in one matching receive once it has this call's
    // answer: read it all, then post it as one send (which Settle completes later).
    s.staging.resize(shape.total_bytes);
    for (size_t at = 0; !(*reader)->done();) {
      if (context->IsCancelled()) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled");
      }
      absl::StatusOr<size_t> n =
          (*reader)->Read(std::span<uint8_t>(s.staging.data() + at, s.staging.size() - at));
      if (!n.ok()) return ToGrpcStatus(n.status());
      at += *n;
    }
    const transport::TransferOp op{transport::Direction::kWrite, std::span<uint8_t>(s.staging),
                                   base};
    if (absl::Status st = s.connection->Execute(**region, {&op, 1}, deadline); !st.ok()) {
      if (ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use->id(), s);
      return ToGrpcStatus(st);
    }
  } else {
    s.staging.resize(std::min<uint64_t>(options_.chunk_bytes, shape.total_bytes));
    while (!(*reader)->done()) {
      if (context->IsCancelled()) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled");
      }
      const uint64_t at = base + (*reader)->offset();
      absl::StatusOr<size_t> n = (*reader)->Read(s.staging);
      if (!n.ok()) return ToGrpcStatus(n.status());
      const transport::TransferOp op{transport::Direction::kWrite,
                                     std::span<uint8_t>(s.staging.data(), *n), at};
      if (absl::Status st = s.connection->Execute(**region, {&op, 1}, deadline); !st.ok()) {
        if (ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use->id(), s);
        return ToGrpcStatus(st);
      }
    }
  }
  GetHeaderToProto(shape, response->mutable_header());
  response->set_crc32c((*reader)->crc32c());
  return grpc::Status::OK;
}

grpc::Status DataPlaneService::TransferPut(grpc::ServerContext* context,
                                           const v1::TransferPutRequest* request,
                                           v1::TransferPutResponse* response) {
  absl::StatusOr<EngineSessionTable::Use> use = SessionFor(*context, request->session_id());
  if (!use.ok()) return ToGrpcStatus(use.status());
  EngineSession& s = **use;
  absl::MutexLock lock(&s.mu);
  if (absl::Status st = CheckTransferable(s); !st.ok()) return ToGrpcStatus(st);
  absl::StatusOr<transport::RemoteRegion*> region = FindBuffer(s, request->buffer_id());
  if (!region.ok()) return ToGrpcStatus(region.status());
  const uint64_t length = request->length();
  if (length == 0) return ToGrpcStatus(absl::InvalidArgumentError("length is 0"));
  if (absl::Status st = CheckRange((*region)->descriptor(), request->offset(), length,
                                   "offset + length");
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  const absl::Time deadline = TransferDeadline(*context);
  // A two-sided transport: the engine posted its send of `length` bytes before calling, so they
  // are received now, before any other check, and dropped if the put then fails.
  const bool received_first = s.connection->two_sided();
  if (received_first) {
    s.staging.resize(length);
    const transport::TransferOp op{transport::Direction::kRead, std::span<uint8_t>(s.staging),
                                   request->offset()};
    absl::Status st = s.connection->Settle(deadline);
    if (st.ok()) st = s.connection->Execute(**region, {&op, 1}, deadline);
    if (!st.ok()) {
      if (ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use->id(), s);
      return ToGrpcStatus(st);
    }
  }

  core::PutRequest put;
  put.ns = request->namespace_id();
  if (absl::Status st = auth_->Namespace(s.tenant, put.ns); !st.ok()) return ToGrpcStatus(st);
  if (absl::Status st = store_->CheckNamespaceTag(put.ns, request->namespace_tag()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  absl::StatusOr<core::BlockHash> hash = HashFromProto(request->hash(), "hash");
  if (!hash.ok()) return ToGrpcStatus(hash.status());
  put.hash = *hash;
  absl::StatusOr<core::Position> position = PositionFromProto(request->position());
  if (!position.ok()) return ToGrpcStatus(position.status());
  put.position = *position;
  absl::StatusOr<core::HeadRange> heads =
      ResolveHeads(*store_, put.ns, request->has_heads(), request->heads());
  if (!heads.ok()) return ToGrpcStatus(heads.status());
  put.heads = *heads;
  put.ttl = absl::Milliseconds(request->ttl_ms());
  std::optional<DenseFormat> dense;
  if (request->has_dense()) {
    absl::StatusOr<DenseFormat> d = DenseFromProto(request->dense());
    if (!d.ok()) return ToGrpcStatus(d.status());
    dense = *d;
  }
  absl::StatusOr<PutTicket> ticket = puts_->Reserve(put, dense);
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  // From here every failure aborts the put: it is never visible and its memory comes back.
  auto fail = [&](const absl::Status& st) {
    puts_->Abort(ticket->id).IgnoreError();
    return ToGrpcStatus(st);
  };
  if (length != ticket->expected_bytes) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "length ", length, " is not the put's ", ticket->expected_bytes, " bytes")));
  }
  // Dense uploads take whole states per chunk.
  uint64_t chunk = options_.chunk_bytes;
  if (ticket->state_bytes > 0) {
    chunk = std::max<uint64_t>(1, chunk / ticket->state_bytes) * ticket->state_bytes;
  }
  if (!received_first) s.staging.resize(std::min<uint64_t>(chunk, length));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < length;) {
    if (context->IsCancelled()) {
      return fail(absl::CancelledError("call cancelled"));
    }
    const uint64_t n = std::min<uint64_t>(chunk, length - done);
    const std::span<uint8_t> bytes(s.staging.data() + (received_first ? done : 0), n);
    if (!received_first) {
      const transport::TransferOp op{transport::Direction::kRead, bytes,
                                     request->offset() + done};
      if (absl::Status st = s.connection->Execute(**region, {&op, 1}, deadline); !st.ok()) {
        if (ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use->id(), s);
        return fail(st);
      }
    }
    crc = Crc32cExtend(crc, bytes.data(), n);
    if (absl::Status st = puts_->Upload(ticket->id, done, bytes); !st.ok()) return fail(st);
    done += n;
  }
  if (crc != request->crc32c()) {
    return fail(absl::DataLossError(absl::StrCat(
        "crc32c ", request->crc32c(), " does not match the ", length, " bytes read (", crc, ")")));
  }
  if (absl::Status st = puts_->Commit(ticket->id, crc); !st.ok()) return fail(st);
  response->set_bytes(length);
  return grpc::Status::OK;
}

absl::Status DataPlaneService::RunStep(const grpc::ServerContext& context, uint64_t session_id,
                                      uint64_t buffer_id, uint64_t in_offset,
                                      std::span<uint8_t> in, uint64_t out_offset,
                                      std::span<uint8_t> out,
                                      absl::FunctionRef<absl::Status()> compute) {
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, SessionFor(context, session_id));
  EngineSession& s = *use;
  absl::MutexLock lock(&s.mu);
  LC_RETURN_IF_ERROR(CheckTransferable(s));
  LC_ASSIGN_OR_RETURN(transport::RemoteRegion* const region, FindBuffer(s, buffer_id));
  LC_RETURN_IF_ERROR(CheckRange(region->descriptor(), in_offset, in.size(), "the step's inputs"));
  LC_RETURN_IF_ERROR(CheckRange(region->descriptor(), out_offset, out.size(), "the step's o"));
  const absl::Time deadline = TransferDeadline(context);
  auto moved = [&](const absl::Status& st) {
    if (!st.ok() && ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use.id(), s);
    return st;
  };
  const transport::TransferOp read{transport::Direction::kRead, in, in_offset};
  LC_RETURN_IF_ERROR(moved(s.connection->Settle(deadline)));
  LC_RETURN_IF_ERROR(moved(s.connection->Execute(*region, {&read, 1}, deadline)));
  const absl::Status computed = compute();
  if (!computed.ok() && !s.connection->two_sided()) return computed;
  // The engine waits for o before its next step: settle now rather than at the next call.
  const transport::TransferOp write{transport::Direction::kWrite, out, out_offset};
  LC_RETURN_IF_ERROR(moved(s.connection->Execute(*region, {&write, 1}, deadline)));
  LC_RETURN_IF_ERROR(moved(s.connection->Settle(deadline)));
  return computed;
}

}  // namespace leapcache::server
