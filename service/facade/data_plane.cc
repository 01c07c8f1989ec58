#include "service/facade/data_plane.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gpu/format/crc32c.h"

namespace leapcache::server {
namespace {

constexpr size_t kMaxEngineNameBytes = 256;

// Charges the time since its last lap to a phase.
class PhaseClock {
 public:
  explicit PhaseClock(TransferTimes* times) : times_(times) {}
  void Lap(TransferPhase phase) {
    const auto now = std::chrono::steady_clock::now();
    if (times_ != nullptr) (*times_)[phase] += absl::FromChrono(now - last_);
    last_ = now;
  }

 private:
  TransferTimes* const times_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

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

const char* TransferPhaseName(TransferPhase phase) {
  switch (phase) {
    case TransferPhase::kSession:
      return "session";
    case TransferPhase::kOpen:
      return "open";
    case TransferPhase::kList:
      return "list";
    case TransferPhase::kMove:
      return "move";
    case TransferPhase::kCommit:
      return "commit";
  }
  return "unknown";
}

DataPlane::DataPlane(core::CheckpointStore* store, PutPipeline* puts,
                     const DataPlaneOptions& options)
    : DataPlane(store, puts, options,
                DataPlaneTransports::Create({options.ucx_transports, options.cuda_device})) {}

DataPlane::DataPlane(core::CheckpointStore* store, PutPipeline* puts,
                     const DataPlaneOptions& options,
                     std::shared_ptr<const DataPlaneTransports> transports)
    : store_(store),
      puts_(puts),
      options_(options),
      transports_(std::move(transports)),
      sessions_(options.reap_interval) {}

DataPlane::~DataPlane() = default;

absl::Time DataPlane::TransferDeadline(const DataPlaneCall& call) const {
  return std::min(absl::Now() + options_.max_transfer_time, call.deadline);
}

absl::StatusOr<EngineSessionTable::Use> DataPlane::SessionFor(const DataPlaneCall& call,
                                                              uint64_t session_id) {
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, sessions_.Acquire(session_id));
  if (use->tenant != call.caller) {
    return absl::PermissionDeniedError(absl::StrCat(
        "session_id ", session_id, " belongs to another tenant than the caller's token"));
  }
  return use;
}

absl::StatusOr<Attached> DataPlane::Attach(const DataPlaneCall& call, AttachArgs args) {
  const EngineIdentity& id = args.identity;
  if (id.name.empty() || id.name.size() > kMaxEngineNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("identity.name must be 1..", kMaxEngineNameBytes,
                                                   " bytes (got ", id.name.size(), ")"));
  }
  if (args.offers.empty()) {
    return absl::InvalidArgumentError("offers is empty (offer at least inline)");
  }
  absl::Duration ttl = args.ttl;
  if (ttl == absl::ZeroDuration()) ttl = options_.default_session_ttl;
  if (ttl > options_.max_session_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("session_ttl_ms ", absl::ToInt64Milliseconds(args.ttl),
                     " is over the maximum ", absl::ToInt64Milliseconds(options_.max_session_ttl)));
  }
  const transport::PeerInfo peer =
      transports_->Peer(id.host, static_cast<pid_t>(id.pid), id.gpu_uuid);
  LC_ASSIGN_OR_RETURN(const transport::Offer chosen, transports_->Choose(args.offers, peer));
  LC_ASSIGN_OR_RETURN(std::unique_ptr<transport::PeerConnection> connection,
                      transports_->Connect(chosen, peer));
  Attached out;
  if (connection != nullptr) out.connection_info = connection->connection_info();
  out.transport = chosen.kind;
  out.ttl = ttl;
  out.cuda_direct = transports_->capabilities(chosen.kind).cuda == transport::CudaAccess::kDirect;
  out.session_id = sessions_.Add(std::make_unique<EngineSession>(
      std::move(args.identity), std::string(call.caller), chosen.kind, ttl, std::move(connection)));
  return out;
}

absl::Status DataPlane::Keepalive(const DataPlaneCall& call, uint64_t session_id) {
  return SessionFor(call, session_id).status();
}

