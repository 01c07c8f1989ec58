#include "service/cuda/kernel_decoder.h"

#include <cuda_runtime.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/pool_layout.h"
#include "service/core/status_util.h"
#include "service/cuda/cuda_result.h"

namespace leapcache::cuda {
namespace {

constexpr size_t kStateBytesMax = size_t{kernels::kKernelDim} * kernels::kKernelDim * 4;

}  // namespace

bool KernelDecoder::Supports(const BlobSpec& spec) {
  return spec.codec == Codec::kLeap && spec.bits == 8 && spec.dk == kernels::kKernelDim &&
         spec.dv == kernels::kKernelDim && ValidateSpec(spec).ok();
}

absl::StatusOr<std::unique_ptr<KernelDecoder>> KernelDecoder::Create(int device, int max_states) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no CUDA device ", device));
  }
  if (max_states <= 0) return absl::InvalidArgumentError("max_states must be positive");
  std::unique_ptr<KernelDecoder> d(new KernelDecoder(device, max_states));
  absl::MutexLock lock(&d->mu_);
  LC_RETURN_IF_ERROR(CudaResult(cudaSetDevice(device), "cudaSetDevice"));
  // The largest region of any supported spec: KDA's (a gate per key channel).
  leapcache::StatusOr<PoolLayout> kda = MakePoolLayout(
      BlobSpec::Leap(StateKind::kKda, 8, kernels::kKernelDim, kernels::kKernelDim), max_states, 1);
  if (!kda.ok()) return core::FromFormatStatus(kda.status());
  d->pool_bytes_ = kda->pool_bytes();
  std::vector<int32_t> slots(static_cast<size_t>(max_states));
  std::iota(slots.begin(), slots.end(), 0);
  for (absl::Status st :
       {CudaResult(cudaStreamCreateWithFlags(&d->stream_, cudaStreamNonBlocking),
                   "cudaStreamCreate"),
        CudaResult(cudaMalloc(&d->d_states_, kStateBytesMax * max_states), "cudaMalloc"),
        CudaResult(cudaMalloc(&d->d_pool_, d->pool_bytes_), "cudaMalloc"),
        CudaResult(cudaMallocHost(&d->h_pool_, d->pool_bytes_), "cudaMallocHost"),
        CudaResult(cudaMalloc(&d->d_slot_, sizeof(int32_t) * max_states), "cudaMalloc"),
        CudaResult(cudaMemcpy(d->d_slot_, slots.data(), sizeof(int32_t) * max_states,
                              cudaMemcpyHostToDevice),
                   "cudaMemcpy")}) {
    if (!st.ok()) return st;
  }
  return d;
}

KernelDecoder::~KernelDecoder() {
  absl::MutexLock lock(&mu_);
  cudaSetDevice(device_);
  cudaFree(d_states_);
  cudaFree(d_pool_);
  cudaFreeHost(h_pool_);
  cudaFree(d_slot_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status KernelDecoder::Decode(const BlobSpec& spec, kernels::DType dtype, Orientation layout,
                                   size_t n,
                                   absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                                   absl::FunctionRef<std::string(size_t)> describe,
                                   std::span<uint8_t> out) {
  const size_t state_bytes =
      static_cast<size_t>(spec.dk) * spec.dv * (dtype == kernels::DType::kBf16 ? 2 : 4);
  if (!Supports(spec) || n > static_cast<size_t>(max_states_) || out.size() != n * state_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("kernel decode of ", n, " states of ",
                                                   spec.ToString(), " into ", out.size(),
                                                   " bytes (at most ", max_states_, " states)"));
  }
  if (n == 0) return absl::OkStatus();
  leapcache::StatusOr<PoolLayout> pool = MakePoolLayout(spec, static_cast<int>(n), 1);
  if (!pool.ok()) return core::FromFormatStatus(pool.status());
  const uint32_t fingerprint = LayoutFingerprint(spec);
  const size_t payload = pool->payload.payload_bytes;
  absl::MutexLock lock(&mu_);
  // Every blob is checked and placed before anything is launched: a damaged one costs nothing
  // on the device. Each region becomes a fresh boundary: its payload, an empty window (n = 0,
  // G = 0); the records are never read.
  for (size_t i = 0; i < n; ++i) {
    const std::span<const uint8_t> b = blob(i);
    leapcache::StatusOr<BlobSpec> parsed = ParseBlob(b);
    if (!parsed.ok()) {
      const absl::Status st = core::FromFormatStatus(parsed.status());
      return absl::Status(st.code(), absl::StrCat(describe(i), ": ", st.message()));
    }
    if (LayoutFingerprint(*parsed) != fingerprint) {
      return absl::DataLossError(absl::StrCat(describe(i), ": the blob is ", parsed->ToString(),
                                              ", not the namespace's ", spec.ToString()));
    }
    uint8_t* const region = h_pool_ + pool->region_offset(static_cast<int>(i), 0);
    std::memcpy(region, b.data() + kHeaderBytes, payload);
    std::memset(region + pool->window_offset, 0, pool->rec_k_offset - pool->window_offset);
  }
  LC_RETURN_IF_ERROR(CudaResult(cudaSetDevice(device_), "cudaSetDevice"));
  LC_RETURN_IF_ERROR(CudaResult(
      cudaMemcpyAsync(d_pool_, h_pool_, pool->pool_bytes(), cudaMemcpyHostToDevice, stream_),
      "cudaMemcpyAsync"));
  kernels::DenseParams p;
  p.batch = static_cast<int>(n);
  p.slot = d_slot_;
  p.states = d_states_;
  p.dtype = dtype;
  p.layout = layout;
  LC_RETURN_IF_ERROR(core::FromFormatStatus(kernels::WindowDecode(*pool, p, d_pool_, stream_)));
  LC_RETURN_IF_ERROR(CudaResult(
      cudaMemcpyAsync(out.data(), d_states_, out.size(), cudaMemcpyDeviceToHost, stream_),
      "cudaMemcpyAsync"));
  return CudaResult(cudaStreamSynchronize(stream_), "decode");
}

}  // namespace leapcache::cuda
