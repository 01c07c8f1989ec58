#include "transport/ucx/ucx_backend.h"

#include <memory>
#include <utility>

#include "base/status_macros.h"
#include "transport/device/device_memory.h"
#include "transport/engine_buffer.h"
#include "transport/ucx/ucx_context.h"
#include "transport/ucx/ucx_peer_connection.h"
#include "transport/ucx/ucx_target_worker.h"

namespace leapcache::transport {
namespace {

class UcxService final : public ServiceBackend {
 public:
  explicit UcxService(const ServiceSettings& settings) {
    // The service's side never stages CUDA memory: it reaches the engine's host buffers, and
    // device buffers only when UCX itself reports CUDA support.
    absl::StatusOr<std::unique_ptr<UcxContext>> context =
        UcxContext::Create({settings.ucx_transports, false});
    if (context.ok()) {
      context_ = std::move(context).value();
    } else {
      status_ = context.status();
    }
  }
  absl::Status status() const override { return status_; }
  Capabilities capabilities() const override {
    return context_ != nullptr ? context_->capabilities() : Capabilities{};
  }
  bool CanServe(const Offer&, const PeerInfo&) const override { return context_ != nullptr; }
  absl::StatusOr<std::unique_ptr<PeerConnection>> Connect(const Offer& offer,
                                                          const PeerInfo&) override {
    if (context_ == nullptr) return status_;
    if (offer.connection_info.empty()) {
      return absl::InvalidArgumentError("offers[ucx].connection_info (worker address) is empty");
    }
    LC_ASSIGN_OR_RETURN(std::unique_ptr<UcxPeerConnection> c,
                        UcxPeerConnection::Connect(context_.get(), offer.connection_info));
    return std::unique_ptr<PeerConnection>(std::move(c));
  }

 private:
  std::unique_ptr<UcxContext> context_;
  absl::Status status_;
};

class UcxEngine final : public EngineBackend {
 public:
  UcxEngine(std::unique_ptr<UcxContext> context, std::unique_ptr<UcxTargetWorker> worker)
      : context_(std::move(context)), worker_(std::move(worker)) {}
  TransportKind kind() const override { return TransportKind::kUcx; }
  std::string connection_info() const override { return worker_->address(); }
  bool cuda_memory() const override { return context_->capabilities().cuda != CudaAccess::kNone; }
  absl::StatusOr<std::unique_ptr<EngineBuffer>> Register(void* ptr, size_t bytes,
                                                         MemoryKind memory) override {
    void* target = ptr;
    MemoryKind target_kind = memory;
    std::unique_ptr<PinnedHostBuffer> staging;
    if (memory == MemoryKind::kCuda && !context_->cuda_direct()) {
      LC_ASSIGN_OR_RETURN(staging, PinnedHostBuffer::Allocate(bytes));
      target = staging->data();
      target_kind = MemoryKind::kHost;
    }
    LC_ASSIGN_OR_RETURN(std::unique_ptr<Registration> reg,
                        context_->Register(target, bytes, target_kind));
    BufferDescriptor d = reg->descriptor();
    return std::make_unique<RegisteredBuffer>(static_cast<uint8_t*>(ptr), std::move(staging),
                                              std::move(reg), std::move(d));
  }
  // The service moves bytes through the engine's worker: poll it busily meanwhile.
  absl::Status During(absl::FunctionRef<absl::Status()> call) override {
    UcxTargetWorker::Busy busy(worker_.get());
    return call();
  }

 private:
  // Registrations (the buffers) go before the worker, the worker before the context.
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxTargetWorker> worker_;
};

absl::StatusOr<std::unique_ptr<ServiceBackend>> MakeService(const ServiceSettings& settings) {
  return std::make_unique<UcxService>(settings);
}

absl::StatusOr<std::unique_ptr<EngineBackend>> MakeEngine(const EngineSettings& settings) {
  LC_ASSIGN_OR_RETURN(std::unique_ptr<UcxContext> context,
                      UcxContext::Create({settings.ucx_transports, CudaDeviceAvailable()}));
  LC_ASSIGN_OR_RETURN(std::unique_ptr<UcxTargetWorker> worker,
                      UcxTargetWorker::Create(context.get()));
  return std::make_unique<UcxEngine>(std::move(context), std::move(worker));
}

}  // namespace

Backend UcxBackend() { return {TransportKind::kUcx, /*in_band=*/false, MakeService, MakeEngine}; }

}  // namespace leapcache::transport
