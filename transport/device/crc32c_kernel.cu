#include <mutex>

#include "transport/device/crc32c_kernel.h"

namespace leapcache::transport {
namespace {

constexpr int kThreads = 256;
// Bytes per thread: short enough that the serial table walk is a few microseconds and a
// 0.6 MB checkpoint still fills the GPU, long enough that carrying each chunk's CRC (up to
// kPowers matrix products) costs less than reading it.
constexpr size_t kChunk = 256;
// Powers of two up to 2^39 bytes: more than any device buffer.
constexpr int kPowers = 40;
constexpr int kMaxDevices = 64;

// kShift[k]: the 32 x 32 GF(2) matrix (its columns) that carries a CRC register across 2^k
// zero bytes.
__constant__ uint32_t kShift[kPowers][32];

__device__ uint32_t Times(const uint32_t (&m)[32], uint32_t v) {
  uint32_t sum = 0;
#pragma unroll
  for (int n = 0; n < 32; ++n) sum ^= (0u - ((v >> n) & 1u)) & m[n];
  return sum;
}

__global__ void Crc32cKernel(const uint8_t* data, size_t bytes, size_t chunks, uint32_t* crc) {
  __shared__ uint32_t table[256];
  for (int t = threadIdx.x; t < 256; t += blockDim.x) {
    uint32_t c = t;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    table[t] = c;
  }
  __syncthreads();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t carried = 0;
  if (i < chunks) {
    const size_t begin = i * kChunk;
    const size_t end = begin + kChunk < bytes ? begin + kChunk : bytes;
    uint32_t c = ~0u;
    size_t at = begin;
    if (((reinterpret_cast<uintptr_t>(data) + begin) & 15) == 0) {
      for (; at + 16 <= end; at += 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(data + at);
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t w = words[j];
#pragma unroll
          for (int k = 0; k < 4; ++k, w >>= 8) c = table[(c ^ w) & 0xFF] ^ (c >> 8);
        }
      }
    }
    for (; at < end; ++at) c = table[(c ^ data[at]) & 0xFF] ^ (c >> 8);
    // CRC(A || B) = shift_|B|(CRC(A)) ^ CRC(B): carry this chunk's CRC across the bytes after it.
    carried = ~c;
    const size_t after = bytes - end;
    for (int k = 0; k < kPowers; ++k) {
      if ((after >> k) & 1) carried = Times(kShift[k], carried);
    }
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
    atomicXor(crc, block);
  }
}

// out = a after b (columns).
void Compose(const uint32_t* a, const uint32_t* b, uint32_t* out) {
  uint32_t r[32];
  for (int n = 0; n < 32; ++n) {
    uint32_t sum = 0;
    for (int m = 0; m < 32; ++m) {
      if ((b[n] >> m) & 1) sum ^= a[m];
    }
    r[n] = sum;
  }
  for (int n = 0; n < 32; ++n) out[n] = r[n];
}

struct ShiftTables {
  uint32_t m[kPowers][32];
  ShiftTables() {
    // One zero bit through the reflected register: bit 0 feeds the polynomial back, the others
    // move down one place; eight of them make one zero byte, then each power squares the last.
    uint32_t bit[32];
    bit[0] = 0x82F63B78u;
    for (int n = 1; n < 32; ++n) bit[n] = 1u << (n - 1);
    for (int i = 0; i < 3; ++i) Compose(bit, bit, bit);
    for (int n = 0; n < 32; ++n) m[0][n] = bit[n];
    for (int k = 1; k < kPowers; ++k) Compose(m[k - 1], m[k - 1], m[k]);
  }
};

}  // namespace

cudaError_t PrepareCrc32c(int device) {
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  static const ShiftTables tables;
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
