#include "transport/device/chunk_crc32c_kernel.h"

namespace leapcache::transport {
namespace {

constexpr int kThreads = 128;

// The byte table (reflected 0x82F63B78) is built in shared memory by each block.
__global__ void ChunkCrc32c(const uint8_t* data, size_t bytes, size_t chunk, size_t chunks,
                            uint32_t* crcs) {
  __shared__ uint32_t table[256];
  for (int t = threadIdx.x; t < 256; t += blockDim.x) {
    uint32_t c = t;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    table[t] = c;
  }
  __syncthreads();
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const size_t begin = i * chunk;
  const size_t end = begin + chunk < bytes ? begin + chunk : bytes;
  uint32_t c = ~0u;
  size_t at = begin;
  // 16-byte loads where aligned, single bytes at the chunk's edges.
  for (; at < end && (reinterpret_cast<uintptr_t>(data + at) & 15) != 0; ++at) {
    c = table[(c ^ data[at]) & 0xFF] ^ (c >> 8);
  }
  for (; at + 16 <= end; at += 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(data + at);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (int j = 0; j < 4; ++j) {
      uint32_t w = words[j];
      for (int k = 0; k < 4; ++k, w >>= 8) c = table[(c ^ w) & 0xFF] ^ (c >> 8);
    }
  }
  for (; at < end; ++at) c = table[(c ^ data[at]) & 0xFF] ^ (c >> 8);
  crcs[i] = ~c;
}

}  // namespace

cudaError_t LaunchChunkCrc32c(const void* data, size_t bytes, size_t chunk, uint32_t* crcs,
                              cudaStream_t stream) {
  const size_t chunks = (bytes + chunk - 1) / chunk;
  if (chunks == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
  ChunkCrc32c<<<blocks, kThreads, 0, stream>>>(static_cast<const uint8_t*>(data), bytes, chunk,
                                               chunks, crcs);
  return cudaGetLastError();
}

}  // namespace leapcache::transport
