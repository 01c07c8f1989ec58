// The backend interface: what every data-plane transport provides to the service and to the
// engine's client library, and the one table of the backends this build has.
//
// A backend has two sides. The service makes each backend's ServiceBackend once, at start; at an
// engine's Attach it picks, in the table's order, the first backend the engine offered that can
// serve it (ServiceBackend::CanServe) and connects to the engine (transport.h's PeerConnection,
// which then runs every transfer). The engine makes an EngineBackend for each backend it offers;
// the one the service chose stays for the session: it registers the engine's buffers, and around
// each transfer call it does the engine's half (a two-sided backend posts its sends and
// receives; a one-sided one keeps its worker progressing, or does nothing).
//
// Optional methods default to what a one-sided, host-and-device-agnostic backend needs, so a
// backend overrides only what it has. Nothing outside a backend's folder names its classes: the
// service and the client hold no per-backend code and no build switch; they go through this
// interface and Backends(). Adding a backend is one folder and one line in backends.cc
// (transport/README.md lists the rest: its wire enum value and its CMake block).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/transport.h"

namespace leapcache::transport {

// What the engine's Attach offers for one backend.
struct Offer {
  TransportKind kind = TransportKind::kInline;
  // What the service needs to reach the engine (UCX: the engine's worker address).
  std::string connection_info;
  // Whether the engine can register CUDA device memory for this backend.
  bool cuda_memory = false;
};

// What the service knows of the attaching engine.
struct PeerInfo {
  std::string host;  // its host name; same_host when it is the service's
  bool same_host = false;
  pid_t pid = 0;
  std::string gpu_uuid;  // its GPU ("GPU-..."), empty if it named none
};

// The service's settings every backend may read.
struct ServiceSettings {
  std::string ucx_transports;  // UCX_TLS of the service's UCX context; empty: UCX's choice
  int cuda_device = 0;         // the service's GPU
};

// The service's side of one backend.
class ServiceBackend {
 public:
  virtual ~ServiceBackend() = default;
  // OK if the backend is usable in this process, else why not (built without it, no device,
  // its library failed to start). An unusable backend is never chosen.
  virtual absl::Status status() const = 0;
  // The memory the service's transfers reach in an engine's registered buffers.
  virtual Capabilities capabilities() const = 0;
  // Whether this backend can serve the engine that made `offer` (CUDA IPC: a process on this
  // host with CUDA memory; NCCL: another GPU than the service's).
  virtual bool CanServe(const Offer& offer, const PeerInfo& peer) const = 0;
  // The service's connection to the engine; nullptr for an in-band backend (its bytes travel
  // in the RPCs). INVALID_ARGUMENT for a bad offer, UNAVAILABLE if the engine is unreachable.
  virtual absl::StatusOr<std::unique_ptr<PeerConnection>> Connect(const Offer& offer,
                                                                  const PeerInfo& peer) = 0;
};

// The engine's settings every backend may read.
struct EngineSettings {
  std::string ucx_transports;  // UCX_TLS of the engine's UCX context; empty: UCX's choice
  int gpu_index = -1;          // the engine's CUDA device; -1: the current one where needed
  std::string gpu_uuid;        // the engine's GPU by UUID, if the engine named it
};

// A buffer the engine registered with a backend. Its memory must outlive it.
class EngineBuffer {
 public:
  virtual ~EngineBuffer() = default;
  // What the service imports (RegisterBuffer); nullopt for an in-band backend.
  virtual std::optional<BufferDescriptor> descriptor() const = 0;
  // Where the service's transfers land and are read from: the buffer itself, or the pinned host
  // buffer that stands in for device memory the backend cannot reach (staged()).
  virtual uint8_t* transfer_base() const = 0;
  virtual bool staged() const { return false; }
};

// The engine's side of one backend, for one attach.
class EngineBackend {
 public:
  virtual ~EngineBackend() = default;
  virtual TransportKind kind() const = 0;
  // The offer's fields.
  virtual std::string connection_info() const { return {}; }
  virtual bool cuda_memory() const = 0;
  // The engine's GPU as the offer must name it, where the backend needs it named (NCCL).
  virtual std::optional<std::string> gpu_uuid() const { return std::nullopt; }
  virtual int gpu_index() const { return -1; }
  // After the service chose this backend: completes the link with what the service answered
  // (NCCL: joins the communicator). UNAVAILABLE if it cannot.
  virtual absl::Status Join(const std::string& service_info, absl::Time deadline) {
    (void)service_info;
    (void)deadline;
    return absl::OkStatus();
  }
  // Registers [ptr, ptr + bytes) of `memory` (device memory already checked to be this
  // process's). FAILED_PRECONDITION for memory this backend cannot move.
  virtual absl::StatusOr<std::unique_ptr<EngineBuffer>> Register(void* ptr, size_t bytes,
                                                                 MemoryKind memory) = 0;

  // Whether transfers need the engine's Post to match the service's (NCCL's send/recv): such a
  // link moves one transfer per answered call, so its gets cannot be batched.
  virtual bool two_sided() const { return false; }
  // The engine's half of a transfer the service is about to run (two-sided backends): `send`
  // is what the service reads from the buffer's own memory, `receive` what it writes there.
  // Posts are answered by Wait; one-sided backends do nothing.
  virtual absl::Status Post(std::span<const uint8_t> send, std::span<uint8_t> receive,
                            absl::Time deadline) {
    (void)send;
    (void)receive;
    (void)deadline;
    return absl::OkStatus();
  }
  // Waits until what Post posted has completed (or aborts the link at `deadline`).
  virtual absl::Status Wait(absl::Time deadline) {
    (void)deadline;
    return absl::OkStatus();
  }
  // Runs `call`, an RPC during which the service moves bytes of a registered buffer (UCX: with
  // the engine's worker polling meanwhile).
  virtual absl::Status During(absl::FunctionRef<absl::Status()> call) { return call(); }
  // OK while the link can still carry transfers.
  virtual absl::Status health() const { return absl::OkStatus(); }
};

// One row of the table.
struct Backend {
  TransportKind kind = TransportKind::kInline;
  // Bytes travel inside the RPCs (inline): no descriptors, no connection.
  bool in_band = false;
  absl::StatusOr<std::unique_ptr<ServiceBackend>> (*make_service)(const ServiceSettings&) = nullptr;
  absl::StatusOr<std::unique_ptr<EngineBackend>> (*make_engine)(const EngineSettings&) = nullptr;
};

// Every backend of this build, in the service's order of preference: same-host GPU memory
// first, then GPU-to-GPU collectives, then RDMA/tcp/shared memory, then gRPC itself.
std::span<const Backend> Backends();
// The row of `kind`; nullptr if this build has no such backend.
const Backend* FindBackend(TransportKind kind);

}  // namespace leapcache::transport
