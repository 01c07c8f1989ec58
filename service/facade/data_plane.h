// DataPlane: the service's side of data_plane.proto without gRPC: engine sessions (attach,
// keepalive, detach), the buffers they register, and the transfers between the store and those
// buffers (gets, puts, and the vectors of attached decode steps).
//
// Transfers reuse the StateCache paths: a get reads through CheckpointReader (compact or
// decoded, under its read lease) and a put goes through PutPipeline (reserve, upload with dense
// encoding, commit), so both services store and serve exactly the same bytes. Only the movement
// differs: the bytes go to or come from the engine's registered buffer over the session's
// transport connection instead of RPC messages. A checkpoint held in the GPU tier of the
// service's device goes to a connection that takes device memory (CUDA IPC, NCCL) without a trip
// through host memory; everything else goes through the session's staging memory.
//
// Every call names its caller: a session is its attaching tenant's (PERMISSION_DENIED for
// another's). The request's own checks (namespace, hash, heads) are the caller's, handed in as a
// function that runs once the session is found and its previous transfer settled, so a
// two-sided transport's posted bytes are matched whatever the checks then say.
// Thread-safe; calls on one session run one at a time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "service/core/checkpoint_store.h"
#include "service/facade/checkpoint_reader.h"
#include "service/facade/data_plane_transports.h"
#include "service/compute/compute.h"
#include "service/facade/engine_session_table.h"
#include "service/facade/put_pipeline.h"
#include "transport/transport.h"

namespace leapcache::server {

struct DataPlaneOptions {
  // UCX_TLS of the service's UCX context; empty: UCX's choice.
  std::string ucx_transports;
  // The service's GPU for NCCL sessions and the GPU tier (the server's gpu_device).
  int cuda_device = 0;
  // Idle time after which a session ends, when the engine asks for none, and the most it may ask.
  absl::Duration default_session_ttl = absl::Seconds(60);
  absl::Duration max_session_ttl = absl::Hours(1);
  // Longest a transfer call may run when its own deadline is later (a stalled engine must not
  // hold a lease or a reservation for longer).
  absl::Duration max_transfer_time = absl::Seconds(60);
  // Bytes moved per transport operation (the session's staging memory).
  uint64_t chunk_bytes = 16 << 20;
  // Dense gets' codec (service/compute), outliving the data plane; the CPU reference when null.
  compute::Compute* compute = nullptr;
  absl::Duration reap_interval = absl::Seconds(1);
};

// Where a transfer's time went on the service, phase by phase (wall time; a phase a transfer
// does not have stays zero). Exported as leapcache_data_plane_phase_seconds.
enum class TransferPhase {
  kSession,  // finding and locking the session, settling its previous two-sided transfer
  kOpen,     // the request's checks and the read lease (get) or the reservation (put)
  kList,     // the list of device blobs a get hands the transport
  kMove,     // the transport moving the bytes, and for a put the upload into the reservation
  kCommit,   // a put's checksum and commit
};
inline constexpr int kTransferPhases = 5;
const char* TransferPhaseName(TransferPhase phase);

struct TransferTimes {
  std::array<absl::Duration, kTransferPhases> phase{};
  // The bytes moved between the GPU tier and the engine's GPU memory without the host.
  bool device_to_device = false;
  absl::Duration& operator[](TransferPhase p) { return phase[static_cast<int>(p)]; }
  absl::Duration operator[](TransferPhase p) const { return phase[static_cast<int>(p)]; }
};

// What every call brings besides its arguments.
struct DataPlaneCall {
  std::string_view caller;                       // the authenticated tenant; empty without tokens
  absl::Time deadline = absl::InfiniteFuture();  // the call's own; capped by max_transfer_time
  std::function<bool()> cancelled;               // empty: never cancelled
  bool is_cancelled() const { return cancelled && cancelled(); }
};

struct AttachArgs {
  EngineIdentity identity;
  std::vector<transport::Offer> offers;
  absl::Duration ttl = absl::ZeroDuration();  // zero: DataPlaneOptions::default_session_ttl
};

struct Attached {
  uint64_t session_id = 0;
  transport::TransportKind transport = transport::TransportKind::kInline;
  absl::Duration ttl;
  std::string connection_info;  // the service's half of the link, for the engine's Join
  bool cuda_direct = false;     // the transport reaches the engine's device memory itself
};

// A put's target, checked by the caller (the namespace the caller's, the hash parsed).
struct PutArgs {
  core::PutRequest request;
  std::optional<compute::DenseFormat> dense;  // nullopt: compact blobs
};

// A get's answer: what the bytes at the buffer's offset are, and their CRC-32C.
struct GetResult {
  ReadShape shape;
  uint32_t crc32c = 0;
  // crc32c was computed over the bytes where they landed in the engine's buffer (written there
  // on the service's device), not over the bytes as sent.
  bool crc32c_of_landed = false;
};

class DataPlane {
 public:
  // `store` and `puts` must outlive the data plane. Makes the transports of `options`.
  DataPlane(core::CheckpointStore* store, PutPipeline* puts, const DataPlaneOptions& options);
  // ... over transports made before (they hold no session state: a context per backend), so
  // that data planes made and dropped often (the fuzz target's, one per input) share them.
  DataPlane(core::CheckpointStore* store, PutPipeline* puts, const DataPlaneOptions& options,
            std::shared_ptr<const DataPlaneTransports> transports);
  ~DataPlane();
  DataPlane(const DataPlane&) = delete;
  DataPlane& operator=(const DataPlane&) = delete;

