// The EngineBuffer most backends return: the engine's memory, the transport's registration of
// it (if the backend registers memory), and the pinned host buffer that stands in for device
// memory the backend cannot reach (if staged).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "transport/backend.h"
#include "transport/device/device_memory.h"
#include "transport/transport.h"

namespace leapcache::transport {

class RegisteredBuffer final : public EngineBuffer {
 public:
  // `registration` (if any) covers `staging`'s memory when there is one, else `ptr`'s.
  // `descriptor`: what the service imports; nullopt for in-band backends.
  RegisteredBuffer(uint8_t* ptr, std::unique_ptr<PinnedHostBuffer> staging,
                   std::unique_ptr<Registration> registration,
                   std::optional<BufferDescriptor> descriptor)
      : ptr_(ptr),
        staging_(std::move(staging)),
        registration_(std::move(registration)),
        descriptor_(std::move(descriptor)) {}

  std::optional<BufferDescriptor> descriptor() const override { return descriptor_; }
  uint8_t* transfer_base() const override {
    return staging_ != nullptr ? static_cast<uint8_t*>(staging_->data()) : ptr_;
  }
  bool staged() const override { return staging_ != nullptr; }

 private:
  uint8_t* const ptr_;
  // Declared before the registration: the registration goes first, then the memory it covers.
  std::unique_ptr<PinnedHostBuffer> staging_;
  std::unique_ptr<Registration> registration_;
  const std::optional<BufferDescriptor> descriptor_;
};

}  // namespace leapcache::transport
