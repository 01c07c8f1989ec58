// The device half of DeviceCrc32c (device_crc32c.h), apart so that nvcc sees no Abseil.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace leapcache::transport {

// Makes `device` ready for LaunchCrc32c (its constant tables); once per device, from any
// thread, before the first launch there. The calling thread's current device is left as is.
cudaError_t PrepareCrc32c(int device);

// Launches, on `stream`, *crc ^= CRC-32C of [data, data + bytes) (*crc must be 0 before the
// launch for the plain checksum). The bytes are cut into short chunks, one per thread; each
// chunk's CRC is carried across the bytes after it (the operator is linear over GF(2), so the
// carried CRCs XOR to the whole one) and the XOR is reduced on the device: one value, no
// per-chunk results to fold on the host. REQUIRES: PrepareCrc32c on the stream's device.
cudaError_t LaunchCrc32c(const void* data, size_t bytes, uint32_t* crc, cudaStream_t stream);

}  // namespace leapcache::transport
