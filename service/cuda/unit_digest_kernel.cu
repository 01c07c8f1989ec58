#include <mutex>

#include "service/cuda/unit_digest_kernel.h"
#include "transport/device/crc32c_device.cuh"

namespace leapcache::cuda {
namespace {

namespace device_crc = transport::crc32c_device;
using core::UnitDigest;
using core::UnitLayout;
using core::ValueRule;

// A unit of a put is tens of KB (a 128 x 128 head at 8 bits: 19.6 KB, 77 chunks), so one block
// of 128 threads covers it in one or two rounds of chunks; a checkpoint's thousand units fill the
// SMs many times over.
constexpr int kThreads = 128;
constexpr uint64_t kChunk = 256;
constexpr int kMaxDevices = 64;

__constant__ uint32_t kShift[device_crc::kPowers][32];

__device__ uint32_t Load32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
__device__ uint32_t Load16(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8; }

// Whether the element at p breaks `rule` (the host's checks: CheckStoredValues, conv states).
__device__ bool Breaks(ValueRule rule, const uint8_t* p) {
  switch (rule) {
    case ValueRule::kPositiveFp32: {
      const float x = __uint_as_float(Load32(p));
      return !(x > 0.0f) || isinf(x);
    }
    case ValueRule::kFiniteFp32:
      return (Load32(p) & 0x7F800000u) == 0x7F800000u;
    case ValueRule::kFiniteBf16:
      return (Load16(p) & 0x7F80u) == 0x7F80u;
    case ValueRule::kFiniteFp16:
      return (Load16(p) & 0x7C00u) == 0x7C00u;
  }
  return false;
}

__device__ uint32_t WarpXor(uint32_t v) {
  for (int offset = 16; offset > 0; offset >>= 1) v ^= __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// The unit's bytes are cut into chunks that each lie in one part: the header [0, 64), the
// payload's 256-byte chunks up to blob_bytes, the side state's up to unit_bytes. A payload
// chunk's CRC is carried to the payload's end (they XOR to the payload's CRC), a header or side
// chunk's to the unit's end; the unit's CRC is then the payload's carried across the side state,
// XOR the rest (CRC(A || B) = Carry(CRC(A), |B|) ^ CRC(B)).
__global__ void UnitDigestKernel(const uint8_t* const* units, UnitLayout layout,
                                 UnitDigest* digests) {
  __shared__ uint32_t table[256];
  __shared__ uint32_t payload_acc, direct_acc;
  __shared__ unsigned long long first_bad;
  device_crc::FillTable(table);
  if (threadIdx.x == 0) {
    payload_acc = 0;
    direct_acc = 0;
    first_bad = core::kNoBadValue;
  }
  __syncthreads();
  const uint8_t* const unit = units[blockIdx.x];
  const uint64_t blob_end = layout.blob_bytes;
  const uint64_t unit_end = layout.unit_bytes;
  const uint64_t payload_chunks = (blob_end - 64 + kChunk - 1) / kChunk;
  const uint64_t side_chunks = (unit_end - blob_end + kChunk - 1) / kChunk;
  const uint64_t chunks = 1 + payload_chunks + side_chunks;
  uint32_t payload = 0, direct = 0;
  for (uint64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    uint64_t begin, end;
    if (c == 0) {
      begin = 0;
      end = 64;
    } else if (c <= payload_chunks) {
      begin = 64 + (c - 1) * kChunk;
      end = min(begin + kChunk, blob_end);
    } else {
      begin = blob_end + (c - 1 - payload_chunks) * kChunk;
      end = min(begin + kChunk, unit_end);
    }
    const uint32_t crc = device_crc::RangeCrc(table, unit, begin, end);
    if (c != 0 && c <= payload_chunks) {
      payload ^= device_crc::Carry(kShift, crc, blob_end - end);
    } else {
      direct ^= device_crc::Carry(kShift, crc, unit_end - end);
    }
  }
  payload = WarpXor(payload);
  direct = WarpXor(direct);
  if ((threadIdx.x & 31) == 0) {
    atomicXor(&payload_acc, payload);
    atomicXor(&direct_acc, direct);
  }

  // Values: the first element that breaks its rule, lowest range first. A thread stops at its
  // first find: its later elements, and later ranges, can only rank after it.
  for (int r = 0; r < layout.num_ranges; ++r) {
    const core::ValueRange range = layout.ranges[r];
    const uint64_t width =
        range.rule == ValueRule::kFiniteBf16 || range.rule == ValueRule::kFiniteFp16 ? 2 : 4;
    const uint64_t elements = range.bytes / width;
    bool found = false;
    for (uint64_t e = threadIdx.x; e < elements; e += blockDim.x) {
      if (Breaks(range.rule, unit + range.offset + e * width)) {
        atomicMin(&first_bad,
                  static_cast<unsigned long long>(uint64_t(r) << core::kBadElementBits | e));
        found = true;
        break;
      }
    }
    if (found) break;
  }
  UnitDigest* const out = digests + blockIdx.x;
  if (threadIdx.x < core::kDigestHeaderBytes) out->header[threadIdx.x] = unit[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    out->payload_crc = payload_acc;
    out->unit_crc = direct_acc ^ device_crc::Carry(kShift, payload_acc, unit_end - blob_end);
    out->first_bad = first_bad;
  }
}

}  // namespace

cudaError_t PrepareUnitDigests(int device) {
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

cudaError_t LaunchUnitDigests(const uint8_t* const* units, size_t n, const UnitLayout& layout,
                              UnitDigest* digests, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (n > 0x7FFFFFFFu || layout.blob_bytes < 64 || layout.unit_bytes < layout.blob_bytes) {
    return cudaErrorInvalidValue;
  }
  UnitDigestKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(units, layout, digests);
  return cudaGetLastError();
}

}  // namespace leapcache::cuda
