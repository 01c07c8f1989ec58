#include "service/facade/state_encoder.h"

#include "absl/strings/str_cat.h"
#ifdef LEAPCACHE_WITH_CUDA
#include "service/cuda/kernel_encoder.h"
#endif

namespace leapcache::server {
namespace {

class CpuStateEncoder final : public StateEncoder {
 public:
  const char* BackendFor(const BlobSpec&) const override { return "cpu"; }
  absl::Status Encode(const BlobSpec& spec, const DenseFormat& format,
                      std::span<const uint8_t> states,
                      absl::FunctionRef<std::string(size_t)> describe,
                      std::vector<std::vector<uint8_t>>* blobs) override {
    const size_t state_bytes = DenseStateBytes(format, spec.dk, spec.dv);
    std::vector<float> scratch;
    for (size_t i = 0; i * state_bytes < states.size(); ++i) {
      absl::StatusOr<std::vector<uint8_t>> blob =
          EncodeDenseState(spec, format, states.subspan(i * state_bytes, state_bytes), &scratch);
      if (!blob.ok()) {
        return absl::Status(blob.status().code(), absl::StrCat("dense state of ", describe(i), ": ",
                                                               blob.status().message()));
      }
      blobs->push_back(*std::move(blob));
    }
    return absl::OkStatus();
  }
};

#ifdef LEAPCACHE_WITH_CUDA
// States per launch: a 1 MiB upload chunk holds 16 fp32 or 32 bf16 128 x 128 states.
constexpr int kKernelBatch = 64;

class KernelStateEncoder final : public StateEncoder {
 public:
  explicit KernelStateEncoder(std::unique_ptr<cuda::KernelEncoder> kernels)
      : kernels_(std::move(kernels)) {}
  const char* BackendFor(const BlobSpec& spec) const override {
    return cuda::KernelEncoder::Supports(spec) ? "cuda" : "cpu";
  }
  absl::Status Encode(const BlobSpec& spec, const DenseFormat& format,
                      std::span<const uint8_t> states,
                      absl::FunctionRef<std::string(size_t)> describe,
                      std::vector<std::vector<uint8_t>>* blobs) override {
    if (!cuda::KernelEncoder::Supports(spec)) {
      return cpu_.Encode(spec, format, states, describe, blobs);
    }
    const size_t batch_bytes = DenseStateBytes(format, spec.dk, spec.dv) * kernels_->max_states();
    const kernels::DType dtype =
        format.dtype == DenseDType::kBf16 ? kernels::DType::kBf16 : kernels::DType::kFp32;
    for (size_t at = 0; at < states.size(); at += batch_bytes) {
      const std::span<const uint8_t> part =
          states.subspan(at, std::min(batch_bytes, states.size() - at));
      if (absl::Status st = kernels_->Encode(spec, dtype, format.layout, part, blobs); !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<cuda::KernelEncoder> kernels_;
  CpuStateEncoder cpu_;
};
#endif

}  // namespace

std::unique_ptr<StateEncoder> MakeCpuStateEncoder() { return std::make_unique<CpuStateEncoder>(); }

absl::StatusOr<std::unique_ptr<StateEncoder>> MakeKernelStateEncoder(int device) {
#ifdef LEAPCACHE_WITH_CUDA
  absl::StatusOr<std::unique_ptr<cuda::KernelEncoder>> kernels =
      cuda::KernelEncoder::Create(device, kKernelBatch);
  if (!kernels.ok()) return kernels.status();
  return std::unique_ptr<StateEncoder>(new KernelStateEncoder(*std::move(kernels)));
#else
  (void)device;
  return absl::UnimplementedError("this server was built without CUDA: no kernel encoder");
#endif
}

}  // namespace leapcache::server
