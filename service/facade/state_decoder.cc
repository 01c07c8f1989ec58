#include "service/facade/state_decoder.h"

#include <vector>

#include "absl/strings/str_cat.h"
#ifdef LEAPCACHE_WITH_CUDA
#include "service/cuda/kernel_decoder.h"
#endif

namespace leapcache::server {
namespace {

class CpuDecoder final : public StateDecoder {
 public:
  const char* BackendFor(const BlobSpec&) const override { return "cpu"; }
  size_t BatchFor(const BlobSpec&) const override { return 1; }
  absl::Status Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                      absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                      absl::FunctionRef<std::string(size_t)> describe,
                      std::span<uint8_t> out) override {
    const size_t state_bytes = DenseStateBytes(format, spec.dk, spec.dv);
    thread_local std::vector<float> scratch;
    for (size_t i = 0; i < n; ++i) {
      if (absl::Status st = DecodeDenseState(blob(i), format,
                                             out.subspan(i * state_bytes, state_bytes), &scratch);
          !st.ok()) {
        return absl::Status(st.code(), absl::StrCat(describe(i), ": ", st.message()));
      }
    }
    return absl::OkStatus();
  }
};

#ifdef LEAPCACHE_WITH_CUDA
// States per launch: 4 MiB of fp32 (2 MiB of bf16) states out, a few MiB of regions in.
constexpr int kKernelBatch = 64;

class KernelStateDecoder final : public StateDecoder {
 public:
  explicit KernelStateDecoder(std::unique_ptr<cuda::KernelDecoder> kernels)
      : kernels_(std::move(kernels)) {}
  const char* BackendFor(const BlobSpec& spec) const override {
    return cuda::KernelDecoder::Supports(spec) ? "cuda" : "cpu";
  }
  size_t BatchFor(const BlobSpec& spec) const override {
    return cuda::KernelDecoder::Supports(spec) ? static_cast<size_t>(kernels_->max_states()) : 1;
  }
  absl::Status Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                      absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                      absl::FunctionRef<std::string(size_t)> describe,
                      std::span<uint8_t> out) override {
    if (!cuda::KernelDecoder::Supports(spec)) {
      return CpuStateDecoder().Decode(spec, format, n, blob, describe, out);
    }
    const kernels::DType dtype =
        format.dtype == DenseDType::kBf16 ? kernels::DType::kBf16 : kernels::DType::kFp32;
    return kernels_->Decode(spec, dtype, format.layout, n, blob, describe, out);
  }

 private:
  std::unique_ptr<cuda::KernelDecoder> kernels_;
};
#endif

}  // namespace

StateDecoder& CpuStateDecoder() {
  static CpuDecoder* const decoder = new CpuDecoder();
  return *decoder;
}

absl::StatusOr<std::unique_ptr<StateDecoder>> MakeKernelStateDecoder(int device) {
#ifdef LEAPCACHE_WITH_CUDA
  absl::StatusOr<std::unique_ptr<cuda::KernelDecoder>> kernels =
      cuda::KernelDecoder::Create(device, kKernelBatch);
  if (!kernels.ok()) return kernels.status();
  return std::unique_ptr<StateDecoder>(new KernelStateDecoder(*std::move(kernels)));
#else
  (void)device;
  return absl::UnimplementedError("this server was built without CUDA: no kernel decoder");
#endif
}

}  // namespace leapcache::server
