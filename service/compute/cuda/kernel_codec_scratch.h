// What the kernel codecs of dense states (kernel_encoder.h, kernel_decoder.h) share: the formats
// their kernels serve, and the device scratch one call works in: a stream, room for max_states
// fp32 states of 128 x 128 and as many pool regions of the largest served layout (KDA's), and
// the slot indices 0..max_states-1 the kernels address them by. Not thread-safe: each codec
// serializes its calls.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "gpu/format/format.h"
#include "gpu/kernels/kernels.h"

namespace leapcache::compute {

// The window format at 8, 6 and 4 bits, dk = dv = 128: the formats the encode and decode kernels
// build.
bool KernelCodecServes(const BlobSpec& spec);

// Whether the kernels can read or write n dense states at `p` in place: device memory, aligned
// to the two elements they move at a time.
bool DenseInPlace(const void* p, DType dtype);

struct KernelCodecScratch {
  // UNAVAILABLE without the device, INVALID_ARGUMENT for max_states <= 0, INTERNAL if the
  // device cannot hold it.
  static absl::StatusOr<std::unique_ptr<KernelCodecScratch>> Create(int device, int max_states);
  ~KernelCodecScratch();

  // The kernels' view of n states at `at` (the scratch's states when null), slots 0..n-1, in
  // dtype and layout.
  kernels::DenseParams Dense(size_t n, DType dtype, Orientation layout, void* at = nullptr) const {
    kernels::DenseParams p;
    p.batch = static_cast<int>(n);
    p.slot = slot;
    p.states = at != nullptr ? at : states;
    p.dtype = dtype;
    p.layout = layout;
    return p;
  }

  int device = 0;
  int max_states = 0;
  cudaStream_t stream = nullptr;
  uint8_t* states = nullptr;  // max_states fp32 states
  uint8_t* pool = nullptr;    // max_states regions, pool_bytes
  size_t pool_bytes = 0;
  int32_t* slot = nullptr;  // 0..max_states-1
};

}  // namespace leapcache::compute
