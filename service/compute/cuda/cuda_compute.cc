#include "service/compute/cuda/cuda_compute.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"
#include "base/status_macros.h"
#include "service/compute/cuda/cuda_live_states.h"

namespace leapcache::compute {
namespace {

// States per launch: 4 MiB of fp32 (2 MiB of bf16) 128 x 128 states, a few MiB of regions.
constexpr int kKernelBatch = 64;

DType KernelDType(DType dtype) { return dtype == DType::kBf16 ? DType::kBf16 : DType::kFp32; }

// A copy between host and this backend's device memory, synchronous (the CPU reference's
// staging for formats without kernels).
absl::Status Copy(int device, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaSetDevice(device), "cudaSetDevice"));
  return LC_CUDA_STATUS(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device, bool cpu_live_states) {
  LC_ASSIGN_OR_RETURN(std::unique_ptr<KernelEncoder> encoder,
                      KernelEncoder::Create(device, kKernelBatch));
  LC_ASSIGN_OR_RETURN(std::unique_ptr<KernelDecoder> decoder,
                      KernelDecoder::Create(device, kKernelBatch));
  return std::unique_ptr<CudaBackend>(
      new CudaBackend(device, cpu_live_states, std::move(encoder), std::move(decoder)));
}

const char* CudaBackend::EncoderFor(const BlobSpec& spec) const {
  return KernelEncoder::Supports(spec) ? "cuda" : "cpu";
}

absl::Status CudaBackend::Encode(const BlobSpec& spec, const DenseFormat& format,
                                 ConstBytes states, absl::FunctionRef<std::string(size_t)> describe,
                                 std::vector<std::vector<uint8_t>>* blobs) {
  if (!KernelEncoder::Supports(spec)) {
    if (states.memory == Memory::kHost) {
      return CpuCompute().Encode(spec, format, states, describe, blobs);
    }
    std::vector<uint8_t> host(states.data.size());
    LC_RETURN_IF_ERROR(Copy(device_, host.data(), states.data.data(), host.size(),
                            cudaMemcpyDeviceToHost));
    return CpuCompute().Encode(spec, format, {host, Memory::kHost}, describe, blobs);
  }
  const size_t batch_bytes = DenseStateBytes(format, spec.dk, spec.dv) * encoder_->max_states();
  for (size_t at = 0; at < states.data.size(); at += batch_bytes) {
    const ConstBytes part{
        states.data.subspan(at, std::min(batch_bytes, states.data.size() - at)), states.memory};
    LC_RETURN_IF_ERROR(
        encoder_->Encode(spec, KernelDType(format.dtype), format.layout, part, blobs));
  }
  return absl::OkStatus();
}

const char* CudaBackend::DecoderFor(const BlobSpec& spec) const {
  return KernelDecoder::Supports(spec) ? "cuda" : "cpu";
}

size_t CudaBackend::DecodeBatch(const BlobSpec& spec) const {
  return KernelDecoder::Supports(spec) ? static_cast<size_t>(decoder_->max_states()) : 1;
}

absl::Status CudaBackend::Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                                 absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                                 absl::FunctionRef<std::string(size_t)> describe,
                                 MutableBytes out) {
  if (!KernelDecoder::Supports(spec)) {
    if (out.memory == Memory::kHost) {
      return CpuCompute().Decode(spec, format, n, blob, describe, out);
    }
    std::vector<uint8_t> host(out.data.size());
    LC_RETURN_IF_ERROR(
        CpuCompute().Decode(spec, format, n, blob, describe, {host, Memory::kHost}));
    return Copy(device_, out.data.data(), host.data(), host.size(), cudaMemcpyHostToDevice);
  }
  return decoder_->Decode(spec, KernelDType(format.dtype), format.layout, n, blob, describe, out);
}

bool CudaBackend::DecodesInPlace(const BlobSpec& spec, const DenseFormat& format,
                                 const DeviceUnits& units, const void* out) const {
  return format.dtype == KernelDType(format.dtype) &&
         KernelDecoder::DecodesInPlace(spec, format.dtype, units, out);
}

absl::StatusOr<uint32_t> CudaBackend::DecodeInPlace(const BlobSpec& spec, const DenseFormat& format,
                                                    const DeviceUnits& units,
                                                    std::span<uint8_t> out) {
  return decoder_->DecodeInPlace(spec, format.dtype, format.layout, units, out);
}

absl::StatusOr<std::unique_ptr<LiveStates>> CudaBackend::OpenLiveStates(const DecodeShape& shape) {
  absl::StatusOr<std::unique_ptr<CudaLiveStates>> cuda = CudaLiveStates::Create(shape, device_);
  if (cuda.ok()) return std::unique_ptr<LiveStates>(*std::move(cuda));
  // Falls back only when the kernels cannot serve this session, not on real failures.
  if (cpu_live_states_ && (absl::IsUnimplemented(cuda.status()) ||
                           absl::IsUnavailable(cuda.status()))) {
    return CpuCompute().OpenLiveStates(shape);
  }
  return cuda.status();
}

}  // namespace leapcache::compute
