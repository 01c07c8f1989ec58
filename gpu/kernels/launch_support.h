// Host-side helpers the launchers share: argument validation and device facts.
#pragma once

#include <array>
#include <mutex>
#include <optional>

#include "gpu/kernels/kernels.h"

namespace leapcache::kernels {

// Each returns INVALID_ARGUMENT naming the first bad argument; none touches the device, so the
// launchers run them before any CUDA call.
Status ValidateStepParams(const StepParams& p, int dk);
// A pool the window kernels serve: a layout MakePoolLayout made (not an empty one) for the leap
// codec at 8, 6 or 4 bits, dk = dv = kKernelDim, and a 128-byte aligned pool. The layout's
// offsets need no check: only MakePoolLayout sets them.
Status ValidatePoolLayout(const PoolLayout& l, const void* pool);
// The layout part of ValidatePoolLayout alone: for launches that read no pool.
Status ValidateLayoutSpec(const PoolLayout& l);
// A window-format step on `pool`: valid parameters, a pool the kernels serve, and the pool's
// head count.
Status ValidateWindowStep(const PoolLayout& layout, const StepParams& p, const void* pool);
// The per-region launches (refit, encode, decode): `batch` slots of `layout`'s heads.
Status ValidateRegionBatch(const PoolLayout& layout, const int32_t* slot, int batch);
Status ValidateDenseParams(const DenseParams& p);
Status ValidatePayloadDecodeParams(const PoolLayout& layout, const PayloadDecodeParams& p);

// Multiprocessors of the current device (read once per device).
int SmCount();

// The current CUDA device, or -1 if there is none.
int CurrentDevice();

// Runs `init` once per CUDA device, the first time a launcher runs on it, and returns its status
// on every call from that device. Kernel attributes (cudaFuncSetAttribute) belong to one device's
// context, so a process driving several GPUs must set them on each. One cache per call site.
template <typename Init>
Status OncePerDevice(Init&& init) {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static std::array<std::optional<Status>, kMaxDevices> done;
  const int device = CurrentDevice();
  if (device < 0 || device >= kMaxDevices) return InternalError("no current CUDA device");
  std::lock_guard<std::mutex> lock(mu);
  if (!done[device].has_value()) done[device] = init();
  return *done[device];
}

}  // namespace leapcache::kernels
