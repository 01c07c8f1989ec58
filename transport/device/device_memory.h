// Device memory as the transports and the engine's data plane see it: whether a CUDA device is
// there, what a pointer is, and the staging for backends that cannot reach device memory
// themselves (Debian's UCX): a pinned host buffer per registered device buffer, registered with
// the transport in its place, and the copies between the two that the buffer's owner runs
// before a put and after a get. The runtime API alone, no kernels. In a build without CUDA
// (device_memory_none.cc) no device is available and every copy is FAILED_PRECONDITION, so
// callers need no build switch of their own.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace leapcache::transport {

// Host memory allocated with cudaHostAlloc (page-locked, so device copies run at full speed
// and UCX can register it like any host memory).
class PinnedHostBuffer {
 public:
  // RESOURCE_EXHAUSTED if the allocation fails; FAILED_PRECONDITION without a usable device.
  static absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> Allocate(size_t bytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  PinnedHostBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

// Synchronous copies between device and host memory (cudaMemcpy); INTERNAL with CUDA's message
// on failure.
absl::Status CopyDeviceToHost(void* host, const void* device, size_t bytes);
absl::Status CopyHostToDevice(void* device, const void* host, size_t bytes);

// True if `ptr` is device memory of the current process (cudaPointerGetAttributes);
// INVALID_ARGUMENT if CUDA does not know the pointer as device memory.
absl::Status CheckDevicePointer(const void* ptr);

// The CUDA device that holds device memory `ptr`; INVALID_ARGUMENT if it is not device memory.
absl::StatusOr<int> DeviceOfPointer(const void* ptr);

// True if this process can use a CUDA device.
bool CudaDeviceAvailable();

// The UUID of CUDA device `device` as nvidia-smi prints it ("GPU-xxxxxxxx-xxxx-..."), which
// names one GPU across processes whatever their CUDA_VISIBLE_DEVICES.
absl::StatusOr<std::string> CudaDeviceUuid(int device);

}  // namespace leapcache::transport
