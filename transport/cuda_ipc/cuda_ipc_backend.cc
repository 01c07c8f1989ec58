#include "transport/cuda_ipc/cuda_ipc_backend.h"

#include <memory>
#include <utility>

#include "base/status_macros.h"
#include "transport/cuda_ipc/cuda_ipc.h"
#include "transport/device/device_memory.h"
#include "transport/engine_buffer.h"

namespace leapcache::transport {
namespace {

class CudaIpcService final : public ServiceBackend {
 public:
  explicit CudaIpcService(int device) : device_(device), available_(CudaDeviceAvailable()) {}
  absl::Status status() const override {
    return available_ ? absl::OkStatus() : absl::FailedPreconditionError("no CUDA device");
  }
  Capabilities capabilities() const override {
    return available_ ? Capabilities{false, CudaAccess::kDirect} : Capabilities{};
  }
  // CUDA IPC reaches only device memory of a process on this host.
  bool CanServe(const Offer& offer, const PeerInfo& peer) const override {
    return available_ && peer.same_host && offer.cuda_memory;
  }
  absl::StatusOr<std::unique_ptr<PeerConnection>> Connect(const Offer&,
                                                          const PeerInfo& peer) override {
    LC_RETURN_IF_ERROR(status());
    return ConnectCudaIpc(peer.pid, device_);
  }

 private:
  const int device_;
  const bool available_;
};

class CudaIpcEngine final : public EngineBackend {
 public:
  TransportKind kind() const override { return TransportKind::kCudaIpc; }
  bool cuda_memory() const override { return CudaDeviceAvailable(); }
  absl::StatusOr<std::unique_ptr<EngineBuffer>> Register(void* ptr, size_t bytes,
                                                         MemoryKind memory) override {
    if (memory != MemoryKind::kCuda) {
      return absl::FailedPreconditionError(
          "a cuda_ipc session moves device memory only; attach with ucx for host buffers");
    }
    LC_ASSIGN_OR_RETURN(std::unique_ptr<Registration> reg, ExportCudaIpc(ptr, bytes));
    BufferDescriptor d = reg->descriptor();
    return std::make_unique<RegisteredBuffer>(static_cast<uint8_t*>(ptr), nullptr, std::move(reg),
                                              std::move(d));
  }
};

}  // namespace

Backend CudaIpcBackend() {
  return {TransportKind::kCudaIpc, /*in_band=*/false,
          [](const ServiceSettings& s) -> absl::StatusOr<std::unique_ptr<ServiceBackend>> {
            return std::make_unique<CudaIpcService>(s.cuda_device);
          },
          [](const EngineSettings&) -> absl::StatusOr<std::unique_ptr<EngineBackend>> {
            return std::make_unique<CudaIpcEngine>();
          }};
}

}  // namespace leapcache::transport
