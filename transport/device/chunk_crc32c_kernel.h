// The device half of DeviceCrc32c (device_crc32c.h), apart so that nvcc sees no Abseil.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace leapcache::transport {

// Launches, on `stream`, crcs[i] = CRC-32C of chunk i (`chunk` bytes; the last may be short) of
// [data, data + bytes) for every i < ceil(bytes / chunk): one thread per chunk. Returns the
// launch's error.
cudaError_t LaunchChunkCrc32c(const void* data, size_t bytes, size_t chunk, uint32_t* crcs,
                              cudaStream_t stream);

}  // namespace leapcache::transport