absl::Status DataPlane::Detach(const DataPlaneCall& call, uint64_t session_id) {
  LC_RETURN_IF_ERROR(SessionFor(call, session_id).status());
  return sessions_.Remove(session_id);
}

absl::StatusOr<uint64_t> DataPlane::RegisterBuffer(const DataPlaneCall& call, uint64_t session_id,
                                                   const transport::BufferDescriptor& buffer) {
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, SessionFor(call, session_id));
  EngineSession& s = *use;
  absl::MutexLock lock(&s.mu);
  LC_RETURN_IF_ERROR(CheckTransferable(s));
  LC_ASSIGN_OR_RETURN(std::unique_ptr<transport::RemoteRegion> region,
                      s.connection->Import(buffer));
  const uint64_t buffer_id = s.next_buffer_id++;
  s.buffers[buffer_id] = std::move(region);
  return buffer_id;
}

absl::Status DataPlane::ReleaseBuffer(const DataPlaneCall& call, uint64_t session_id,
                                      uint64_t buffer_id) {
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, SessionFor(call, session_id));
  EngineSession& s = *use;
  absl::MutexLock lock(&s.mu);
  if (s.buffers.erase(buffer_id) == 0) {
    return absl::NotFoundError(
        absl::StrCat("buffer_id ", buffer_id, " is not registered in the session"));
  }
  return absl::OkStatus();
}

absl::Status DataPlane::CheckBatchable(const DataPlaneCall& call, uint64_t session_id) {
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, SessionFor(call, session_id));
  EngineSession& s = *use;
  absl::MutexLock lock(&s.mu);
  LC_RETURN_IF_ERROR(CheckTransferable(s));
  if (s.connection->two_sided()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", session_id, "'s transport (", transport::TransportName(s.connection->kind()),
        ") is two-sided: its gets run one call each"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GetResult> DataPlane::Get(const DataPlaneCall& call, uint64_t session_id,
                                         uint64_t buffer_id, uint64_t offset,
                                         absl::FunctionRef<absl::StatusOr<ReadRequest>()> request,
                                         TransferTimes* times) {
  PhaseClock clock(times);
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, SessionFor(call, session_id));
  EngineSession& s = *use;
  absl::MutexLock lock(&s.mu);
  LC_RETURN_IF_ERROR(CheckTransferable(s));
  LC_ASSIGN_OR_RETURN(transport::RemoteRegion* const region, FindBuffer(s, buffer_id));
  const absl::Time deadline = TransferDeadline(call);
  // A two-sided transport's previous get must have been taken by the engine.
  if (absl::Status st = s.connection->Settle(deadline); !st.ok()) {
    if (ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use.id(), s);
    return st;
  }
  clock.Lap(TransferPhase::kSession);

  LC_ASSIGN_OR_RETURN(const ReadRequest read, request());
  // The read lease lives as long as `reader`: until the last byte landed or the call failed.
  LC_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                      CheckpointReader::Open(*store_, read, options_.compute));
  const ReadShape& shape = reader->shape();
  LC_RETURN_IF_ERROR(CheckRange(region->descriptor(), offset, shape.total_bytes,
                                "the checkpoint's bytes at offset"));
  clock.Lap(TransferPhase::kOpen);
  absl::StatusOr<bool> landed = MoveGet(call, s, *region, *reader, offset, deadline, times);
  if (!landed.ok()) {
    if (ConnectionLost(*s.connection, landed.status())) sessions_.RemoveLocked(use.id(), s);
    return landed.status();
  }
  return GetResult{shape, reader->crc32c(), *landed};
}

