// A batch of device-to-device copies as one kernel launch: for the thousand ~20 KB blobs of a
// checkpoint, one DMA operation each costs microseconds apiece on the copy engines, one block
// each on the SMs costs one launch. Apart from its callers so that nvcc sees no Abseil.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace leapcache::transport {

// One copy: `bytes` from `src` to `dst`, both device memory the current device can reach
// (its own, or another process's mapped through CUDA IPC).
struct DeviceCopy {
  const void* src;
  void* dst;
  uint64_t bytes;
};

// Launches copies[i] for i < n on `stream`, one block per copy. `copies` is device memory
// (the list itself, uploaded by the caller). Copies must not overlap. Returns the launch error.
cudaError_t LaunchCopyBatch(const DeviceCopy* copies, size_t n, cudaStream_t stream);

}  // namespace leapcache::transport
