// The CUDA backend of the compute seam (compute.h), on one device: the encode and decode kernels
// (kernel_encoder.h, kernel_decoder.h) for the formats they build, a batch of states per launch,
// and CudaLiveStates (the fused decode step and boundary refit) for attached decode. Formats the
// kernels do not build go to the CPU reference, device spans staged through host memory for it;
// a decode session of such a format falls back to the CPU only under compute_backend=auto.
#pragma once

#include <memory>

#include "service/compute/compute.h"
#include "service/compute/cuda/kernel_decoder.h"
#include "service/compute/cuda/kernel_encoder.h"

namespace leapcache::compute {

class CudaBackend final : public Compute {
 public:
  // UNAVAILABLE without the device. `cpu_live_states`: whether a decode session the kernels do
  // not build is held by the CPU backend (kAuto) or refused (kCuda).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device, bool cpu_live_states);

  const char* name() const override { return "cuda"; }
  bool takes_device_memory() const override { return true; }
  int device() const { return device_; }

  const char* EncoderFor(const BlobSpec& spec) const override;
  absl::Status Encode(const BlobSpec& spec, const DenseFormat& format, ConstBytes states,
                      absl::FunctionRef<std::string(size_t)> describe,
                      std::vector<std::vector<uint8_t>>* blobs) override;
  const char* DecoderFor(const BlobSpec& spec) const override;
  size_t DecodeBatch(const BlobSpec& spec) const override;
  absl::Status Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                      absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                      absl::FunctionRef<std::string(size_t)> describe,
                      MutableBytes out) override;
  bool DecodesInPlace(const BlobSpec& spec, const DenseFormat& format, const DeviceUnits& units,
                      const void* out) const override;
  absl::StatusOr<uint32_t> DecodeInPlace(const BlobSpec& spec, const DenseFormat& format,
                                         const DeviceUnits& units, std::span<uint8_t> out) override;
  absl::StatusOr<std::unique_ptr<LiveStates>> OpenLiveStates(const DecodeShape& shape) override;

 private:
  CudaBackend(int device, bool cpu_live_states, std::unique_ptr<KernelEncoder> encoder,
              std::unique_ptr<KernelDecoder> decoder)
      : device_(device),
        cpu_live_states_(cpu_live_states),
        encoder_(std::move(encoder)),
        decoder_(std::move(decoder)) {}

  const int device_;
  const bool cpu_live_states_;
  const std::unique_ptr<KernelEncoder> encoder_;
  const std::unique_ptr<KernelDecoder> decoder_;
};

}  // namespace leapcache::compute
