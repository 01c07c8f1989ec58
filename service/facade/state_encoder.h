// StateEncoder: how a dense put's states become sealed v1 blobs, a chunk at a time. The CPU
// reference codec (EncodeDenseState) is the embedded backend and serves every format; servers
// built with CUDA and running on a GPU encode 8-bit window-format 128 x 128 states with the
// encode kernel instead (service/cuda/kernel_encoder.h), one launch per chunk.
//
// The kernels round like the CPU reference up to one-code ties, so the same state may be stored
// with a few codes different depending on the backend; both are valid blobs of the format.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "gpu/format.h"
#include "service/facade/dense_state.h"

namespace leapcache::server {

class StateEncoder {
 public:
  virtual ~StateEncoder() = default;
  // "cpu" or "cuda": who encodes states of `spec`.
  virtual const char* BackendFor(const BlobSpec& spec) const = 0;
  // Appends one blob per whole state of `states` (checked finite and in range by the caller).
  // Errors name the state through `describe(i)`.
  virtual absl::Status Encode(const BlobSpec& spec, const DenseFormat& format,
                              std::span<const uint8_t> states,
                              absl::FunctionRef<std::string(size_t)> describe,
                              std::vector<std::vector<uint8_t>>* blobs) = 0;
};

// The CPU reference for every format.
std::unique_ptr<StateEncoder> MakeCpuStateEncoder();

// The kernels on CUDA device `device` for the formats they build, the CPU reference for the
// rest. UNIMPLEMENTED in a build without CUDA; UNAVAILABLE without the device.
absl::StatusOr<std::unique_ptr<StateEncoder>> MakeKernelStateEncoder(int device);

}  // namespace leapcache::server
