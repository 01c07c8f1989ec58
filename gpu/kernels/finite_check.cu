// FindNonFinite: the device side of the rule that a step's inputs are checked finite before any
// state moves, for inputs that are already in device memory (an engine's buffer mapped over CUDA
// IPC). It must cost little beside the step it guards: it reads each array once (about 6 MB of
// bf16 q, k, v at B = 256, H = 32: a few microseconds at HBM speed) with 16-byte loads where the
// array is 16-byte aligned, and does no work per element beyond an exponent test. The index it
// reports is the first non-finite element's (atomicMin over the offenders), so the error names
// the same element the host check (decode_session.cc) names. FindNonFiniteAndGate is the same
// scan whose last CTA also acts on the answers, for a step queued behind it on one stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/kernels.h"

namespace leapcache::kernels {
namespace {

constexpr int kThreads = 256;

struct FiniteArgs {
  FiniteCheck check[kMaxFiniteChecks];
  unsigned long long* first;
};

// An all-ones exponent is an infinity or a NaN: `mask` is the exponent field of the element's
// type (bf16 0x7F80, fp16 0x7C00, fp32 0x7F800000).
__device__ __forceinline__ bool NonFinite(uint32_t bits, uint32_t mask) {
  return (bits & mask) == mask;
}

// The lowest index of a non-finite element among the 16 bytes at element `base` (8 bf16/fp16
// lanes or 4 fp32 lanes), or ~0 if all are finite.
__device__ __forceinline__ unsigned long long FirstInWord(uint4 w, bool wide, uint32_t mask,
                                                          unsigned long long base) {
  const uint32_t part[4] = {w.x, w.y, w.z, w.w};
  for (int i = 0; i < 4; ++i) {
    if (wide) {
      if (NonFinite(part[i], mask)) return base + i;
    } else {
      if (NonFinite(part[i] & 0xFFFFu, mask)) return base + 2 * i;
      if (NonFinite(part[i] >> 16, mask)) return base + 2 * i + 1;
    }
  }
  return ~0ull;
}

// The first non-finite element of array blockIdx.y that this thread sees, or ~0: a grid-stride
// loop over its 16-byte words, then its tail elements.
__device__ unsigned long long ScanForNonFinite(const FiniteCheck& c) {
  const bool wide = c.dtype == DType::kFp32;
  const uint32_t mask = wide ? 0x7F800000u : c.dtype == DType::kBf16 ? 0x7F80u : 0x7C00u;
  const int lanes = wide ? 4 : 8;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t t0 = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool aligned = (reinterpret_cast<uintptr_t>(c.data) & 15) == 0;
  const uint64_t words = aligned ? c.count / lanes : 0;
  unsigned long long found = ~0ull;
  const uint4* w = static_cast<const uint4*>(c.data);
  for (uint64_t i = t0; i < words && found == ~0ull; i += stride) {
    found = FirstInWord(__ldg(w + i), wide, mask, i * lanes);
  }
  // The tail, or all of an array that is not 16-byte aligned: byte loads, since an engine's
  // packed buffer gives no element alignment either (a misaligned wide load is a fault that
  // poisons the whole CUDA context).
  const uint8_t* bytes = static_cast<const uint8_t*>(c.data);
  const int width = wide ? 4 : 2;
  for (uint64_t e = words * lanes + t0; e < c.count && found == ~0ull; e += stride) {
    uint32_t bits = 0;
    for (int b = 0; b < width; ++b) bits |= static_cast<uint32_t>(bytes[e * width + b]) << (8 * b);
    if (NonFinite(bits, mask)) found = e;
  }
  return found;
}

__global__ void __launch_bounds__(kThreads) FindNonFiniteKernel(FiniteArgs a) {
  const unsigned long long found = ScanForNonFinite(a.check[blockIdx.y]);
  if (found != ~0ull) atomicMin(a.first + blockIdx.y, found);
}

struct GateArgs {
  FiniteCheck check[kMaxFiniteChecks];
  int count;
  StepGate gate;
};

// The scan, then the last CTA to finish acts on the answers. scratch[i] holds ~(the lowest
// offender of array i) by atomicMax, so that its resting value is 0 (none); scratch[count]
// counts the CTAs that finished. The last one publishes the answers, pads the slots if one
// names an element, and puts the scratch back to zero for the next launch.
__global__ void __launch_bounds__(kThreads) FindNonFiniteAndGateKernel(GateArgs a) {
  __shared__ bool last, bad;
  unsigned long long* scratch = reinterpret_cast<unsigned long long*>(a.gate.scratch);
  const unsigned long long found = ScanForNonFinite(a.check[blockIdx.y]);
  if (found != ~0ull) atomicMax(scratch + blockIdx.y, ~found);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this CTA's offenders are visible before it counts itself done
    const unsigned long long total = static_cast<unsigned long long>(gridDim.x) * gridDim.y;
    last = atomicAdd(scratch + a.count, 1ull) == total - 1;
  }
  __syncthreads();
  if (!last) return;
  if (threadIdx.x == 0) {
    __threadfence();
    bad = false;
    for (int i = 0; i < a.count; ++i) {
      const unsigned long long seen = atomicExch(scratch + i, 0ull);
      a.gate.answer[i] = ~seen;  // 0 (none) reads as UINT64_MAX
      bad |= seen != 0;
    }
    scratch[a.count] = 0;
  }
  __syncthreads();
  if (!bad) return;
  for (int b = static_cast<int>(threadIdx.x); b < a.gate.batch; b += kThreads) a.gate.slot[b] = -1;
}

Status CheckArray(const FiniteCheck& c, int i) {
  if (c.dtype != DType::kFp32 && c.dtype != DType::kBf16 && c.dtype != DType::kFp16) {
    return InvalidArgumentError("FindNonFinite: array " + std::to_string(i) +
                                " has no floating-point dtype");
  }
  if (c.data == nullptr && c.count != 0) {
    return InvalidArgumentError("FindNonFinite: array " + std::to_string(i) + " is null");
  }
  return OkStatus();
}

// Enough CTAs to cover the longest array in 16-byte words once, at most a few waves' worth.
unsigned Blocks(uint64_t longest) {
  const uint64_t words = (longest + 7) / 8;
  return static_cast<unsigned>(
      std::max<uint64_t>(1, std::min<uint64_t>(1024, (words + kThreads - 1) / kThreads)));
}

}  // namespace

