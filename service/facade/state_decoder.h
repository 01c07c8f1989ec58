// StateDecoder: how a dense get's stored blobs become dense states, a batch at a time. The CPU
// reference codec (DecodeDenseState) is the embedded backend and serves every format; servers
// built with CUDA and running on a GPU decode 8-bit window-format 128 x 128 states with the
// decode kernel instead (service/cuda/kernel_decoder.h), one launch per batch.
//
// The kernel computes in fp32 in another order than the reference, so the states it returns
// equal the reference's to within fp32 rounding, not bit for bit (dense_decode_backend=cpu
// gives the reference's bytes everywhere). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "gpu/format.h"
#include "service/facade/dense_state.h"

namespace leapcache::server {

class StateDecoder {
 public:
  virtual ~StateDecoder() = default;
  // "cpu" or "cuda": who decodes blobs of `spec`.
  virtual const char* BackendFor(const BlobSpec& spec) const = 0;
  // How many states one Decode call of `spec` takes at most (>= 1).
  virtual size_t BatchFor(const BlobSpec& spec) const = 0;
  // Decodes blob(i) for i < n (n <= BatchFor(spec)), blobs of the namespace's `spec` as stored,
  // into `out`: n whole states in `format`, state i at i * its size. A blob that fails its
  // checks gets DATA_LOSS (or INVALID_ARGUMENT) naming it through `describe(i)`.
  // REQUIRES: out.size() == n * DenseStateBytes(format, spec.dk, spec.dv).
  virtual absl::Status Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                              absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                              absl::FunctionRef<std::string(size_t)> describe,
                              std::span<uint8_t> out) = 0;
};

// The CPU reference for every format; one process-wide instance (it holds no state).
StateDecoder& CpuStateDecoder();

// The kernels on CUDA device `device` for the formats they build, the CPU reference for the
// rest. UNIMPLEMENTED in a build without CUDA; UNAVAILABLE without the device.
absl::StatusOr<std::unique_ptr<StateDecoder>> MakeKernelStateDecoder(int device);

}  // namespace leapcache::server