absl::StatusOr<bool> DataPlane::MoveGet(const DataPlaneCall& call, EngineSession& s,
                                        transport::RemoteRegion& region, CheckpointReader& reader,
                                        uint64_t base, absl::Time deadline, TransferTimes* times) {
  PhaseClock clock(times);
  const ReadShape& shape = reader.shape();
  // A connection that takes device memory serves a checkpoint held in the GPU tier of the
  // service's device without a trip through host memory: its blobs as device ops, copied into
  // the engine's buffer (CUDA IPC) or gathered and sent (NCCL).
  std::vector<const uint8_t*> on_device;
  if (s.connection->takes_device_memory()) {
    on_device = reader.TakeDeviceUnits(options_.cuda_device);
  }
  if (!on_device.empty()) {
    std::vector<transport::TransferOp> ops;
    ops.reserve(on_device.size());
    for (size_t i = 0; i < on_device.size(); ++i) {
      // The transport only reads a write's local span.
      ops.push_back({transport::Direction::kWrite,
                     std::span<uint8_t>(const_cast<uint8_t*>(on_device[i]), shape.unit_bytes),
                     base + i * shape.unit_bytes, transport::MemoryKind::kCuda});
    }
    clock.Lap(TransferPhase::kList);
    LC_RETURN_IF_ERROR(s.connection->Execute(region, ops, deadline));
    clock.Lap(TransferPhase::kMove);
    if (times != nullptr) times->device_to_device = true;
    return false;
  }
  // A dense read of units in the GPU tier into an engine buffer mapped on the same device (CUDA
  // IPC): decoded there by the service's kernels, straight into the engine's buffer.
  const transport::RemoteRegion::Mapping mapped = region.mapping();
  if (shape.dense.has_value() && options_.compute != nullptr && mapped.data != nullptr &&
      options_.cuda_device >= 0 && mapped.device == options_.cuda_device) {
    const std::vector<const uint8_t*> stored = reader.StoredDeviceUnits(options_.cuda_device);
    const compute::DeviceUnits units{stored, shape.blob_bytes, shape.side_bytes};
    uint8_t* const out = mapped.data + base;
    if (!stored.empty() &&
        options_.compute->DecodesInPlace(shape.format, *shape.dense, units, out)) {
      clock.Lap(TransferPhase::kList);
      LC_RETURN_IF_ERROR(s.connection->health());
      LC_ASSIGN_OR_RETURN(const uint32_t crc,
                          options_.compute->DecodeInPlace(shape.format, *shape.dense, units,
                                                          {out, shape.total_bytes}));
      LC_RETURN_IF_ERROR(s.connection->health());
      reader.ProducedElsewhere(crc);
      clock.Lap(TransferPhase::kMove);
      if (times != nullptr) times->device_to_device = true;
      return true;
    }
  }
  if (s.connection->two_sided()) {
    // The engine receives the whole checkpoint in one matching receive once it has this call's
    // answer: read it all, then post it as one send (which Settle completes later).
    s.staging.resize(shape.total_bytes);
    for (size_t at = 0; !reader.done();) {
      if (call.is_cancelled()) return absl::CancelledError("call cancelled");
      LC_ASSIGN_OR_RETURN(const size_t n, reader.Read(std::span<uint8_t>(s.staging.data() + at,
                                                                         s.staging.size() - at)));
      at += n;
    }
    const transport::TransferOp op{transport::Direction::kWrite, std::span<uint8_t>(s.staging),
                                   base};
    LC_RETURN_IF_ERROR(s.connection->Execute(region, {&op, 1}, deadline));
    clock.Lap(TransferPhase::kMove);
    return false;
  }
  // One-sided through host memory: a chunk of staging at a time.
  s.staging.resize(std::min<uint64_t>(options_.chunk_bytes, shape.total_bytes));
  while (!reader.done()) {
    if (call.is_cancelled()) return absl::CancelledError("call cancelled");
    const uint64_t at = base + reader.offset();
    LC_ASSIGN_OR_RETURN(const size_t n, reader.Read(s.staging));
    const transport::TransferOp op{transport::Direction::kWrite,
                                   std::span<uint8_t>(s.staging.data(), n), at};
    LC_RETURN_IF_ERROR(s.connection->Execute(region, {&op, 1}, deadline));
  }
  clock.Lap(TransferPhase::kMove);
  return false;
}

