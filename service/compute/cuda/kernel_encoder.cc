#include "service/compute/cuda/kernel_encoder.h"

#include <cuda_runtime.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"
#include "base/format_status.h"
#include "base/status_macros.h"
#include "gpu/format/pool_layout.h"
#include "service/compute/cuda/kernel_codec_scratch.h"

namespace leapcache::compute {

bool KernelEncoder::Supports(const BlobSpec& spec) { return KernelCodecServes(spec); }

absl::StatusOr<std::unique_ptr<KernelEncoder>> KernelEncoder::Create(int device, int max_states) {
  LC_ASSIGN_OR_RETURN(std::unique_ptr<KernelCodecScratch> scratch,
                      KernelCodecScratch::Create(device, max_states));
  uint8_t* h_payloads = nullptr;
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(cudaMallocHost(&h_payloads, scratch->pool_bytes), "cudaMallocHost"));
  return std::unique_ptr<KernelEncoder>(new KernelEncoder(std::move(scratch), h_payloads));
}

KernelEncoder::~KernelEncoder() { cudaFreeHost(h_payloads_); }

absl::Status KernelEncoder::Encode(const BlobSpec& spec, DType dtype, Orientation layout,
                                   ConstBytes in, std::vector<std::vector<uint8_t>>* blobs) {
  const std::span<const uint8_t> states = in.data;
  const size_t state_bytes =
      static_cast<size_t>(spec.dk) * spec.dv * (dtype == DType::kBf16 ? 2 : 4);
  const size_t n = states.size() / state_bytes;
  if (!Supports(spec) || n * state_bytes != states.size() ||
      n > static_cast<size_t>(max_states())) {
    return absl::InvalidArgumentError(absl::StrCat("kernel encode of ", states.size(), " bytes of ",
                                                   spec.ToString(), " (at most ", max_states(),
                                                   " whole states)"));
  }
  if (n == 0) return absl::OkStatus();
  leapcache::StatusOr<PoolLayout> pool = MakePoolLayout(spec, static_cast<int>(n), 1);
  if (!pool.ok()) return base::FromFormatStatus(pool.status());
  absl::MutexLock lock(&mu_);
  KernelCodecScratch& k = *scratch_;
  if (absl::Status st = LC_CUDA_STATUS(cudaSetDevice(k.device), "cudaSetDevice"); !st.ok()) return st;
  // The encode kernel only reads its states: device states aligned for it are read in place.
  void* at = nullptr;
  if (in.memory == Memory::kDevice && DenseInPlace(states.data(), dtype)) {
    at = const_cast<uint8_t*>(states.data());
  } else if (absl::Status st = LC_CUDA_STATUS(
                 cudaMemcpyAsync(k.states, states.data(), states.size(),
                                 in.memory == Memory::kDevice ? cudaMemcpyDeviceToDevice
                                                              : cudaMemcpyHostToDevice,
                                 k.stream),
                 "cudaMemcpyAsync");
             !st.ok()) {
    return st;
  }
  if (absl::Status st = base::FromFormatStatus(
          kernels::WindowEncode(*pool, k.Dense(n, dtype, layout, at), k.pool, k.stream));
      !st.ok()) {
    return st;
  }
  // Only the payloads, which start each region, gathered back to back by one strided copy: the
  // regions' window and record areas (30-50% of their bytes) hold nothing a blob keeps.
  const size_t payload = pool->payload().payload_bytes;
  if (absl::Status st =
          LC_CUDA_STATUS(cudaMemcpy2DAsync(h_payloads_, payload, k.pool, pool->region_bytes(), payload,
                                       n, cudaMemcpyDeviceToHost, k.stream),
                     "cudaMemcpy2DAsync");
      !st.ok()) {
    return st;
  }
  if (absl::Status st = LC_CUDA_STATUS(cudaStreamSynchronize(k.stream), "encode"); !st.ok()) return st;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> blob(pool->payload().blob_bytes());
    std::memcpy(blob.data() + kHeaderBytes, h_payloads_ + i * payload, payload);
    SealBlob(spec, blob);
    blobs->push_back(std::move(blob));
  }
  return absl::OkStatus();
}

}  // namespace leapcache::compute
