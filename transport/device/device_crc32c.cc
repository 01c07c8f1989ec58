#include "transport/device/device_crc32c.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/device/crc32c_kernel.h"

namespace leapcache::transport {
namespace {

// What a thread's checks on one device reuse: a stream, the device word the kernel reduces
// into, and the pinned word it comes back through. Created on the thread's first check there
// and kept until the thread exits, so a check costs its kernel and a 4-byte copy, not a
// stream's creation (which may synchronize) or an allocation. Per thread, so concurrent checks
// never wait on each other's work.
struct CheckScratch {
  cudaStream_t stream = nullptr;
  uint32_t* device_crc = nullptr;
  uint32_t* host_crc = nullptr;
};

absl::StatusOr<CheckScratch*> ThreadScratch(int device) {
  struct PerDevice {
    std::vector<CheckScratch> by_device;
    ~PerDevice() {
      for (CheckScratch& s : by_device) {
        if (s.device_crc != nullptr) cudaFree(s.device_crc);
        if (s.host_crc != nullptr) cudaFreeHost(s.host_crc);
        if (s.stream != nullptr) cudaStreamDestroy(s.stream);
      }
    }
  };
  thread_local PerDevice scratch;
  if (static_cast<size_t>(device) >= scratch.by_device.size()) {
    scratch.by_device.resize(device + 1);
  }
  CheckScratch& s = scratch.by_device[device];
  if (s.host_crc == nullptr) {
    cudaError_t e = PrepareCrc32c(device);
    if (e == cudaSuccess && s.stream == nullptr) {
      e = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking);
    }
    if (e == cudaSuccess && s.device_crc == nullptr) {
      e = cudaMalloc(reinterpret_cast<void**>(&s.device_crc), sizeof(uint32_t));
    }
    if (e == cudaSuccess)
      e = cudaMallocHost(reinterpret_cast<void**>(&s.host_crc), sizeof(uint32_t));
    if (e != cudaSuccess) {
      s.host_crc = nullptr;
      return absl::InternalError(
          absl::StrCat("CRC-32C on the device: setting up: ", cudaGetErrorString(e)));
    }
  }
  return &s;
}

absl::StatusOr<uint32_t> OnDevice(int device, const void* device_ptr, size_t bytes) {
  absl::StatusOr<CheckScratch*> scratch = ThreadScratch(device);
  if (!scratch.ok()) return scratch.status();
  CheckScratch& s = **scratch;
  cudaError_t e = cudaMemsetAsync(s.device_crc, 0, sizeof(uint32_t), s.stream);
  if (e == cudaSuccess) e = LaunchCrc32c(device_ptr, bytes, s.device_crc, s.stream);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(s.host_crc, s.device_crc, sizeof(uint32_t), cudaMemcpyDeviceToHost,
                        s.stream);
  }
  if (const cudaError_t sync = cudaStreamSynchronize(s.stream); e == cudaSuccess) e = sync;
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("CRC-32C on the device: ", cudaGetErrorString(e)));
  }
  return *s.host_crc;
}

}  // namespace

absl::StatusOr<uint32_t> DeviceCrc32c(const void* device_ptr, size_t bytes) {
  if (bytes == 0) return 0u;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, device_ptr) != cudaSuccess ||
      attr.type != cudaMemoryTypeDevice) {
    cudaGetLastError();
    return absl::InvalidArgumentError("the bytes to check are not CUDA device memory");
  }
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(attr.device);
  absl::StatusOr<uint32_t> crc = OnDevice(attr.device, device_ptr, bytes);
  cudaSetDevice(current);
  return crc;
}

}  // namespace leapcache::transport
