#include "transport/inline/inline_backend.h"

#include <memory>

#include "transport/engine_buffer.h"

namespace leapcache::transport {
namespace {

class InlineService final : public ServiceBackend {
 public:
  absl::Status status() const override { return absl::OkStatus(); }
  Capabilities capabilities() const override { return {true, CudaAccess::kNone}; }
  bool CanServe(const Offer&, const PeerInfo&) const override { return true; }
  absl::StatusOr<std::unique_ptr<PeerConnection>> Connect(const Offer&, const PeerInfo&) override {
    return std::unique_ptr<PeerConnection>();
  }
};

class InlineEngine final : public EngineBackend {
 public:
  TransportKind kind() const override { return TransportKind::kInline; }
  bool cuda_memory() const override { return false; }
  absl::StatusOr<std::unique_ptr<EngineBuffer>> Register(void* ptr, size_t, MemoryKind) override {
    return std::make_unique<RegisteredBuffer>(static_cast<uint8_t*>(ptr), nullptr, nullptr,
                                              std::nullopt);
  }
};

}  // namespace

Backend InlineBackend() {
  return {TransportKind::kInline, /*in_band=*/true,
          [](const ServiceSettings&) -> absl::StatusOr<std::unique_ptr<ServiceBackend>> {
            return std::make_unique<InlineService>();
          },
          [](const EngineSettings&) -> absl::StatusOr<std::unique_ptr<EngineBackend>> {
            return std::make_unique<InlineEngine>();
          }};
}

}  // namespace leapcache::transport
