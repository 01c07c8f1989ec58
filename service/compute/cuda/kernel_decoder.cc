#include "service/compute/cuda/kernel_decoder.h"

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"
#include "base/format_status.h"
#include "base/status_macros.h"
#include "gpu/format/pool_layout.h"
#include "service/compute/cuda/kernel_codec_scratch.h"

namespace leapcache::compute {

bool KernelDecoder::Supports(const BlobSpec& spec) { return KernelCodecServes(spec); }

absl::StatusOr<std::unique_ptr<KernelDecoder>> KernelDecoder::Create(int device, int max_states) {
  LC_ASSIGN_OR_RETURN(std::unique_ptr<KernelCodecScratch> scratch,
                      KernelCodecScratch::Create(device, max_states));
  uint8_t* h_pool = nullptr;
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMallocHost(&h_pool, scratch->pool_bytes), "cudaMallocHost"));
  return std::unique_ptr<KernelDecoder>(new KernelDecoder(std::move(scratch), h_pool));
}

KernelDecoder::~KernelDecoder() { cudaFreeHost(h_pool_); }

absl::Status KernelDecoder::Decode(const BlobSpec& spec, DType dtype, Orientation layout, size_t n,
                                   absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                                   absl::FunctionRef<std::string(size_t)> describe,
                                   MutableBytes to) {
  const std::span<uint8_t> out = to.data;
  const size_t state_bytes =
      static_cast<size_t>(spec.dk) * spec.dv * (dtype == DType::kBf16 ? 2 : 4);
  if (!Supports(spec) || n > static_cast<size_t>(max_states()) || out.size() != n * state_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("kernel decode of ", n, " states of ",
                                                   spec.ToString(), " into ", out.size(),
                                                   " bytes (at most ", max_states(), " states)"));
  }
  if (n == 0) return absl::OkStatus();
  leapcache::StatusOr<PoolLayout> pool = MakePoolLayout(spec, static_cast<int>(n), 1);
  if (!pool.ok()) return base::FromFormatStatus(pool.status());
  const uint32_t fingerprint = LayoutFingerprint(spec);
  const size_t payload = pool->payload().payload_bytes;
  absl::MutexLock lock(&mu_);
  KernelCodecScratch& k = *scratch_;
  // Every blob is checked and placed before anything is launched: a damaged one costs nothing
  // on the device. Each region becomes a fresh boundary: its payload, an empty window (n = 0,
  // G = 0); the records are never read.
  for (size_t i = 0; i < n; ++i) {
    const std::span<const uint8_t> b = blob(i);
    leapcache::StatusOr<BlobSpec> parsed = ParseBlob(b);
    if (!parsed.ok()) {
      const absl::Status st = base::FromFormatStatus(parsed.status());
      return absl::Status(st.code(), absl::StrCat(describe(i), ": ", st.message()));
    }
    if (LayoutFingerprint(*parsed) != fingerprint) {
      return absl::DataLossError(absl::StrCat(describe(i), ": the blob is ", parsed->ToString(),
                                              ", not the namespace's ", spec.ToString()));
    }
    if (const absl::Status st =
            base::FromFormatStatus(CheckStoredValues(*parsed, b.subspan(kHeaderBytes)));
        !st.ok()) {
      return absl::Status(st.code(), absl::StrCat(describe(i), ": ", st.message()));
    }
    uint8_t* const region = h_pool_ + pool->region_offset(static_cast<int>(i), 0);
    std::memcpy(region, b.data() + kHeaderBytes, payload);
    std::memset(region + pool->window_offset(), 0, pool->rec_k_offset() - pool->window_offset());
  }
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaSetDevice(k.device), "cudaSetDevice"));
  // Only what a fresh boundary's decode reads: each region's payload and window header, one
  // strided copy (the record areas, 30-50% of a region, stay as they are on the device).
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(cudaMemcpy2DAsync(k.pool, pool->region_bytes(), h_pool_, pool->region_bytes(),
                                   pool->rec_k_offset(), n, cudaMemcpyHostToDevice, k.stream),
                 "cudaMemcpy2DAsync"));
  const bool in_place = to.memory == Memory::kDevice && DenseInPlace(out.data(), dtype);
  LC_RETURN_IF_ERROR(base::FromFormatStatus(kernels::WindowDecode(
      *pool, k.Dense(n, dtype, layout, in_place ? out.data() : nullptr), k.pool, k.stream)));
  if (!in_place) {
    LC_RETURN_IF_ERROR(LC_CUDA_STATUS(
        cudaMemcpyAsync(out.data(), k.states, out.size(),
                        to.memory == Memory::kDevice ? cudaMemcpyDeviceToDevice
                                                     : cudaMemcpyDeviceToHost,
                        k.stream),
        "cudaMemcpyAsync"));
  }
  return LC_CUDA_STATUS(cudaStreamSynchronize(k.stream), "decode");
}

}  // namespace leapcache::compute
