#include "service/cuda/kernel_encoder.h"

#include <cuda_runtime.h>

#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "gpu/pool_layout.h"
#include "service/core/status_util.h"
#include "service/cuda/cuda_result.h"

namespace leapcache::cuda {
namespace {

constexpr size_t kStateBytesMax = size_t{kernels::kKernelDim} * kernels::kKernelDim * 4;

}  // namespace

bool KernelEncoder::Supports(const BlobSpec& spec) {
  return spec.codec == Codec::kLeap && spec.bits == 8 && spec.dk == kernels::kKernelDim &&
         spec.dv == kernels::kKernelDim && ValidateSpec(spec).ok();
}

absl::StatusOr<std::unique_ptr<KernelEncoder>> KernelEncoder::Create(int device, int max_states) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no CUDA device ", device));
  }
  if (max_states <= 0) return absl::InvalidArgumentError("max_states must be positive");
  std::unique_ptr<KernelEncoder> e(new KernelEncoder(device, max_states));
  absl::MutexLock lock(&e->mu_);
  if (absl::Status st = CudaResult(cudaSetDevice(device), "cudaSetDevice"); !st.ok()) return st;
  // The largest region of any supported spec: KDA's (a gate per key channel).
  leapcache::StatusOr<PoolLayout> kda = MakePoolLayout(
      BlobSpec::Leap(StateKind::kKda, 8, kernels::kKernelDim, kernels::kKernelDim), max_states, 1);
  if (!kda.ok()) return core::FromFormatStatus(kda.status());
  e->pool_bytes_ = kda->pool_bytes();
  std::vector<int32_t> slots(static_cast<size_t>(max_states));
  std::iota(slots.begin(), slots.end(), 0);
  for (absl::Status st :
       {CudaResult(cudaStreamCreateWithFlags(&e->stream_, cudaStreamNonBlocking),
                   "cudaStreamCreate"),
        CudaResult(cudaMalloc(&e->d_states_, kStateBytesMax * max_states), "cudaMalloc"),
        CudaResult(cudaMalloc(&e->d_pool_, e->pool_bytes_), "cudaMalloc"),
        CudaResult(cudaMalloc(&e->d_slot_, sizeof(int32_t) * max_states), "cudaMalloc"),
        CudaResult(cudaMemcpy(e->d_slot_, slots.data(), sizeof(int32_t) * max_states,
                              cudaMemcpyHostToDevice),
                   "cudaMemcpy")}) {
    if (!st.ok()) return st;
  }
  return e;
}

KernelEncoder::~KernelEncoder() {
  absl::MutexLock lock(&mu_);
  cudaSetDevice(device_);
  cudaFree(d_states_);
  cudaFree(d_pool_);
  cudaFree(d_slot_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status KernelEncoder::Encode(const BlobSpec& spec, kernels::DType dtype, Orientation layout,
                                   std::span<const uint8_t> states,
                                   std::vector<std::vector<uint8_t>>* blobs) {
  const size_t state_bytes =
      static_cast<size_t>(spec.dk) * spec.dv * (dtype == kernels::DType::kBf16 ? 2 : 4);
  const size_t n = states.size() / state_bytes;
  if (!Supports(spec) || n * state_bytes != states.size() || n > static_cast<size_t>(max_states_)) {
    return absl::InvalidArgumentError(absl::StrCat("kernel encode of ", states.size(), " bytes of ",
                                                   spec.ToString(), " (at most ", max_states_,
                                                   " whole states)"));
  }
  if (n == 0) return absl::OkStatus();
  leapcache::StatusOr<PoolLayout> pool = MakePoolLayout(spec, static_cast<int>(n), 1);
  if (!pool.ok()) return core::FromFormatStatus(pool.status());
  absl::MutexLock lock(&mu_);
  if (absl::Status st = CudaResult(cudaSetDevice(device_), "cudaSetDevice"); !st.ok()) return st;
  if (absl::Status st = CudaResult(
          cudaMemcpyAsync(d_states_, states.data(), states.size(), cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync");
      !st.ok()) {
    return st;
  }
  kernels::DenseParams p;
  p.batch = static_cast<int>(n);
  p.slot = d_slot_;
  p.states = d_states_;
  p.dtype = dtype;
  p.layout = layout;
  if (absl::Status st = core::FromFormatStatus(kernels::WindowEncode(*pool, p, d_pool_, stream_));
      !st.ok()) {
    return st;
  }
  h_pool_.resize(pool->pool_bytes());
  if (absl::Status st = CudaResult(
          cudaMemcpyAsync(h_pool_.data(), d_pool_, h_pool_.size(), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync");
      !st.ok()) {
    return st;
  }
  if (absl::Status st = CudaResult(cudaStreamSynchronize(stream_), "encode"); !st.ok()) return st;
  const size_t payload = pool->payload.payload_bytes;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> blob(pool->payload.blob_bytes());
    std::memcpy(blob.data() + kHeaderBytes,
                h_pool_.data() + pool->region_offset(static_cast<int>(i), 0), payload);
    SealBlob(spec, blob);
    blobs->push_back(std::move(blob));
  }
  return absl::OkStatus();
}

}  // namespace leapcache::cuda
