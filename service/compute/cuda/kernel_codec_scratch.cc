#include "service/compute/cuda/kernel_codec_scratch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"
#include "base/format_status.h"
#include "base/status_macros.h"
#include "gpu/format/pool_layout.h"
#include "gpu/kernels/kernels.h"

namespace leapcache::compute {

bool KernelCodecServes(const BlobSpec& spec) {
  return kernels::WindowKernelsServe(spec) && ValidateSpec(spec).ok();
}

bool DenseInPlace(const void* p, DType dtype) {
  const uintptr_t pair = dtype == DType::kFp32 ? 8 : 4;
  return reinterpret_cast<uintptr_t>(p) % pair == 0;
}

absl::StatusOr<std::unique_ptr<KernelCodecScratch>> KernelCodecScratch::Create(int device,
                                                                               int max_states) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no CUDA device ", device));
  }
  if (max_states <= 0) return absl::InvalidArgumentError("max_states must be positive");
  auto s = std::make_unique<KernelCodecScratch>();
  s->device = device;
  s->max_states = max_states;
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaSetDevice(device), "cudaSetDevice"));
  // The largest region of any served spec: KDA's (a gate per key channel), at whichever code
  // width lays out the most bytes.
  for (int bits : {8, 6, 4}) {
    leapcache::StatusOr<PoolLayout> kda = MakePoolLayout(
        BlobSpec::Leap(StateKind::kKda, bits, kernels::kKernelDim, kernels::kKernelDim), max_states,
        1);
    if (!kda.ok()) return base::FromFormatStatus(kda.status());
    s->pool_bytes = std::max(s->pool_bytes, kda->pool_bytes());
  }
  const size_t state_bytes = size_t{kernels::kKernelDim} * kernels::kKernelDim * 4;
  std::vector<int32_t> slots(static_cast<size_t>(max_states));
  std::iota(slots.begin(), slots.end(), 0);
  for (absl::Status st :
       {LC_CUDA_STATUS(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
                   "cudaStreamCreate"),
        LC_CUDA_STATUS(cudaMalloc(&s->states, state_bytes * max_states), "cudaMalloc"),
        LC_CUDA_STATUS(cudaMalloc(&s->pool, s->pool_bytes), "cudaMalloc"),
        LC_CUDA_STATUS(cudaMalloc(&s->slot, sizeof(int32_t) * max_states), "cudaMalloc"),
        LC_CUDA_STATUS(
            cudaMemcpy(s->slot, slots.data(), sizeof(int32_t) * max_states, cudaMemcpyHostToDevice),
            "cudaMemcpy")}) {
    if (!st.ok()) return st;
  }
  return s;
}

KernelCodecScratch::~KernelCodecScratch() {
  cudaSetDevice(device);
  cudaFree(states);
  cudaFree(pool);
  cudaFree(slot);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

}  // namespace leapcache::compute
