#include "transport/nccl/nccl_backend.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "transport/device/device_memory.h"
#include "transport/engine_buffer.h"
#include "transport/nccl/nccl_link.h"
#include "transport/nccl/nccl_peer_connection.h"

namespace leapcache::transport {
namespace {

class NcclService final : public ServiceBackend {
 public:
  explicit NcclService(int device) : device_(device) {
    absl::StatusOr<std::string> uuid = CudaDeviceUuid(device);
    if (uuid.ok()) {
      uuid_ = *std::move(uuid);
    } else {
      status_ = uuid.status();
    }
  }
  absl::Status status() const override { return status_; }
  Capabilities capabilities() const override {
    return status_.ok() ? Capabilities{false, CudaAccess::kDirect} : Capabilities{};
  }
  // NCCL moves device memory between two GPUs: never the service's own.
  bool CanServe(const Offer& offer, const PeerInfo& peer) const override {
    return status_.ok() && offer.cuda_memory && !peer.gpu_uuid.empty() && peer.gpu_uuid != uuid_;
  }
  absl::StatusOr<std::unique_ptr<PeerConnection>> Connect(const Offer&,
                                                          const PeerInfo& peer) override {
    LC_RETURN_IF_ERROR(status_);
    // The engine's process is watched where it is visible: on this host.
    LC_ASSIGN_OR_RETURN(std::unique_ptr<NcclPeerConnection> c,
                        NcclPeerConnection::Create(device_, peer.same_host ? peer.pid : 0));
    return std::unique_ptr<PeerConnection>(std::move(c));
  }

 private:
  const int device_;
  std::string uuid_;
  absl::Status status_;
};

class NcclEngine final : public EngineBackend {
 public:
  NcclEngine(int device, std::string uuid) : device_(device), uuid_(std::move(uuid)) {}
  TransportKind kind() const override { return TransportKind::kNccl; }
  bool two_sided() const override { return true; }
  bool cuda_memory() const override { return true; }
  // The service tells the engine's GPU from its own by UUID.
  std::optional<std::string> gpu_uuid() const override { return uuid_; }
  int gpu_index() const override { return device_; }

  // Joins the communicator the service started; a failure ends the session.
  absl::Status Join(const std::string& service_info, absl::Time deadline) override {
    absl::StatusOr<std::unique_ptr<NcclLink>> link =
        NcclLink::Start(service_info, NcclLink::kEngineRank, device_, 0);
    absl::Status joined = link.status();
    if (joined.ok()) joined = (*link)->WaitReady(deadline);
    if (!joined.ok()) {
      return absl::UnavailableError(
          absl::StrCat("joining the service's NCCL communicator: ", joined.message()));
    }
    link_ = std::move(link).value();
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<EngineBuffer>> Register(void* ptr, size_t bytes,
                                                         MemoryKind memory) override {
    if (memory != MemoryKind::kCuda) {
      return absl::FailedPreconditionError(
          "an nccl session moves device memory only; attach with ucx for host buffers");
    }
    LC_ASSIGN_OR_RETURN(const int device, DeviceOfPointer(ptr));
    if (device != device_) {
      return absl::InvalidArgumentError(absl::StrCat("buffer is on CUDA device ", device,
                                                     ", the session's NCCL link on ", device_));
    }
    // The service addresses no engine memory over NCCL: the descriptor is for range checks.
    BufferDescriptor d;
    d.transport = TransportKind::kNccl;
    d.memory = MemoryKind::kCuda;
    d.address = reinterpret_cast<uint64_t>(ptr);
    d.bytes = bytes;
    return std::make_unique<RegisteredBuffer>(static_cast<uint8_t*>(ptr), nullptr, nullptr,
                                              std::move(d));
  }

  // Posted in the order the service takes them: the service receives first, then sends.
  absl::Status Post(std::span<const uint8_t> send, std::span<uint8_t> receive,
                    absl::Time deadline) override {
    LC_RETURN_IF_ERROR(health());
    if (!send.empty() && !receive.empty()) {
      return link_->PostSendRecv(send.data(), send.size(), receive.data(), receive.size(),
                                 deadline);
    }
    if (!send.empty()) return link_->PostSend(send.data(), send.size(), deadline);
    if (!receive.empty()) return link_->PostRecv(receive.data(), receive.size(), deadline);
    return absl::OkStatus();
  }
  absl::Status Wait(absl::Time deadline) override {
    LC_RETURN_IF_ERROR(health());
    return link_->Wait(deadline);
  }
  // An aborted link cannot match the service's transfers any more: the session is over.
  absl::Status health() const override {
    if (link_ == nullptr) return absl::FailedPreconditionError("the NCCL link is not joined");
    return link_->health();
  }

 private:
  const int device_;
  const std::string uuid_;
  std::unique_ptr<NcclLink> link_;
};

absl::StatusOr<std::unique_ptr<ServiceBackend>> MakeService(const ServiceSettings& settings) {
  return std::make_unique<NcclService>(settings.cuda_device);
}

// NCCL needs the engine's GPU, named by UUID so the service can tell it from its own.
absl::StatusOr<std::unique_ptr<EngineBackend>> MakeEngine(const EngineSettings& settings) {
  int device = settings.gpu_index;
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError("NCCL offered, but this process has no CUDA device");
  }
  LC_ASSIGN_OR_RETURN(std::string uuid, CudaDeviceUuid(device));
  if (!settings.gpu_uuid.empty() && settings.gpu_uuid != uuid) {
    return absl::InvalidArgumentError(absl::StrCat("identity.gpu_uuid ", settings.gpu_uuid,
                                                   " is not CUDA device ", device, "'s (", uuid,
                                                   ")"));
  }
  return std::make_unique<NcclEngine>(device, std::move(uuid));
}

}  // namespace

Backend NcclBackend() { return {TransportKind::kNccl, /*in_band=*/false, MakeService, MakeEngine}; }

}  // namespace leapcache::transport