absl::Status DataPlane::Put(const DataPlaneCall& call, uint64_t session_id, uint64_t buffer_id,
                            uint64_t offset, uint64_t length, uint32_t crc32c,
                            absl::FunctionRef<absl::StatusOr<PutArgs>()> request,
                            TransferTimes* times) {
  PhaseClock clock(times);
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, SessionFor(call, session_id));
  EngineSession& s = *use;
  absl::MutexLock lock(&s.mu);
  LC_RETURN_IF_ERROR(CheckTransferable(s));
  LC_ASSIGN_OR_RETURN(transport::RemoteRegion* const region, FindBuffer(s, buffer_id));
  if (length == 0) return absl::InvalidArgumentError("length is 0");
  LC_RETURN_IF_ERROR(CheckRange(region->descriptor(), offset, length, "offset + length"));
  const absl::Time deadline = TransferDeadline(call);
  auto moved = [&](const absl::Status& st) {
    if (!st.ok() && ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use.id(), s);
    return st;
  };
  // A two-sided transport: the engine posted its send of `length` bytes before calling, so they
  // are received now, before any other check, and dropped if the put then fails.
  const bool received_first = s.connection->two_sided();
  if (received_first) {
    s.staging.resize(length);
    const transport::TransferOp op{transport::Direction::kRead, std::span<uint8_t>(s.staging),
                                   offset};
    LC_RETURN_IF_ERROR(moved(s.connection->Settle(deadline)));
    LC_RETURN_IF_ERROR(moved(s.connection->Execute(*region, {&op, 1}, deadline)));
  }
  clock.Lap(TransferPhase::kSession);

  LC_ASSIGN_OR_RETURN(const PutArgs put, request());
  LC_ASSIGN_OR_RETURN(const PutTicket ticket, puts_->Reserve(put.request, put.dense));
  // From here every failure aborts the put: it is never visible and its memory comes back.
  auto fail = [&](const absl::Status& st) {
    puts_->Abort(ticket.id).IgnoreError();
    return st;
  };
  if (length != ticket.expected_bytes) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("length ", length, " is not the put's ", ticket.expected_bytes, " bytes")));
  }
  clock.Lap(TransferPhase::kOpen);
  // Compact blobs in engine device memory that the service's device maps (CUDA IPC) go into a
  // reservation in the GPU tier of that device device to device, one batch of copies, and the
  // commit checks them where they lie (a unit digest kernel): the bytes never cross to the host.
  // The engine's CRC is the commit's. Reservations elsewhere take the staged path below.
  const transport::RemoteRegion::Mapping mapped = region->mapping();
  if (!received_first && ticket.state_bytes == 0 && mapped.data != nullptr &&
      mapped.device == options_.cuda_device && options_.cuda_device >= 0) {
    bool on_device = false;
    const absl::Status written = puts_->WriteInPlace(
        ticket.id, [&](const core::CheckpointStore::UnitAddresses& at) -> absl::Status {
          if (at.cuda_device != options_.cuda_device) return absl::OkStatus();
          on_device = true;
          std::vector<transport::TransferOp> ops;
          ops.reserve(at.units.size());
          for (size_t i = 0; i < at.units.size(); ++i) {
            ops.push_back({transport::Direction::kRead,
                           std::span<uint8_t>(at.units[i], ticket.unit_bytes),
                           offset + i * ticket.unit_bytes, transport::MemoryKind::kCuda});
          }
          return moved(s.connection->Execute(*region, ops, deadline));
        });
    if (!written.ok()) return fail(written);
    if (on_device) {
      clock.Lap(TransferPhase::kMove);
      if (times != nullptr) times->device_to_device = true;
      if (absl::Status st = puts_->Commit(ticket.id, crc32c); !st.ok()) return fail(st);
      clock.Lap(TransferPhase::kCommit);
      return absl::OkStatus();
    }
  }
  // Dense uploads take whole units per chunk.
  uint64_t chunk = options_.chunk_bytes;
  if (ticket.state_bytes > 0) {
    chunk = std::max<uint64_t>(1, chunk / ticket.unit_bytes) * ticket.unit_bytes;
  }
  if (!received_first) s.staging.resize(std::min<uint64_t>(chunk, length));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < length;) {
    if (call.is_cancelled()) return fail(absl::CancelledError("call cancelled"));
    const uint64_t n = std::min<uint64_t>(chunk, length - done);
    const std::span<uint8_t> bytes(s.staging.data() + (received_first ? done : 0), n);
    if (!received_first) {
      const transport::TransferOp op{transport::Direction::kRead, bytes, offset + done};
      if (absl::Status st = moved(s.connection->Execute(*region, {&op, 1}, deadline)); !st.ok()) {
        return fail(st);
      }
    }
    crc = Crc32cExtend(crc, bytes.data(), n);
    if (absl::Status st = puts_->Upload(ticket.id, done, bytes); !st.ok()) return fail(st);
    done += n;
  }
  clock.Lap(TransferPhase::kMove);
  if (crc != crc32c) {
    return fail(absl::DataLossError(absl::StrCat("crc32c ", crc32c, " does not match the ", length,
                                                 " bytes read (", crc, ")")));
  }
  if (absl::Status st = puts_->Commit(ticket.id, crc); !st.ok()) return fail(st);
  clock.Lap(TransferPhase::kCommit);
  return absl::OkStatus();
}

