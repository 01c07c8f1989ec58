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
// launch for the plain checksum). One thread per 256-byte chunk (a slicing-by-4 table walk),
// the chunks' CRCs combined pairwise within each warp and block by carries across fixed
// distances, each block's carried to the end and XORed into *crc: one value, no per-chunk
// results to fold on the host. REQUIRES: PrepareCrc32c on the stream's device; bytes <= 2^39.
cudaError_t LaunchCrc32c(const void* data, size_t bytes, uint32_t* crc, cudaStream_t stream);

}  // namespace leapcache::transport
