// Host-side support shared by the launchers: argument validation (every message names the
// argument) and device facts.
#include "gpu/kernels/launch_support.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

namespace leapcache::kernels {

namespace {

bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

Status ValidateStepParams(const StepParams& p, int dk) {
  if (p.batch < 0) return InvalidArgumentError("batch must be >= 0 (got " + std::to_string(p.batch) + ")");
  if (p.num_heads < 1) {
    return InvalidArgumentError("num_heads must be >= 1 (got " + std::to_string(p.num_heads) + ")");
  }
  if (p.in_dtype != DType::kFp32 && p.in_dtype != DType::kBf16) {
    return InvalidArgumentError("in_dtype must be fp32 or bf16");
  }
  if (p.out_dtype != DType::kFp32 && p.out_dtype != DType::kBf16) {
    return InvalidArgumentError("out_dtype must be fp32 or bf16");
  }
  if (!std::isfinite(p.scale) || p.scale == 0.0f) {
    return InvalidArgumentError("scale must be finite and non-zero (got " +
                                std::to_string(p.scale) + ")");
  }
  if (p.batch == 0) return OkStatus();
  const struct {
    const char* name;
    const void* ptr;
  } ptrs[] = {{"slot", p.slot}, {"q", p.q}, {"k", p.k}, {"v", p.v},
              {"g", p.g},       {"beta", p.beta}, {"o", p.o}};
  for (const auto& x : ptrs) {
    if (x.ptr == nullptr) return InvalidArgumentError(std::string(x.name) + " is null");
    if (!Aligned(x.ptr, 4)) return InvalidArgumentError(std::string(x.name) + " must be 4-byte aligned");
  }
  if (static_cast<int64_t>(p.batch) * p.num_heads > (int64_t{1} << 31) / dk) {
    return InvalidArgumentError("batch * num_heads is too large for one launch");
  }
  return OkStatus();
}

Status ValidateWindowStep(const PoolLayout& layout, const StepParams& p, const void* pool) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateStepParams(p, kKernelDim));
  LEAPCACHE_RETURN_IF_ERROR(ValidatePoolLayout(layout, pool));
  if (p.num_heads != layout.num_heads()) {
    return InvalidArgumentError("num_heads " + std::to_string(p.num_heads) +
                                " differs from the pool's " + std::to_string(layout.num_heads()));
  }
  return OkStatus();
}

bool WindowKernelsServe(const BlobSpec& spec) {
  return spec.codec == Codec::kLeap && (spec.bits == 8 || spec.bits == 6 || spec.bits == 4) &&
         spec.dk == kKernelDim && spec.dv == kKernelDim;
}

Status ValidatePoolLayout(const PoolLayout& l, const void* pool) {
  if (l.empty()) return InvalidArgumentError("pool layout is empty (make it with MakePoolLayout)");
  if (pool == nullptr) return InvalidArgumentError("pool is null");
  if (!Aligned(pool, 128)) return InvalidArgumentError("pool must be 128-byte aligned");
  return ValidateLayoutSpec(l);
}

Status ValidateLayoutSpec(const PoolLayout& l) {
  if (l.empty()) return InvalidArgumentError("pool layout is empty (make it with MakePoolLayout)");
  if (l.spec().dk != kKernelDim || l.spec().dv != kKernelDim) {
    return InvalidArgumentError(
        "kernels are built for dk = dv = 128 (pool has dk = " + std::to_string(l.spec().dk) +
        ", dv = " + std::to_string(l.spec().dv) + ")");
  }
  if (!WindowKernelsServe(l.spec())) {
    return InvalidArgumentError("the window kernels run the 8-, 6- and 4-bit leap codec (pool is " +
                                l.spec().ToString() + ")");
  }
  return OkStatus();
}

Status ValidateRegionBatch(const PoolLayout& layout, const int32_t* slot, int batch) {
  if (batch < 0) {
    return InvalidArgumentError("batch must be >= 0 (got " + std::to_string(batch) + ")");
  }
  if (batch > 0 && slot == nullptr) return InvalidArgumentError("slot is null");
  if (!Aligned(slot, 4)) return InvalidArgumentError("slot must be 4-byte aligned");
  // One CTA (encode, decode) or one work item (refit) per head, indexed by int.
  if (static_cast<int64_t>(batch) * layout.num_heads() > INT32_MAX) {
    return InvalidArgumentError("batch * num_heads is too large for one launch (" +
                                std::to_string(batch) + " x " + std::to_string(layout.num_heads()) +
                                ")");
  }
  return OkStatus();
}

Status ValidatePayloadDecodeParams(const PoolLayout& layout, const PayloadDecodeParams& p) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateLayoutSpec(layout));
  if (p.batch < 0) {
    return InvalidArgumentError("batch must be >= 0 (got " + std::to_string(p.batch) + ")");
  }
  if (p.batch == 0) return OkStatus();
  if (p.payloads == nullptr) return InvalidArgumentError("payloads is null");
  if (!Aligned(p.payloads, alignof(const uint8_t*))) {
    return InvalidArgumentError("payloads must be aligned to a pointer");
  }
  DenseParams dense;
  dense.batch = p.batch;
  dense.states = p.states;
  dense.dtype = p.dtype;
  dense.layout = p.layout;
  LEAPCACHE_RETURN_IF_ERROR(ValidateDenseParams(dense));
  const uint64_t state_bytes =
      uint64_t{kKernelDim} * kKernelDim * (p.dtype == DType::kFp32 ? 4 : 2);
  const uint64_t pair_bytes = p.dtype == DType::kFp32 ? 8 : 4;
  if (p.stride_bytes < state_bytes || p.stride_bytes % pair_bytes != 0) {
    return InvalidArgumentError("stride_bytes (" + std::to_string(p.stride_bytes) +
                                ") must be at least a state's " + std::to_string(state_bytes) +
                                " bytes and a multiple of two elements (" +
                                std::to_string(pair_bytes) + " bytes)");
  }
  return OkStatus();
}

Status ValidateDenseParams(const DenseParams& p) {
  if (p.batch > 0 && p.states == nullptr) return InvalidArgumentError("states is null");
  if (p.dtype != DType::kFp32 && p.dtype != DType::kBf16) {
    return InvalidArgumentError("dtype must be fp32 or bf16");
  }
  if (p.layout != Orientation::kKV && p.layout != Orientation::kVK) {
    return InvalidArgumentError("layout must be kv or vk");
  }
  // The kernels move states two elements at a time.
  const size_t pair_bytes = p.dtype == DType::kFp32 ? 8 : 4;
  if (!Aligned(p.states, pair_bytes)) {
    return InvalidArgumentError("states must be aligned to two elements (" +
                                std::to_string(pair_bytes) + " bytes)");
  }
  return OkStatus();
}

int CurrentDevice() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

int SmCount() {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> counts{};  // 0: not read yet
  const int dev = CurrentDevice();
  if (dev < 0 || dev >= kMaxDevices) return 1;
  int n = counts[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    n = n > 0 ? n : 1;
    counts[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace leapcache::kernels
