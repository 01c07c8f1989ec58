// The device half of DeviceTier::DigestUnits (core/unit_digest.h), apart so that nvcc sees no
// Abseil: one block per unit computes its CRC-32C and its blob payload's, copies its header out
// and finds the first value that breaks its range's rule.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "service/core/unit_digest.h"

namespace leapcache::cuda {

// Makes `device` ready for LaunchUnitDigests (its constant tables); once per device, from any
// thread. The calling thread's current device is left as is.
cudaError_t PrepareUnitDigests(int device);

// Launches, on `stream`, digests[i] of the unit at units[i] for i < n. `units` (n device
// addresses of units of layout.unit_bytes) and `digests` are device memory. REQUIRES:
// PrepareUnitDigests on the stream's device; layout.blob_bytes >= 64; every range inside the
// unit. Returns the launch error.
cudaError_t LaunchUnitDigests(const uint8_t* const* units, size_t n, const core::UnitLayout& layout,
                              core::UnitDigest* digests, cudaStream_t stream);

}  // namespace leapcache::cuda
