#include <mutex>

#include "transport/device/crc32c_device.cuh"
#include "transport/device/crc32c_kernel.h"

namespace leapcache::transport {
namespace {

namespace device_crc = crc32c_device;

// Each thread checksums one chunk, its warp's 32 chunks combine into the warp's CRC, the
// block's 8 warps into the block's, and each block's is carried to the end of the bytes and
// XORed into the result: CRC(A || B) = Carry(CRC(A), |B|) ^ CRC(B), so the combines take one
// carry matrix each, over a fixed distance (a chunk, a warp's bytes, ...), instead of every
// chunk carrying its CRC across all the bytes after it (the earlier design: 10-20 matrix
// products per 256 bytes, the kernel's largest cost). Chunks are counted back from the end of
// the bytes, so every chunk right of another is whole and the fixed distances hold; only the
// first is short, and the chunks left of it are empty (CRC 0, which carries to 0). The bytes
// past the last 16-byte boundary (the tail) are checksummed alone and folded in last.
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunkLog = 8;  // 256 bytes a thread: 16 aligned 16-byte loads
constexpr int64_t kChunk = int64_t{1} << kChunkLog;
constexpr int kWarpLog = kChunkLog + 5;
constexpr int kBlockLog = kWarpLog + 3;
constexpr int kMaxDevices = 64;

// kShift[k]: the 32 x 32 GF(2) matrix (its columns) that carries a CRC register across 2^k
// zero bytes.
__constant__ uint32_t kShift[device_crc::kPowers][32];

// Byte tables for slicing by four: t[0] the byte table, t[k][i] byte i followed by k zero bytes.
__device__ void FillSliceTables(uint32_t (*t)[256]) {
  device_crc::FillTable(t[0]);
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    uint32_t c = t[0][i];
    for (int k = 1; k < 4; ++k) {
      c = (c >> 8) ^ t[0][c & 0xFF];
      t[k][i] = c;
    }
  }
  __syncthreads();
}

__device__ __forceinline__ uint32_t Word(const uint32_t (*t)[256], uint32_t c, uint32_t w) {
  c ^= w;
  return t[3][c & 0xFF] ^ t[2][(c >> 8) & 0xFF] ^ t[1][(c >> 16) & 0xFF] ^ t[0][c >> 24];
}

// CRC-32C (the plain checksum) of data[begin, end): bytes up to a 16-byte boundary, then 16 at a
// time, then the rest.
__device__ uint32_t ChunkCrc(const uint32_t (*t)[256], const uint8_t* data, int64_t begin,
                             int64_t end) {
  uint32_t c = ~0u;
  int64_t at = begin;
  for (; at < end && ((reinterpret_cast<uintptr_t>(data) + at) & 15) != 0; ++at) {
    c = t[0][(c ^ data[at]) & 0xFF] ^ (c >> 8);
  }
  const uint4* v = reinterpret_cast<const uint4*>(data + at);
  const int64_t vectors = (end - at) / 16;
  int64_t i = 0;
  // Four loads in flight ahead of the table walk that consumes them.
  for (; i + 4 <= vectors; i += 4) {
    uint4 x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = v[i + j];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      c = Word(t, c, x[j].x);
      c = Word(t, c, x[j].y);
      c = Word(t, c, x[j].z);
      c = Word(t, c, x[j].w);
    }
  }
  for (; i < vectors; ++i) {
    const uint4 x = v[i];
    c = Word(t, Word(t, Word(t, Word(t, c, x.x), x.y), x.z), x.w);
  }
  for (at += vectors * 16; at < end; ++at) c = t[0][(c ^ data[at]) & 0xFF] ^ (c >> 8);
  return ~c;
}

// `main` bytes end on a 16-byte boundary; `tail` bytes follow them. blocks * kThreads chunks
// cover the main bytes (the first blocks' leading chunks may be empty).
__global__ void __launch_bounds__(kThreads)
    Crc32cKernel(const uint8_t* data, int64_t main, int64_t tail, uint32_t* out) {
  __shared__ uint32_t tables[4][256];
  __shared__ uint32_t warp_crc[kWarps];
  FillSliceTables(tables);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t chunks = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t end = main - (chunks - 1 - g) * kChunk;
  uint32_t v = end > 0 ? ChunkCrc(tables, data, end - kChunk > 0 ? end - kChunk : 0, end) : 0;
  // The warp's chunks, pairwise: the left part carried across the right one.
#pragma unroll
  for (int l = 0; l < 5; ++l) {
    const uint32_t right = __shfl_down_sync(0xFFFFFFFFu, v, 1 << l);
    if ((lane & ((2 << l) - 1)) == 0) v = device_crc::Times(kShift[kChunkLog + l], v) ^ right;
  }
  if (lane == 0) warp_crc[warp] = v;
  __syncthreads();
  if (warp != 0) return;
  v = lane < kWarps ? warp_crc[lane] : 0;
#pragma unroll
  for (int l = 0; l < 3; ++l) {
    const uint32_t right = __shfl_down_sync(0xFFFFFFFFu, v, 1 << l);
    if ((lane & ((2 << l) - 1)) == 0) v = device_crc::Times(kShift[kWarpLog + l], v) ^ right;
  }
  if (lane != 0) return;
  // The block's bytes carried across the blocks after it and the tail.
  v = device_crc::Carry(
      kShift, v,
      static_cast<uint64_t>(gridDim.x - 1 - blockIdx.x) * (uint64_t{1} << kBlockLog) + tail);
  if (blockIdx.x == gridDim.x - 1 && tail > 0) {
    v ^= ChunkCrc(tables, data, main, main + tail);
  }
  atomicXor(out, v);
}

static_assert(kBlockLog == kChunkLog + 8, "a block is kThreads chunks");

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
  if (bytes == 0) return cudaSuccess;
  if (bytes > (size_t{1} << (device_crc::kPowers - 1))) return cudaErrorInvalidValue;
  const auto* p = static_cast<const uint8_t*>(data);
  // The tail: the bytes past the last 16-byte boundary (all of them if there is none).
  const size_t past = (reinterpret_cast<uintptr_t>(p) + bytes) % 16;
  const size_t tail = past < bytes ? past : bytes;
  const size_t main = bytes - tail;
  const size_t chunks = (main + kChunk - 1) / kChunk;
  const size_t blocks = chunks == 0 ? 1 : (chunks + kThreads - 1) / kThreads;
  if (blocks > 0x7FFFFFFFu) return cudaErrorInvalidValue;
  Crc32cKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      p, static_cast<int64_t>(main), static_cast<int64_t>(tail), crc);
  return cudaGetLastError();
}

}  // namespace leapcache::transport
