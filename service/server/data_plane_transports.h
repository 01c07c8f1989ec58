// DataPlaneTransports: the transports this service can run data-plane sessions over, the choice
// among an engine's offers (data_plane.proto: cuda_ipc, nccl, ucx, inline, first available on
// both sides), and connecting to the engine over the chosen one.
//
// Inline is always available. UCX is available when built (LEAPCACHE_TRANSPORT_UCX) and its
// context initialises at start; otherwise ucx_status() says why. CUDA IPC is available when
// built with CUDA (LEAPCACHE_TRANSPORT_CUDA) and a device is present at start, and is chosen
// only for an engine on this host (its identity's host name is this machine's) that offers CUDA
// memory. NCCL is available when built (LEAPCACHE_TRANSPORT_NCCL) and `cuda_device` exists at
// start; it is chosen only for an engine that offers CUDA memory and names its GPU by UUID, on
// another GPU than the service's (NCCL cannot put both ranks of a communicator on one GPU).
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "service/transport/transport.h"

namespace leapcache::server {

struct TransportOfferInfo {
  transport::TransportKind kind = transport::TransportKind::kInline;
  std::string connection_info;
  bool cuda_memory = false;
};

class DataPlaneTransports {
 public:
  // `ucx_transports`: UCX_TLS for the service's context; empty for UCX's choice.
  // `cuda_device`: the service's GPU for NCCL sessions.
  static std::unique_ptr<DataPlaneTransports> Create(const std::string& ucx_transports,
                                                     int cuda_device);
  ~DataPlaneTransports();

  bool Available(transport::TransportKind kind) const;
  transport::Capabilities capabilities(transport::TransportKind kind) const;
  // OK if UCX is usable, else why not.
  const absl::Status& ucx_status() const { return ucx_status_; }

  // The preferred offer both sides support for an engine on `engine_host` whose GPU is
  // `engine_gpu_uuid` (empty: none named); FAILED_PRECONDITION if none.
  absl::StatusOr<TransportOfferInfo> Choose(std::span<const TransportOfferInfo> offers,
                                            const std::string& engine_host,
                                            const std::string& engine_gpu_uuid) const;
  // The service's connection to the engine process `engine_pid` on `engine_host` for `offer`
  // (nullptr for inline). UNAVAILABLE if it cannot be made; INVALID_ARGUMENT for missing
  // connection info.
  absl::StatusOr<std::unique_ptr<transport::PeerConnection>> Connect(
      const TransportOfferInfo& offer, pid_t engine_pid, const std::string& engine_host) const;

 private:
  DataPlaneTransports();
  struct Ucx;
  std::unique_ptr<Ucx> ucx_;
  absl::Status ucx_status_;
  bool cuda_ipc_ = false;
  bool nccl_ = false;
  int cuda_device_ = 0;
  std::string cuda_device_uuid_;  // of cuda_device_, where NCCL is available
  std::string host_;  // this machine's host name
};

}  // namespace leapcache::server