Status FindNonFinite(const FiniteCheck* checks, int count, uint64_t* first, cudaStream_t stream) {
  if (count < 1 || count > kMaxFiniteChecks) {
    return InvalidArgumentError("FindNonFinite takes 1.." + std::to_string(kMaxFiniteChecks) +
                                " arrays, got " + std::to_string(count));
  }
  if (first == nullptr) return InvalidArgumentError("FindNonFinite: first is null");
  FiniteArgs args{};
  uint64_t longest = 0;
  for (int i = 0; i < count; ++i) {
    LEAPCACHE_RETURN_IF_ERROR(CheckArray(checks[i], i));
    args.check[i] = checks[i];
    longest = std::max(longest, checks[i].count);
  }
  args.first = reinterpret_cast<unsigned long long*>(first);
  LEAPCACHE_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(first, 0xFF, sizeof(uint64_t) * static_cast<size_t>(count), stream));
  FindNonFiniteKernel<<<dim3(Blocks(longest), static_cast<unsigned>(count)), kThreads, 0, stream>>>(
      args);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

Status FindNonFiniteAndGate(const FiniteCheck* checks, int count, const StepGate& gate,
                            cudaStream_t stream) {
  if (count < 1 || count > kMaxFiniteChecks) {
    return InvalidArgumentError("FindNonFiniteAndGate takes 1.." +
                                std::to_string(kMaxFiniteChecks) + " arrays, got " +
                                std::to_string(count));
  }
  if (gate.answer == nullptr || gate.scratch == nullptr || gate.batch < 0 ||
      (gate.slot == nullptr && gate.batch > 0)) {
    return InvalidArgumentError(
        "FindNonFiniteAndGate: null answer, scratch or slots, or a negative batch");
  }
  GateArgs args{};
  uint64_t longest = 0;
  for (int i = 0; i < count; ++i) {
    LEAPCACHE_RETURN_IF_ERROR(CheckArray(checks[i], i));
    args.check[i] = checks[i];
    longest = std::max(longest, checks[i].count);
  }
  args.count = count;
  args.gate = gate;
  FindNonFiniteAndGateKernel<<<dim3(Blocks(longest), static_cast<unsigned>(count)), kThreads, 0,
                               stream>>>(args);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
