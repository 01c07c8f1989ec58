#include "service/transport/cuda_staging.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace leapcache::transport {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace

bool CudaDeviceAvailable() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
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
    return CudaError(e, "cudaMemcpy device to host");
  }
  return absl::OkStatus();
}

absl::Status CopyHostToDevice(void* device, const void* host, size_t bytes) {
  if (cudaError_t e = cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    return CudaError(e, "cudaMemcpy host to device");
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
