// The service's side of an NCCL session: a PeerConnection over an NcclLink (rank 0) with a
// device staging buffer on the service's GPU. The engine joins within kJoinTime of the Attach
// that created the connection, or the connection fails its transfers (DEADLINE_EXCEEDED). A get's bytes are copied into the staging buffer
// and sent in one ncclSend that the engine matches once it has the RPC's answer (two_sided():
// Execute posts, Settle waits); a put's bytes are received into the staging buffer in one
// ncclRecv matching the engine's send, then copied out. The staging buffer is the link's scratch
// memory (NcclLink::Scratch), so ending a session never waits on an aborted transfer. The engine's buffers are never
// addressed from here: a region is only its descriptor, for range checks.
// Built only with NCCL (LEAPCACHE_TRANSPORT_NCCL).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "transport/nccl/nccl_link.h"
#include "transport/transport.h"

namespace leapcache::transport {

class NcclPeerConnection final : public PeerConnection {
 public:
  static constexpr absl::Duration kJoinTime = absl::Seconds(60);

  // Creates the communicator's id and starts joining it as the service on CUDA device `device`.
  // `engine_pid`: the engine's process if it runs on this host (its exit fails transfers at
  // once), else 0.
  static absl::StatusOr<std::unique_ptr<NcclPeerConnection>> Create(int device, pid_t engine_pid);
  // Cancels a join still running and waits for its thread.
  ~NcclPeerConnection() override;

  TransportKind kind() const override { return TransportKind::kNccl; }
  // Device memory of the engine only (INVALID_ARGUMENT for host memory).
  absl::StatusOr<std::unique_ptr<RemoteRegion>> Import(const BufferDescriptor& descriptor) override;
  absl::Status Execute(RemoteRegion& region, std::span<const TransferOp> ops,
                       absl::Time deadline) override;
  absl::Status health() const override;
  bool two_sided() const override { return true; }
  // A get's blobs on the service's GPU (its GPU tier) are gathered on the device into the
  // staging buffer and sent from there, never through the host.
  bool takes_device_memory() const override { return true; }
  absl::Status Settle(absl::Time deadline) override;
  std::string connection_info() const override { return unique_id_; }

 private:
  NcclPeerConnection(std::unique_ptr<NcclLink> link, std::string unique_id);
  // Waits (up to `deadline`) for the join started at creation; its result.
  absl::Status Joined(absl::Time deadline);
  // Execute of device-memory ops: writes that follow each other in the engine's buffer,
  // gathered into the staging buffer and posted as one send.
  absl::Status SendFromDevice(std::span<const TransferOp> ops, absl::Time deadline);

  std::unique_ptr<NcclLink> link_;
  const std::string unique_id_;
  // The engine joins after it has Attach's answer, so the service's side of the join and
  // handshake (NcclLink::WaitReady) runs on this thread; the link is used only once `joined_`.
  std::thread joiner_;
  absl::Notification joined_;
  absl::Status join_status_;  // written by joiner_ before joined_ is notified
};

}  // namespace leapcache::transport
