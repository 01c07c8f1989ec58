// leapcache data plane, engine side: attach to the service and move checkpoints straight into
// and out of the engine's own buffers (host or CUDA memory) over UCX, CUDA IPC or NCCL, instead
// of through gRPC messages (proto/leapcache/v1/data_plane.proto).
//
//   auto engine = leapcache::client::AttachedEngine::Attach(
//       {.target = "10.0.0.5:7470"}, {.name = "vllm-0", .gpu_index = 0});
//   auto buf = (*engine)->RegisterBuffer(state_slots, slot_bytes, MemoryKind::kCuda);
//   auto got = (*engine)->GetInto({.namespace_id = ns, .hash = chain[hit.index],
//                                  .dense = DenseEncoding{DType::kBf16, Layout::kVK}},
//                                 *buf, /*offset=*/0);
//   (*engine)->PutFrom(target, DenseEncoding{DType::kBf16, Layout::kVK}, *buf, 0, bytes);
//
// Contracts:
//  - Attach offers the transports of AttachOptions; the service picks one (cuda_ipc, nccl, ucx,
//    inline: the first both sides have) and transport() says which. On inline, GetInto and
//    PutFrom use StateCache's Get and put RPCs behind the same API, so callers need not care.
//  - The service drives every transfer: it writes a get into the registered buffer and reads a
//    put from it while the call runs, so the engine's buffer must stay untouched during a call.
//    GetInto checks the bytes that landed against the service's CRC-32C (DATA_LOSS otherwise);
//    PutFrom sends the CRC-32C of its bytes, and a put that fails is never visible.
//  - CUDA IPC (offer kCudaIpc; chosen for an engine on the service's host): the service maps
//    the engine's registered device buffers and copies into and out of them itself; such a
//    session takes device buffers only.
//  - NCCL (offer kNccl; chosen for an engine on another GPU than the service's): the engine
//    joins the service's two-rank communicator at Attach on its GPU (identity.gpu_index, else
//    the current device; its UUID is sent as identity.gpu_uuid). GetInto receives the checkpoint
//    with one ncclRecv after the service answered; PutFrom posts one ncclSend before calling.
//    Such a session takes device buffers of that GPU only. If the link aborts (a transfer
//    passed its deadline), later calls fail with UNAVAILABLE: attach again.
//  - CUDA buffers: if the transport cannot reach device memory (Debian's UCX), each registered
//    device buffer gets a pinned host staging buffer of the same size, registered in its place;
//    GetInto copies it to the device after the transfer, PutFrom from the device before it.
//    Without CUDA in this build, registering kCuda memory is FAILED_PRECONDITION.
//  - Transfer channel (AttachOptions::transfer_channel; data_plane.proto, OpenTransferChannel):
//    by default the first transfer asks for one; on the service's host GetInto and PutFrom then
//    go through a shared-memory mailbox instead of the Transfer RPCs (the same checks and
//    answers, without a loopback RPC's cost); elsewhere, or where the service serves none, they
//    keep to the RPCs. A channel that breaks is asked for again at the next transfer.
//  - The session is kept alive by a background keepalive and ends with Detach() or the
//    destructor. Errors are the service's (data_plane.proto) as absl::Status.
//  - Thread-safe; calls of one engine are serialized (the service runs one per session).
// No generated protobuf, gRPC or UCX types appear here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "leapcache/client.h"

namespace leapcache::client {

// Values match leapcache.v1.TransportKind.
enum class Transport { kInline = 1, kUcx = 2, kNccl = 3, kCudaIpc = 4 };
enum class MemoryKind { kHost = 1, kCuda = 2 };

struct EngineIdentity {
  std::string name;      // required
  std::string host;      // empty: this machine's host name
  uint32_t pid = 0;      // 0: this process
  std::string gpu_uuid;  // the engine's GPU, if any
  int gpu_index = -1;    // CUDA device index; -1: none
};

// How GetInto and PutFrom reach the service (data_plane.proto, OpenTransferChannel).
enum class TransferChannel {
  kAuto,          // the shared-memory transfer channel where the service offers one on this host
  kRpc,           // always the TransferGet and TransferPut RPCs
  kSharedMemory,  // the channel or nothing: a transfer fails if it cannot be had
};

struct AttachOptions {
  // Offered to the service; it applies its own preference.
  std::vector<Transport> transports = {Transport::kUcx, Transport::kInline};
  // UCX_TLS of the engine's UCX context ("tcp", "rc,sm", ...); empty: UCX's choice.
  std::string ucx_transports;
  // Idle time after which the service ends the session; the keepalive runs at a third of it.
  absl::Duration session_ttl = absl::Seconds(60);
  TransferChannel transfer_channel = TransferChannel::kAuto;
  // How long a transfer through the channel polls for its reply before it sleeps (it polls again
  // each time it wakes): polling keeps the wake-up out of the transfer's latency.
  absl::Duration channel_spin = absl::Milliseconds(10);
};

using BufferId = uint64_t;

// What GetInto wrote: the checkpoint's description (as client.h's Checkpoint, without bytes).
struct TransferredCheckpoint {
  Position position;
  HeadRange heads;
  int first_layer = 0;  // the bytes hold layers [first_layer, first_layer + layers)
  int layers = 0;
  int dk = 0;
  int dv = 0;
  StateKind kind = StateKind::kGdn;
  StorageFormat format;
  uint64_t blob_bytes = 0;
  uint64_t state_bytes = 0;  // dense only
  uint64_t side_bytes = 0;   // of every unit (client.h, Checkpoint)
  uint64_t total_bytes = 0;  // bytes written at the offset
  std::optional<DenseEncoding> dense;
  uint32_t crc32c = 0;
  // Who checked the bytes where they landed: false, this client (against the service's CRC of
  // what it sent); true, the service, which wrote them into the buffer on its own GPU and
  // checksummed them there (a dense get decoded in place over CUDA IPC).
  bool checked_by_service = false;
};

// One get of a batch (AttachedEngine::GetBatch): the checkpoint (or its head and layer range)
// into `buffer` at `offset`.
struct GetItem {
  GetRequest request{};
  BufferId buffer = 0;
  uint64_t offset = 0;
};
inline constexpr size_t kMaxGetBatch = 4096;

class AttachedEngine {
 public:
  // INVALID_ARGUMENT for bad options or identity; UNAVAILABLE if the service cannot be reached;
  // FAILED_PRECONDITION if no offered transport is available on both sides.
  static absl::StatusOr<std::unique_ptr<AttachedEngine>> Attach(const ClientOptions& options,
                                                                const EngineIdentity& identity,
                                                                const AttachOptions& attach = {});
  // Detaches (errors ignored) and releases every registration.
  ~AttachedEngine();
  AttachedEngine(const AttachedEngine&) = delete;
  AttachedEngine& operator=(const AttachedEngine&) = delete;