  // Chooses a transport among the offers, starts the service's half of the link, and opens a
  // session of `call.caller`'s. INVALID_ARGUMENT for a bad name, no offers or a TTL over the
  // maximum; the transports' errors otherwise.
  absl::StatusOr<Attached> Attach(const DataPlaneCall& call, AttachArgs args);
  // NOT_FOUND for an unknown or ended session, PERMISSION_DENIED for another tenant's.
  absl::Status Keepalive(const DataPlaneCall& call, uint64_t session_id);
  absl::Status Detach(const DataPlaneCall& call, uint64_t session_id);
  // Imports an engine buffer into the session; its id within the session.
  absl::StatusOr<uint64_t> RegisterBuffer(const DataPlaneCall& call, uint64_t session_id,
                                          const transport::BufferDescriptor& buffer);
  absl::Status ReleaseBuffer(const DataPlaneCall& call, uint64_t session_id, uint64_t buffer_id);

  // Whether the session's gets may run as a batch answered once: FAILED_PRECONDITION over a
  // two-sided transport (its engine receives each get's bytes only once it has the answer, so a
  // second get would wait for the first forever); the session's errors as for Get.
  absl::Status CheckBatchable(const DataPlaneCall& call, uint64_t session_id);
  // Writes a checkpoint into the engine's buffer at `offset`. `request` parses and authorizes the
  // read once the session is settled. OUT_OF_RANGE if the bytes leave the buffer; the reader's,
  // the transport's and the request's errors otherwise. A transport failure that leaves the link
  // unusable (the engine gone, a transfer past its deadline) ends the session.
  absl::StatusOr<GetResult> Get(const DataPlaneCall& call, uint64_t session_id, uint64_t buffer_id,
                                uint64_t offset,
                                absl::FunctionRef<absl::StatusOr<ReadRequest>()> request,
                                TransferTimes* times);
  // Reads `length` bytes at `offset` of the engine's buffer into a new put and commits it if
  // their CRC-32C is `crc32c` (DATA_LOSS otherwise). A two-sided transport's bytes are received
  // first, before any check. Every failure aborts the put: it is never visible.
  absl::Status Put(const DataPlaneCall& call, uint64_t session_id, uint64_t buffer_id,
                   uint64_t offset, uint64_t length, uint32_t crc32c,
                   absl::FunctionRef<absl::StatusOr<PutArgs>()> request, TransferTimes* times);
  // A decode step whose vectors travel over the data plane (decode.proto, StepRequest.buffers):
  // under the session's lock, `compute` runs on the step's packed inputs and writes its output.
  // Where the engine's buffer is mapped on the service's device (CUDA IPC) and `device_compute`
  // (the decode session's backend takes device memory), it runs on the buffer in place: inputs
  // at `in_offset`, output at `out_offset`, device memory, no copy. Otherwise `in` (host
  // staging of the inputs' size) is read from the buffer first and `out` (of the output's size)
  // written to it after; over a two-sided transport `out` is written whenever `in` was read,
  // even if `compute` failed (the engine posted its receive). Errors: INVALID_ARGUMENT if the
  // output's range overlaps the inputs'; the session's and buffer's as for Get, then
  // `compute`'s.
  struct StepVectors {
    std::span<const uint8_t> in;
    std::span<uint8_t> out;
    compute::Memory memory = compute::Memory::kHost;
  };
  absl::Status Step(const DataPlaneCall& call, uint64_t session_id, uint64_t buffer_id,
                    uint64_t in_offset, std::span<uint8_t> in, uint64_t out_offset,
                    std::span<uint8_t> out, bool device_compute,
                    absl::FunctionRef<absl::Status(const StepVectors&)> compute);

  size_t sessions() const { return sessions_.size(); }
  const DataPlaneTransports& transports() const { return *transports_; }

 private:
  absl::Time TransferDeadline(const DataPlaneCall& call) const;
  // The session for a call: NOT_FOUND if unknown, PERMISSION_DENIED if another tenant's.
  absl::StatusOr<EngineSessionTable::Use> SessionFor(const DataPlaneCall& call,
                                                     uint64_t session_id);
  // The bytes of an open read into the buffer, by the fastest way the connection allows; true
  // when they were produced where they land and the reader's CRC is of them there.
  absl::StatusOr<bool> MoveGet(const DataPlaneCall& call, EngineSession& s,
                               transport::RemoteRegion& region, CheckpointReader& reader,
                               uint64_t base, absl::Time deadline, TransferTimes* times)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  core::CheckpointStore* const store_;
  PutPipeline* const puts_;
  const DataPlaneOptions options_;
  std::shared_ptr<const DataPlaneTransports> transports_;
  EngineSessionTable sessions_;
};

}  // namespace leapcache::server
