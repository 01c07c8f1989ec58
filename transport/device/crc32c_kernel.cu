#include <mutex>

#include "transport/device/crc32c_device.cuh"
#include "transport/device/crc32c_kernel.h"

namespace leapcache::transport {
namespace {

constexpr int kThreads = 256;
// Bytes per thread: short enough that the serial table walk is a few microseconds and a
// 0.6 MB checkpoint still fills the GPU, long enough that carrying each chunk's CRC (up to
// kPowers matrix products) costs less than reading it.
constexpr size_t kChunk = 256;
constexpr int kMaxDevices = 64;

namespace device_crc = crc32c_device;

// kShift[k]: the 32 x 32 GF(2) matrix (its columns) that carries a CRC register across 2^k
// zero bytes.
__constant__ uint32_t kShift[device_crc::kPowers][32];

__global__ void Crc32cKernel(const uint8_t* data, size_t bytes, size_t chunks, uint32_t* out) {
  __shared__ uint32_t table[256];
  device_crc::FillTable(table);
  __syncthreads();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t carried = 0;
  if (i < chunks) {
    const size_t begin = i * kChunk;
    const size_t end = begin + kChunk < bytes ? begin + kChunk : bytes;
    // Carry this chunk's CRC across the bytes after it.
    carried = device_crc::Carry(kShift, device_crc::RangeCrc(table, data, begin, end), bytes - end);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    carried ^= __shfl_xor_sync(0xFFFFFFFFu, carried, offset);
  }
  __shared__ uint32_t warps[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warps[threadIdx.x / 32] = carried;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t block = 0;
    for (int w = 0; w < kThreads / 32; ++w) block ^= warps[w];
    atomicXor(out, block);
  }
}

}  // namespace

cudaError_t PrepareCrc32c(int device) {
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  static const device_crc::ShiftTables tables;
  static std::once_flag once[kMaxDevices];
  static cudaError_t result[kMaxDevices];
  std::call_once(once[device], [&] {
    int current = 0;
    cudaGetDevice(&current);
    result[device] = cudaSetDevice(device);
    if (result[device] == cudaSuccess) {
      result[device] = cudaMemcpyToSymbol(kShift, tables.m, sizeof(tables.m));
    }
    cudaSetDevice(current);
  });
  return result[device];
}

cudaError_t LaunchCrc32c(const void* data, size_t bytes, uint32_t* crc, cudaStream_t stream) {
  const size_t chunks = (bytes + kChunk - 1) / kChunk;
  if (chunks == 0) return cudaSuccess;
  const size_t blocks = (chunks + kThreads - 1) / kThreads;
  if (blocks > 0x7FFFFFFFu) return cudaErrorInvalidValue;
  Crc32cKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(data), bytes, chunks, crc);
  return cudaGetLastError();
}

}  // namespace leapcache::transport
