#include "transport/nccl/nccl_peer_connection.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

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
    : link_(std::move(link)), unique_id_(std::move(unique_id)) {
  joiner_ = std::thread([this] {
    join_status_ = link_->WaitReady(absl::Now() + kJoinTime);
    joined_.Notify();
  });
}

NcclPeerConnection::~NcclPeerConnection() {
  link_->Cancel();
  joiner_.join();
}

absl::Status NcclPeerConnection::Joined(absl::Time deadline) {
  if (!joined_.WaitForNotificationWithDeadline(deadline)) {
    return absl::DeadlineExceededError("the engine has not joined the NCCL communicator");
  }
  return join_status_;
}

absl::Status NcclPeerConnection::health() const {
  // While the join runs, the link belongs to its thread; the engine has not failed anything yet.
  if (!joined_.HasBeenNotified()) return absl::OkStatus();
  LC_RETURN_IF_ERROR(join_status_);
  return link_->health();
}

absl::Status NcclPeerConnection::Settle(absl::Time deadline) {
  LC_RETURN_IF_ERROR(Joined(deadline));
  return link_->Wait(deadline);
}

absl::StatusOr<std::unique_ptr<RemoteRegion>> NcclPeerConnection::Import(
    const BufferDescriptor& d) {
  LC_RETURN_IF_ERROR(ValidateDescriptor(d, TransportKind::kNccl, {false, CudaAccess::kDirect}));
  return std::unique_ptr<RemoteRegion>(new NcclRegion(d));
}

absl::Status NcclPeerConnection::Execute(RemoteRegion& region, std::span<const TransferOp> ops,
                                         absl::Time deadline) {
  LC_RETURN_IF_ERROR(ValidateTransfers(region.descriptor(), ops, /*takes_device_memory=*/true));
  if (!ops.empty() && ops[0].local_memory == MemoryKind::kCuda) {
    return SendFromDevice(ops, deadline);
  }
  if (ops.size() != 1 || ops[0].local_memory != MemoryKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an NCCL transfer list holds one op (the transfer the engine matches), not ", ops.size()));
  }
  const TransferOp& op = ops[0];
  // The previous get's send must be taken before its staging memory is reused.
  LC_RETURN_IF_ERROR(Settle(deadline));
  LC_ASSIGN_OR_RETURN(void* const staging, link_->Scratch(op.local.size()));
  if (op.direction == Direction::kRead) {
    LC_RETURN_IF_ERROR(link_->PostRecv(staging, op.local.size(), deadline));
    return link_->CopyToHost(op.local.data(), staging, op.local.size(), deadline);
  }
  LC_RETURN_IF_ERROR(link_->CopyToDevice(staging, op.local.data(), op.local.size(), deadline));
  return link_->PostSend(staging, op.local.size(), deadline);
}

absl::Status NcclPeerConnection::SendFromDevice(std::span<const TransferOp> ops,
                                                absl::Time deadline) {
  // Writes that tile one range of the engine's buffer in order: the one send it matches.
  std::vector<DeviceCopy> copies;
  copies.reserve(ops.size());
  size_t total = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const TransferOp& op = ops[i];
    if (op.local_memory != MemoryKind::kCuda || op.direction != Direction::kWrite ||
        op.remote_offset != ops[0].remote_offset + total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an NCCL transfer list of device memory holds writes that follow each other in the "
          "engine's buffer; transfer ",
          i, " does not"));
    }
    copies.push_back({op.local.data(), nullptr, op.local.size()});
    total += op.local.size();
  }
  LC_RETURN_IF_ERROR(Settle(deadline));
  LC_ASSIGN_OR_RETURN(void* const staging, link_->Scratch(total));
  size_t at = 0;
  for (DeviceCopy& c : copies) {
    c.dst = static_cast<uint8_t*>(staging) + at;
    at += c.bytes;
  }
  LC_RETURN_IF_ERROR(link_->CopyOnDevice(copies, deadline));
  return link_->PostSend(staging, total, deadline);
}

}  // namespace leapcache::transport
