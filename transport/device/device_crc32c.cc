#include "transport/device/device_crc32c.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/crc32c.h"
#include "transport/device/chunk_crc32c_kernel.h"

namespace leapcache::transport {
namespace {

// Long enough that folding the chunks on the host is negligible, short enough for thousands of
// threads on a checkpoint of a few MB.
constexpr size_t kChunk = 4096;

// The calling thread's stream on `device`, created on its first check there and kept until the
// thread exits, so a check no longer pays a stream's creation and destruction (which may
// synchronize) on top of its kernel. Per thread, so concurrent checks never wait on each
// other's work.
absl::StatusOr<cudaStream_t> ThreadStream(int device) {
  struct Streams {
    std::vector<cudaStream_t> by_device;
    ~Streams() {
      for (cudaStream_t s : by_device) {
        if (s != nullptr) cudaStreamDestroy(s);
      }
    }
  };
  thread_local Streams streams;
  if (static_cast<size_t>(device) >= streams.by_device.size()) {
    streams.by_device.resize(device + 1, nullptr);
  }
  cudaStream_t& stream = streams.by_device[device];
  if (stream == nullptr) {
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      stream = nullptr;
      return absl::InternalError(absl::StrCat("cudaStreamCreate: ", cudaGetErrorString(e)));
    }
  }
  return stream;
}

absl::StatusOr<uint32_t> OnDevice(int device, const void* device_ptr, size_t bytes) {
  const size_t chunks = (bytes + kChunk - 1) / kChunk;
  absl::StatusOr<cudaStream_t> stream_or = ThreadStream(device);
  if (!stream_or.ok()) return stream_or.status();
  cudaStream_t stream = *stream_or;
  std::vector<uint32_t> crcs(chunks);
  uint32_t* d_crcs = nullptr;
  cudaError_t e =
      cudaMallocAsync(reinterpret_cast<void**>(&d_crcs), chunks * sizeof(uint32_t), stream);
  if (e == cudaSuccess) {
    e = LaunchChunkCrc32c(device_ptr, bytes, kChunk, d_crcs, stream);
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(crcs.data(), d_crcs, chunks * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                          stream);
    }
    cudaFreeAsync(d_crcs, stream);
  }
  if (const cudaError_t s = cudaStreamSynchronize(stream); e == cudaSuccess) e = s;
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("CRC-32C on the device: ", cudaGetErrorString(e)));
  }
  const Crc32cCombiner full(kChunk);
  uint32_t crc = 0;
  for (size_t i = 0; i + 1 < chunks; ++i) crc = full.Combine(crc, crcs[i]);
  return Crc32cCombiner(bytes - (chunks - 1) * kChunk).Combine(crc, crcs[chunks - 1]);
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
