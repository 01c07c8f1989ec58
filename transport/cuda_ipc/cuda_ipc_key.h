// The CUDA IPC remote key: what an engine's RegisterBuffer hands the service for a device
// buffer, and the checks the service makes of it before and after CUDA sees it.
//
// Wire layout (72 bytes): the allocation's cudaIpcMemHandle_t (64 opaque bytes), then the
// buffer's offset in that allocation (uint64, little-endian). The handle and the offset are the
// peer's word: the driver refuses a handle that names no exported allocation, but nothing in
// CUDA bounds the offset or the descriptor's byte count. Unchecked, an engine could name a
// range past the end of its own allocation, and the service's copies (which run in the service's
// own device context, where the GPU tier holds every tenant's checkpoints) would write or read
// whatever lies there. So the mapped range is checked against the mapped allocation's real size.
//
// No CUDA headers here: the checks build, run and are fuzzed without CUDA.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace leapcache::transport {

inline constexpr size_t kCudaIpcHandleBytes = 64;  // CUDA_IPC_HANDLE_SIZE
inline constexpr size_t kCudaIpcKeyBytes = kCudaIpcHandleBytes + sizeof(uint64_t);

struct CudaIpcKey {
  std::array<uint8_t, kCudaIpcHandleBytes> handle{};
  uint64_t offset = 0;
};

std::string SerializeCudaIpcKey(const CudaIpcKey& key);

// INVALID_ARGUMENT naming buffer.remote_key unless `key` is exactly kCudaIpcKeyBytes.
absl::StatusOr<CudaIpcKey> ParseCudaIpcKey(std::string_view key);

// OK when [offset, offset + bytes) is a non-empty range inside an allocation of
// `allocation_bytes`; INVALID_ARGUMENT naming the range otherwise (no overflow on any input).
absl::Status CheckCudaIpcRange(uint64_t offset, uint64_t bytes, uint64_t allocation_bytes);

}  // namespace leapcache::transport
