#include "service/transport/nccl_peer_connection.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "service/core/status_util.h"

namespace leapcache::transport {
namespace {

class NcclRegion final : public RemoteRegion {
 public:
  explicit NcclRegion(BufferDescriptor d) : descriptor_(std::move(d)) {}
  const BufferDescriptor& descriptor() const override { return descriptor_; }

 private:
  BufferDescriptor descriptor_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclPeerConnection>> NcclPeerConnection::Create(int device,
                                                                                pid_t engine_pid) {
  LC_ASSIGN_OR_RETURN(std::string id, NcclLink::NewUniqueId());
  LC_ASSIGN_OR_RETURN(std::unique_ptr<NcclLink> link,
                      NcclLink::Start(id, NcclLink::kServiceRank, device, engine_pid));
  return std::unique_ptr<NcclPeerConnection>(
      new NcclPeerConnection(std::move(link), std::move(id)));
}

NcclPeerConnection::NcclPeerConnection(std::unique_ptr<NcclLink> link, std::string unique_id)
    : link_(std::move(link)), unique_id_(std::move(unique_id)) {}

NcclPeerConnection::~NcclPeerConnection() {
  const int device = link_->device();
  link_.reset();  // aborts anything in flight before its staging memory goes
  if (staging_ != nullptr) {
    cudaSetDevice(device);
    cudaFree(staging_);
  }
}

absl::StatusOr<std::unique_ptr<RemoteRegion>> NcclPeerConnection::Import(
    const BufferDescriptor& d) {
  LC_RETURN_IF_ERROR(ValidateDescriptor(d, TransportKind::kNccl, {false, CudaAccess::kDirect}));
  LC_RETURN_IF_ERROR(health());
  return std::unique_ptr<RemoteRegion>(new NcclRegion(d));
}

absl::Status NcclPeerConnection::Reserve(size_t bytes) {
  if (bytes <= staging_bytes_) return absl::OkStatus();
  cudaSetDevice(link_->device());
  if (staging_ != nullptr) cudaFree(staging_);
  staging_ = nullptr;
  staging_bytes_ = 0;
  if (cudaError_t e = cudaMalloc(&staging_, bytes); e != cudaSuccess) {
    cudaGetLastError();
    staging_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat("NCCL staging of ", bytes,
                                                     " bytes on the service's GPU: ",
                                                     cudaGetErrorString(e)));
  }
  staging_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status NcclPeerConnection::Execute(RemoteRegion& region, std::span<const TransferOp> ops,
                                         absl::Time deadline) {
  LC_RETURN_IF_ERROR(ValidateTransfers(region.descriptor(), ops));
  if (ops.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an NCCL transfer list holds one op (the transfer the engine matches), not ", ops.size()));
  }
  const TransferOp& op = ops[0];
  // The previous get's send must be taken before its staging memory is reused.
  LC_RETURN_IF_ERROR(link_->Wait(deadline));
  LC_RETURN_IF_ERROR(Reserve(op.local.size()));
  if (op.direction == Direction::kRead) {
    LC_RETURN_IF_ERROR(link_->PostRecv(staging_, op.local.size(), deadline));
    return link_->CopyToHost(op.local.data(), staging_, op.local.size(), deadline);
  }
  LC_RETURN_IF_ERROR(link_->CopyToDevice(staging_, op.local.data(), op.local.size(), deadline));
  return link_->PostSend(staging_, op.local.size(), deadline);
}

}  // namespace leapcache::transport
