// The service's side of an NCCL session: a PeerConnection over an NcclLink (rank 0) with a
// device staging buffer on the service's GPU. A get's bytes are copied into the staging buffer
// and sent in one ncclSend that the engine matches once it has the RPC's answer (two_sided():
// Execute posts, Settle waits); a put's bytes are received into the staging buffer in one
// ncclRecv matching the engine's send, then copied out. The engine's buffers are never
// addressed from here: a region is only its descriptor, for range checks.
// Built only with NCCL (LEAPCACHE_TRANSPORT_NCCL).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "service/transport/nccl_link.h"
#include "service/transport/transport.h"

namespace leapcache::transport {

class NcclPeerConnection final : public PeerConnection {
 public:
  // Creates the communicator's id and starts joining it as the service on CUDA device `device`.
  // `engine_pid`: the engine's process if it runs on this host (its exit fails transfers at
  // once), else 0.
  static absl::StatusOr<std::unique_ptr<NcclPeerConnection>> Create(int device, pid_t engine_pid);
  ~NcclPeerConnection() override;

  TransportKind kind() const override { return TransportKind::kNccl; }
  // Device memory of the engine only (INVALID_ARGUMENT for host memory).
  absl::StatusOr<std::unique_ptr<RemoteRegion>> Import(const BufferDescriptor& descriptor) override;
  absl::Status Execute(RemoteRegion& region, std::span<const TransferOp> ops,
                       absl::Time deadline) override;
  absl::Status health() const override { return link_->health(); }
  bool two_sided() const override { return true; }
  absl::Status Settle(absl::Time deadline) override { return link_->Wait(deadline); }
  std::string connection_info() const override { return unique_id_; }

 private:
  NcclPeerConnection(std::unique_ptr<NcclLink> link, std::string unique_id);
  absl::Status Reserve(size_t bytes);

  std::unique_ptr<NcclLink> link_;
  const std::string unique_id_;
  void* staging_ = nullptr;  // device memory on link_->device(), staging_bytes_ long
  size_t staging_bytes_ = 0;
};

}  // namespace leapcache::transport
