// The data-plane transport interface: how checkpoint bytes move between the service's memory and
// an attached engine's registered buffers without passing through gRPC messages.
//
// Roles. Both sides link this library. The engine registers its buffers (Transport::Register)
// and sends their descriptors to the service over gRPC; the service opens one PeerConnection per
// attached engine, imports the descriptors (PeerConnection::Import) and executes every transfer:
// on a get it writes into the engine's buffer, on a put it reads from it. Because the service
// drives every transfer, an engine that dies mid-transfer is a failed transfer on the service's
// side (the put is never committed, the get's lease is released), never a hang.
//
// Descriptors are validated before anything moves: a transfer list that leaves its region, an
// empty span, a region of the wrong transport or memory kind gets INVALID_ARGUMENT / OUT_OF_RANGE
// naming the operation, and no byte is transferred.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace leapcache::transport {

// Values match leapcache.v1.TransportKind on the wire.
enum class TransportKind : uint8_t { kInline = 1, kUcx = 2, kNccl = 3, kCudaIpc = 4 };
absl::string_view TransportName(TransportKind kind);

// Where a buffer lives, as its owner sees it. Values match leapcache.v1.MemoryKind.
enum class MemoryKind : uint8_t { kHost = 1, kCuda = 2 };
absl::string_view MemoryKindName(MemoryKind kind);

// How a transport reaches CUDA device memory.
enum class CudaAccess : uint8_t {
  kNone,    // not at all
  kStaged,  // through registered pinned host memory, copied to/from the device by its owner
  kDirect,  // the transport reads and writes device memory itself
};

struct Capabilities {
  bool host = false;
  CudaAccess cuda = CudaAccess::kNone;
};

// What a peer needs to reach a registered buffer. `address` is the buffer's start in its
// owner's address space (UCX: the virtual address the rkey covers); `key` is the transport's
// opaque access token (UCX: the packed rkey). `memory` is the kind of memory the peer's
// transfers touch: a CUDA buffer staged through pinned host memory is described as kHost.
struct BufferDescriptor {
  TransportKind transport = TransportKind::kInline;
  MemoryKind memory = MemoryKind::kHost;
  uint64_t address = 0;
  uint64_t bytes = 0;
  std::string key;
};

// Direction of one transfer, seen from the side that executes it (the service).
enum class Direction : uint8_t {
  kWrite,  // local span -> peer's region (a get: checkpoint bytes into the engine's buffer)
  kRead,   // peer's region -> local span (a put: the engine's bytes into the service)
};

// One transfer: `local` (the executing side's memory) <-> [remote_offset, + local.size()) of
// the peer's region.
struct TransferOp {
  Direction direction = Direction::kWrite;
  std::span<uint8_t> local;
  uint64_t remote_offset = 0;
  // kCuda: `local` is device memory of the executing side's CUDA device (its current device),
  // for connections that take it (PeerConnection::takes_device_memory).
  MemoryKind local_memory = MemoryKind::kHost;
};

// Checks a descriptor received from a peer: the transport and memory kinds are ones this side
// `accepts`, the range does not wrap, the key is present where the transport needs one.
absl::Status ValidateDescriptor(const BufferDescriptor& descriptor, TransportKind expected,
                                const Capabilities& accepts);
// Checks a transfer list against the region it targets: every op non-empty, with a local span,
// and inside the region (OUT_OF_RANGE naming the op otherwise); local device memory only where
// the connection takes it (INVALID_ARGUMENT otherwise).
absl::Status ValidateTransfers(const BufferDescriptor& region, std::span<const TransferOp> ops,
                               bool takes_device_memory = false);

// Local memory registered with a transport; unregistered when destroyed. Must not outlive the
// Transport that made it.
class Registration {
 public:
  virtual ~Registration() = default;
  virtual const BufferDescriptor& descriptor() const = 0;
};

// A peer's buffer imported into a connection (UCX: its unpacked rkey). Must be destroyed before
// the connection that imported it.
class RemoteRegion {
 public:
  virtual ~RemoteRegion() = default;
  virtual const BufferDescriptor& descriptor() const = 0;

  // The peer's buffer as this process addresses it on one of its CUDA devices, where the
  // transport maps it in place (CUDA IPC): kernels on `device` may then read and write the
  // buffer directly instead of moving its bytes with Execute. {nullptr, -1} where only Execute
  // reaches it. The caller checks its ranges against descriptor() and the connection's health()
  // before each use, as Execute does.
  struct Mapping {
    uint8_t* data = nullptr;
    int device = -1;
  };
  virtual Mapping mapping() const { return {}; }
};

// The executing side's link to one peer. Not for concurrent use: callers serialize Execute on
// one connection (the service runs one transfer per engine session at a time).
class PeerConnection {
 public:
  virtual ~PeerConnection() = default;
  virtual TransportKind kind() const = 0;
  // INVALID_ARGUMENT for a descriptor this connection cannot reach.
  virtual absl::StatusOr<std::unique_ptr<RemoteRegion>> Import(
      const BufferDescriptor& descriptor) = 0;
  // Runs every op and returns when all have completed at the peer (writes visible in its
  // memory, reads landed in `local`), or with the first failure: UNAVAILABLE once the peer is
  // gone (and for every later call: the connection is dead), DEADLINE_EXCEEDED past `deadline`
  // (the connection is closed, since transfers in flight cannot be recalled), INVALID_ARGUMENT /
  // OUT_OF_RANGE for a bad list (nothing moved). After a failure the peer's region may hold a
  // partial write; `local` spans of reads hold unspecified bytes.
  virtual absl::Status Execute(RemoteRegion& region, std::span<const TransferOp> ops,
                               absl::Time deadline) = 0;
  // Whether Execute takes ops whose local memory is on the executing side's CUDA device (CUDA
  // IPC: device to device, never through the host).
  virtual bool takes_device_memory() const { return false; }
  // OK while the peer is reachable as far as this side knows.
  virtual absl::Status health() const = 0;

  // Two-sided transports (NCCL): the peer posts the matching receive or send itself, and for a
  // write it can do so only once it has the call's answer. So an Execute of one write returns
  // once the bytes are staged and posted (`local` may be reused at once), and Settle waits until
  // the peer has taken them; the caller settles before the connection's next use. A list holds
  // exactly one op, the whole transfer the peer posts to match. One-sided transports complete
  // in Execute and settle at once.
  virtual bool two_sided() const { return false; }
  virtual absl::Status Settle(absl::Time deadline) {
    (void)deadline;
    return absl::OkStatus();
  }
  // What the engine needs from the service to join the connection (NCCL: the communicator's
  // unique id); empty where the service connects to the engine.
  virtual std::string connection_info() const { return {}; }
};

}  // namespace leapcache::transport
