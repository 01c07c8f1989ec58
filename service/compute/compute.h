// Compute: the one seam between the service and whoever computes on states: the codec of dense
// checkpoints (dense states -> sealed v1 blobs for puts, stored blobs -> dense states for gets)
// and the live states of attached decode (the decode step and the boundary refit, live_states.h).
// Two backends, one choice (the server's compute_backend):
//   - the CPU reference (cpu/cpu_compute.h): every format, host memory only; the embedded
//     backend and the oracle the kernels are tested against;
//   - the CUDA kernels (cuda/cuda_compute.h), on one device, for the formats they build (the
//     window format at 8, 6 and 4 bits, 128 x 128; fp32 live states), the reference for the rest.
//
// Spans say where their bytes are (Memory). The CUDA backend takes device memory as well as
// host memory for the states it encodes from or decodes into and for the step's vectors: its own
// allocations or an engine's buffer mapped into the service's context (CUDA IPC), so a
// checkpoint or a step need not cross PCIe to be computed on. The CPU backend takes host memory
// only (INVALID_ARGUMENT otherwise).
//
// The kernels round like the reference up to one-code ties when encoding and compute in fp32 in
// another order when decoding, so results equal the reference's to within that, not bit for bit;
// compute_backend=cpu gives the reference's bytes everywhere. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "gpu/format/format.h"
#include "service/compute/dense_state.h"
#include "service/compute/live_states.h"

namespace leapcache::compute {

// Which backend computes: the server's compute_backend setting.
enum class Choice {
  kCpu,   // the CPU reference for everything
  kCuda,  // the kernels; start-up fails without them. What they do not build: dense puts and
          // gets use the reference codec; a decode session is refused (UNIMPLEMENTED), never
          // held in host memory when the operator asked for the device's
  kAuto,  // the kernels where built, present and able to serve the format; else the CPU
};
// Parses "cpu", "cuda", "auto"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<Choice> ParseChoice(std::string_view s);
// True when this build has the CUDA backend.
bool CudaBuilt();

// Stored units that lie in device memory (the GPU tier), in the order a read produces them:
// unit i's blob (blob_bytes) at at[i], its side state (side_bytes, 0 without) right after it.
struct DeviceUnits {
  std::span<const uint8_t* const> at;
  size_t blob_bytes = 0;
  size_t side_bytes = 0;
};

class Compute {
 public:
  virtual ~Compute() = default;
  // "cpu" or "cuda".
  virtual const char* name() const = 0;
  // Whether spans may be in device memory of this backend's device.
  virtual bool takes_device_memory() const = 0;

  // --- dense puts ---
  // "cpu" or "cuda": who encodes states of `spec`.
  virtual const char* EncoderFor(const BlobSpec& spec) const = 0;
  // Appends one sealed blob per whole state of `states` (checked finite and in range by the
  // caller). Errors name the state through `describe(i)`.
  virtual absl::Status Encode(const BlobSpec& spec, const DenseFormat& format, ConstBytes states,
                              absl::FunctionRef<std::string(size_t)> describe,
                              std::vector<std::vector<uint8_t>>* blobs) = 0;

  // --- dense gets ---
  // "cpu" or "cuda": who decodes blobs of `spec`.
  virtual const char* DecoderFor(const BlobSpec& spec) const = 0;
  // How many states one Decode call of `spec` takes at most (>= 1).
  virtual size_t DecodeBatch(const BlobSpec& spec) const = 0;
  // Decodes blob(i) for i < n (n <= DecodeBatch(spec)), host blobs of the namespace's `spec` as
  // stored, into `out`: n whole states in `format`, state i at i * its size. A blob that fails
  // its checks gets DATA_LOSS (or INVALID_ARGUMENT) naming it through `describe(i)`, and nothing
  // is written.
  // REQUIRES: out.data.size() == n * DenseStateBytes(format, spec.dk, spec.dv).
  virtual absl::Status Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                              absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                              absl::FunctionRef<std::string(size_t)> describe,
                              MutableBytes out) = 0;

  // --- dense gets in place ---
  // Whether DecodeInPlace takes these units of `spec` into `out` in `format` (the CPU backend
  // never does; the CUDA backend where its kernels serve the format, the units and `out` lie in
  // its device's memory and are aligned for them).
  virtual bool DecodesInPlace(const BlobSpec& spec, const DenseFormat& format,
                              const DeviceUnits& units, const void* out) const;
  // Dense units where `out` is (device memory of this backend's device: an engine's buffer
  // mapped over CUDA IPC), produced on the device without a host copy of their bytes: unit i at
  // out + i * (state bytes + side_bytes), its blob decoded in `format`, then its side state as
  // stored. Returns the CRC-32C of the units' bytes as written. The blobs are not checked again:
  // the store checked them when they were put. REQUIRES: DecodesInPlace(spec, format, units,
  // out.data()); out.size() == units.at.size() * (state bytes + side_bytes).
  virtual absl::StatusOr<uint32_t> DecodeInPlace(const BlobSpec& spec, const DenseFormat& format,
                                                 const DeviceUnits& units, std::span<uint8_t> out);

  // --- attached decode ---
  // The live states of one session of `shape`, zero. INVALID_ARGUMENT for a shape the backend
  // cannot hold; UNIMPLEMENTED where the choice is kCuda and the kernels do not build the
  // format; RESOURCE_EXHAUSTED when the device cannot hold it.
  virtual absl::StatusOr<std::unique_ptr<LiveStates>> OpenLiveStates(const DecodeShape& shape) = 0;
};

// The CPU reference; one process-wide instance (it holds no state).
Compute& CpuCompute();

// The backend of `choice` on CUDA device `device`: kCpu gives a CPU backend; kCuda fails with
// UNIMPLEMENTED in a build without CUDA and UNAVAILABLE without the device; kAuto falls back to
// the CPU backend in both cases.
absl::StatusOr<std::unique_ptr<Compute>> MakeCompute(Choice choice, int device);

}  // namespace leapcache::compute
