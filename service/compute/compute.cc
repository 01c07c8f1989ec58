#include "service/compute/compute.h"

#include "absl/strings/str_cat.h"
#ifdef LEAPCACHE_WITH_CUDA
#include "service/compute/cuda/cuda_compute.h"
#endif

namespace leapcache::compute {

const char* MemoryName(Memory memory) { return memory == Memory::kDevice ? "device" : "host"; }

absl::StatusOr<Choice> ParseChoice(std::string_view s) {
  if (s == "cpu") return Choice::kCpu;
  if (s == "cuda") return Choice::kCuda;
  if (s == "auto") return Choice::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("compute backend must be cpu, cuda or auto (got \"", std::string(s), "\")"));
}

bool CudaBuilt() {
#ifdef LEAPCACHE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

// A non-owning handle on the process-wide CPU backend, so every choice returns an owned Compute.
class CpuHandle final : public Compute {
 public:
  const char* name() const override { return CpuCompute().name(); }
  bool takes_device_memory() const override { return false; }
  const char* EncoderFor(const BlobSpec& spec) const override {
    return CpuCompute().EncoderFor(spec);
  }
  absl::Status Encode(const BlobSpec& spec, const DenseFormat& format, ConstBytes states,
                      absl::FunctionRef<std::string(size_t)> describe,
                      std::vector<std::vector<uint8_t>>* blobs) override {
    return CpuCompute().Encode(spec, format, states, describe, blobs);
  }
  const char* DecoderFor(const BlobSpec& spec) const override {
    return CpuCompute().DecoderFor(spec);
  }
  size_t DecodeBatch(const BlobSpec& spec) const override { return CpuCompute().DecodeBatch(spec); }
  absl::Status Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                      absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                      absl::FunctionRef<std::string(size_t)> describe,
                      MutableBytes out) override {
    return CpuCompute().Decode(spec, format, n, blob, describe, out);
  }
  absl::StatusOr<std::unique_ptr<LiveStates>> OpenLiveStates(const DecodeShape& shape) override {
    return CpuCompute().OpenLiveStates(shape);
  }
};

}  // namespace

bool Compute::DecodesInPlace(const BlobSpec&, const DenseFormat&, const DeviceUnits&,
                             const void*) const {
  return false;
}

absl::StatusOr<uint32_t> Compute::DecodeInPlace(const BlobSpec&, const DenseFormat&,
                                                const DeviceUnits&, std::span<uint8_t>) {
  return absl::UnimplementedError(absl::StrCat(name(), " decodes no units in place"));
}

absl::StatusOr<std::unique_ptr<Compute>> MakeCompute(Choice choice, int device) {
  if (choice == Choice::kCpu) return std::unique_ptr<Compute>(new CpuHandle());
#ifdef LEAPCACHE_WITH_CUDA
  absl::StatusOr<std::unique_ptr<CudaBackend>> cuda =
      CudaBackend::Create(device, /*cpu_live_states=*/choice == Choice::kAuto);
  if (cuda.ok()) return std::unique_ptr<Compute>(*std::move(cuda));
  if (choice == Choice::kCuda) {
    return absl::Status(cuda.status().code(),
                        absl::StrCat("compute_backend=cuda: ", cuda.status().message()));
  }
  return std::unique_ptr<Compute>(new CpuHandle());  // no device: the reference
#else
  (void)device;
  if (choice == Choice::kCuda) {
    return absl::UnimplementedError("compute_backend=cuda: this build has no CUDA backend");
  }
  return std::unique_ptr<Compute>(new CpuHandle());
#endif
}

}  // namespace leapcache::compute
