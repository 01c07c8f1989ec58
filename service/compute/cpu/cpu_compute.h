// The CPU backend of the compute seam (compute.h): the reference codec (dense_state.h) for every
// format, one state at a time, and CpuLiveStates for attached decode. Host memory only: a span
// in device memory is INVALID_ARGUMENT. Holds no state; CpuCompute() is its one instance.
#pragma once

#include "service/compute/compute.h"

namespace leapcache::compute {

class CpuBackend final : public Compute {
 public:
  const char* name() const override { return "cpu"; }
  bool takes_device_memory() const override { return false; }
  const char* EncoderFor(const BlobSpec&) const override { return "cpu"; }
  absl::Status Encode(const BlobSpec& spec, const DenseFormat& format, ConstBytes states,
                      absl::FunctionRef<std::string(size_t)> describe,
                      std::vector<std::vector<uint8_t>>* blobs) override;
  const char* DecoderFor(const BlobSpec&) const override { return "cpu"; }
  size_t DecodeBatch(const BlobSpec&) const override { return 1; }
  absl::Status Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                      absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                      absl::FunctionRef<std::string(size_t)> describe,
                      MutableBytes out) override;
  absl::StatusOr<std::unique_ptr<LiveStates>> OpenLiveStates(const DecodeShape& shape) override;
};

// INVALID_ARGUMENT unless `memory` is host memory: what every CPU entry point checks first.
absl::Status RequireHost(Memory memory, const char* what);

}  // namespace leapcache::compute
