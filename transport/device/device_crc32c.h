// CRC-32C of bytes in CUDA device memory, computed on their device by one kernel that reduces
// to the one value (crc32c_kernel.h): an engine checks a checkpoint that landed in its GPU
// memory against the service's CRC this way, at about the device's read bandwidth, instead of
// copying it back to the host first (about 5 ms for 20 MB).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace leapcache::transport {

// Crc32c of [device_ptr, device_ptr + bytes) of CUDA device memory, on the device that holds
// it (the calling thread's current device is left as it was). Blocks until done.
// INVALID_ARGUMENT for memory that is not device memory, INTERNAL on a CUDA error.
absl::StatusOr<uint32_t> DeviceCrc32c(const void* device_ptr, size_t bytes);

}  // namespace leapcache::transport
