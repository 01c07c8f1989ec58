#include "transport/cuda_ipc/cuda_ipc_key.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace leapcache::transport {

std::string SerializeCudaIpcKey(const CudaIpcKey& key) {
  std::string out(kCudaIpcKeyBytes, '\0');
  std::memcpy(out.data(), key.handle.data(), kCudaIpcHandleBytes);
  for (size_t i = 0; i < sizeof(uint64_t); ++i) {
    out[kCudaIpcHandleBytes + i] = static_cast<char>((key.offset >> (8 * i)) & 0xff);
  }
  return out;
}

absl::StatusOr<CudaIpcKey> ParseCudaIpcKey(std::string_view key) {
  if (key.size() != kCudaIpcKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("buffer.remote_key is ", key.size(),
                                                   " bytes, a CUDA IPC key is ", kCudaIpcKeyBytes));
  }
  CudaIpcKey out;
  std::memcpy(out.handle.data(), key.data(), kCudaIpcHandleBytes);
  for (size_t i = 0; i < sizeof(uint64_t); ++i) {
    out.offset |= static_cast<uint64_t>(static_cast<uint8_t>(key[kCudaIpcHandleBytes + i]))
                  << (8 * i);
  }
  return out;
}

absl::Status CheckCudaIpcRange(uint64_t offset, uint64_t bytes, uint64_t allocation_bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("buffer.bytes is 0");
  if (offset > allocation_bytes || bytes > allocation_bytes - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer [", offset, ", +", bytes, ") leaves the ", allocation_bytes,
                     "-byte allocation its CUDA IPC handle maps"));
  }
  return absl::OkStatus();
}

}  // namespace leapcache::transport
