// UcxPeerConnection: the service's UCX link to one attached engine: its own worker and an
// endpoint to the engine's worker address, with peer failure detection (UCP_ERR_HANDLING_MODE_
// PEER), so a transfer to an engine that died fails with UNAVAILABLE instead of hanging.
//
// Transfers are one-sided: ucp_put_nbx writes the service's bytes into the engine's registered
// buffer (gets), ucp_get_nbx reads the engine's bytes (puts), then an endpoint flush waits for
// remote completion. The connection's worker is progressed only by Execute, on the caller's
// thread, until every operation completed or the deadline passed.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_context.h"

namespace leapcache::transport {

class UcxPeerConnection final : public PeerConnection {
 public:
  // `context` must outlive the connection. `peer_address`: the engine's packed worker address
  // (UcxTargetWorker::address()); INVALID_ARGUMENT if empty, UNAVAILABLE if UCX cannot make an
  // endpoint to it.
  static absl::StatusOr<std::unique_ptr<UcxPeerConnection>> Connect(
      UcxContext* context, const std::string& peer_address);
  ~UcxPeerConnection() override;

  TransportKind kind() const override { return TransportKind::kUcx; }
  absl::StatusOr<std::unique_ptr<RemoteRegion>> Import(const BufferDescriptor& descriptor) override;
  absl::Status Execute(RemoteRegion& region, std::span<const TransferOp> ops,
                       absl::Time deadline) override;
  absl::Status health() const override;

 private:
  UcxPeerConnection(UcxContext* context, ucp_worker_h worker);
  static void OnPeerError(void* self, ucp_ep_h ep, ucs_status_t status);
  // Closes the endpoint without waiting for the peer, completing every request in flight with
  // an error; the connection is dead afterwards.
  void ForceClose();

  UcxContext* const context_;
  ucp_worker_h worker_;
  ucp_ep_h ep_ = nullptr;
  ucs_status_t peer_status_ = UCS_OK;  // set by OnPeerError, from Execute's thread
  bool closed_ = false;
};

}  // namespace leapcache::transport
