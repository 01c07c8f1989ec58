#include "transport/device/device_memory.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"

namespace leapcache::transport {
absl::StatusOr<int> DeviceOfPointer(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaError_t e = cudaPointerGetAttributes(&attr, ptr); e != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat("buffer is not CUDA memory: ", cudaGetErrorString(e)));
  }
  if (attr.type != cudaMemoryTypeDevice) {
    return absl::InvalidArgumentError("buffer of kind cuda is not device memory");
  }
  return attr.device;
}

bool CudaDeviceAvailable() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

absl::StatusOr<std::string> CudaDeviceUuid(int device) {
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, ": ", cudaGetErrorString(e)));
  }
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppend(&out, absl::Hex(b[i], absl::kZeroPad2));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> PinnedHostBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("pinned buffer bytes is 0");
  if (!CudaDeviceAvailable()) {
    return absl::FailedPreconditionError("no CUDA device: cannot stage device buffers");
  }
  void* p = nullptr;
  if (cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault); e != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaHostAlloc of ", bytes, " bytes: ", cudaGetErrorString(e)));
  }
  return std::unique_ptr<PinnedHostBuffer>(new PinnedHostBuffer(p, bytes));
}

PinnedHostBuffer::~PinnedHostBuffer() { cudaFreeHost(data_); }

absl::Status CopyDeviceToHost(void* host, const void* device, size_t bytes) {
  if (cudaError_t e = cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
    return LC_CUDA_STATUS(e, "cudaMemcpy device to host");
  }
  return absl::OkStatus();
}

absl::Status CopyHostToDevice(void* device, const void* host, size_t bytes) {
  if (cudaError_t e = cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    return LC_CUDA_STATUS(e, "cudaMemcpy host to device");
  }
  return absl::OkStatus();
}

absl::Status CheckDevicePointer(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaError_t e = cudaPointerGetAttributes(&attr, ptr); e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of this query
    return absl::InvalidArgumentError(
        absl::StrCat("buffer is not CUDA memory: ", cudaGetErrorString(e)));
  }
  if (attr.type != cudaMemoryTypeDevice) {
    return absl::InvalidArgumentError("buffer of kind cuda is not device memory");
  }
  return absl::OkStatus();
}

}  // namespace leapcache::transport