  Transport transport() const;
  uint64_t session_id() const;
  // The underlying StateCache client (lookups, namespaces, stats) on the same target.
  Client& client();

  // Registers [ptr, ptr + bytes) (host or CUDA memory of this process) for transfers.
  // INVALID_ARGUMENT for a null or empty buffer or one that is not of `memory` kind.
  absl::StatusOr<BufferId> RegisterBuffer(void* ptr, size_t bytes, MemoryKind memory);
  // NOT_FOUND for an unknown buffer.
  absl::Status ReleaseBuffer(BufferId buffer);

  // Transfers on a namespace registered through client() carry its tag (client.h).
  // Writes the checkpoint (compact blobs, or dense states if request.dense) at `offset` of the
  // buffer. OUT_OF_RANGE if it does not fit; the service's errors otherwise.
  absl::StatusOr<TransferredCheckpoint> GetInto(const GetRequest& request, BufferId buffer,
                                                uint64_t offset);
  // 1..kMaxGetBatch gets in as few calls as the transport allows: a scheduler step's
  // checkpoints, or each layer of one (GetRequest::layers) into the page the engine keeps for
  // it. results[i] answers items[i] exactly as GetInto would (a bad or missing one fails alone,
  // checked before anything is sent where it can be). Through the transfer channel a call
  // carries as many gets as the mailbox holds answers for (128 at 64 KiB), over the RPC up to
  // 4096; NCCL and inline gRPC run one get per call. The outer status: a batch of no or too
  // many gets, or a detached engine.
  absl::StatusOr<std::vector<absl::StatusOr<TransferredCheckpoint>>> GetBatch(
      std::span<const GetItem> items);
  // Puts the `length` bytes at `offset` of the buffer: (layer, head)-ordered v1 blobs
  // (dense == nullopt) or dense states, as PutCompact / PutDense take them.
  absl::Status PutFrom(const PutTarget& target, const std::optional<DenseEncoding>& dense,
                       BufferId buffer, uint64_t offset, uint64_t length);

  // Client::LookupBatch's answers (and Lookup's, a batch of one), through the session's
  // transfer channel when it has one and the batch and its answers fit the mailbox (a lookup
  // then costs microseconds, not a loopback RPC), else over the RPC.
  absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> LookupBatch(
      std::span<const LookupRequest> requests);
  absl::StatusOr<LookupResult> Lookup(const LookupRequest& request);

  // Whether the last GetInto, PutFrom or lookup went through a transfer channel.
  bool transferring_through_channel() const;

  // Ends the session now. Later transfers fail with FAILED_PRECONDITION.
  absl::Status Detach();

 private:
  friend class DecodeSession;
  // For DecodeSession::StepInBuffer: runs `call` (one step on the decode stream, given this
  // session's id and the service's id of `buffer`) as a transfer of this engine, in which the
  // service reads `in_bytes` at `in_offset` of the buffer and writes `out_bytes` at
  // `out_offset`: the transport is progressed (UCX), staged (device buffers behind pinned host
  // memory) or posted (NCCL: the inputs' send and o's receive) around it.
  absl::Status RunStepTransfer(
      BufferId buffer, uint64_t in_offset, uint64_t in_bytes, uint64_t out_offset,
      uint64_t out_bytes,
      const std::function<absl::Status(uint64_t session, uint64_t remote_buffer)>& call);

  struct Impl;
  explicit AttachedEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leapcache::client