absl::Status DataPlane::Step(const DataPlaneCall& call, uint64_t session_id, uint64_t buffer_id,
                             uint64_t in_offset, std::span<uint8_t> in, uint64_t out_offset,
                             std::span<uint8_t> out, bool device_compute,
                             absl::FunctionRef<absl::Status(const StepVectors&)> compute) {
  LC_ASSIGN_OR_RETURN(EngineSessionTable::Use use, SessionFor(call, session_id));
  EngineSession& s = *use;
  absl::MutexLock lock(&s.mu);
  LC_RETURN_IF_ERROR(CheckTransferable(s));
  LC_ASSIGN_OR_RETURN(transport::RemoteRegion* const region, FindBuffer(s, buffer_id));
  LC_RETURN_IF_ERROR(CheckRange(region->descriptor(), in_offset, in.size(), "the step's inputs"));
  LC_RETURN_IF_ERROR(CheckRange(region->descriptor(), out_offset, out.size(), "the step's o"));
  // Kernels that step the buffer in place would read inputs that o overwrites.
  if (in_offset < out_offset + out.size() && out_offset < in_offset + in.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the step's o [", out_offset, ", +", out.size(),
                                                   ") overlaps its inputs [", in_offset, ", +",
                                                   in.size(), ")"));
  }
  const absl::Time deadline = TransferDeadline(call);
  auto moved = [&](const absl::Status& st) {
    if (!st.ok() && ConnectionLost(*s.connection, st)) sessions_.RemoveLocked(use.id(), s);
    return st;
  };
  // In place: the kernels read the engine's inputs and write its output where they are.
  const transport::RemoteRegion::Mapping mapped = region->mapping();
  if (device_compute && mapped.data != nullptr && mapped.device == options_.cuda_device) {
    LC_RETURN_IF_ERROR(moved(s.connection->health()));
    const absl::Status computed = compute({{mapped.data + in_offset, in.size()},
                                           {mapped.data + out_offset, out.size()},
                                           compute::Memory::kDevice});
    LC_RETURN_IF_ERROR(moved(s.connection->health()));
    return computed;
  }
  const transport::TransferOp read{transport::Direction::kRead, in, in_offset};
  LC_RETURN_IF_ERROR(moved(s.connection->Settle(deadline)));
  LC_RETURN_IF_ERROR(moved(s.connection->Execute(*region, {&read, 1}, deadline)));
  const absl::Status computed = compute({in, out, compute::Memory::kHost});
  if (!computed.ok() && !s.connection->two_sided()) return computed;
  // The engine waits for o before its next step: settle now rather than at the next call.
  const transport::TransferOp write{transport::Direction::kWrite, out, out_offset};
  LC_RETURN_IF_ERROR(moved(s.connection->Execute(*region, {&write, 1}, deadline)));
  LC_RETURN_IF_ERROR(moved(s.connection->Settle(deadline)));
  return computed;
}

}  // namespace leapcache::server
