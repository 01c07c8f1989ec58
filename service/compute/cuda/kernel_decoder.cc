#include "service/compute/cuda/kernel_decoder.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"
#include "base/format_status.h"
#include "base/status_macros.h"
#include "gpu/format/pool_layout.h"
#include "service/compute/cuda/kernel_codec_scratch.h"
#include "transport/device/copy_batch_kernel.h"
#include "transport/device/crc32c_kernel.h"

namespace leapcache::compute {

bool KernelDecoder::Supports(const BlobSpec& spec) { return KernelCodecServes(spec); }

namespace {

constexpr size_t kListBytesPerUnit = sizeof(const uint8_t*) + sizeof(transport::DeviceCopy);

size_t StateBytes(const BlobSpec& spec, DType dtype) {
  return static_cast<size_t>(spec.dk) * spec.dv * (dtype == DType::kBf16 ? 2 : 4);
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelDecoder>> KernelDecoder::Create(int device, int max_states) {
  LC_ASSIGN_OR_RETURN(std::unique_ptr<KernelCodecScratch> scratch,
                      KernelCodecScratch::Create(device, max_states));
  uint8_t* h_pool = nullptr;
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMallocHost(&h_pool, scratch->pool_bytes), "cudaMallocHost"));
  InPlaceLists lists;
  lists.capacity = kInPlaceUnits;
  const size_t list_bytes = kInPlaceUnits * kListBytesPerUnit;
  for (absl::Status st :
       {LC_CUDA_STATUS(cudaMallocHost(&lists.host, list_bytes), "cudaMallocHost"),
        LC_CUDA_STATUS(cudaMalloc(&lists.device, list_bytes), "cudaMalloc"),
        LC_CUDA_STATUS(cudaMallocHost(&lists.host_crc, sizeof(uint32_t)), "cudaMallocHost"),
        LC_CUDA_STATUS(cudaMalloc(&lists.device_crc, sizeof(uint32_t)), "cudaMalloc"),
        LC_CUDA_STATUS(transport::PrepareCrc32c(device), "PrepareCrc32c")}) {
    if (!st.ok()) {
      cudaFreeHost(h_pool);
      cudaFreeHost(lists.host);
      cudaFree(lists.device);
      cudaFreeHost(lists.host_crc);
      cudaFree(lists.device_crc);
      return st;
    }
  }
  return std::unique_ptr<KernelDecoder>(new KernelDecoder(std::move(scratch), h_pool, lists));
}

KernelDecoder::~KernelDecoder() {
  cudaSetDevice(scratch_->device);
  cudaFreeHost(h_pool_);
  cudaFreeHost(lists_.host);
  cudaFree(lists_.device);
  cudaFreeHost(lists_.host_crc);
  cudaFree(lists_.device_crc);
}

bool KernelDecoder::DecodesInPlace(const BlobSpec& spec, DType dtype, const DeviceUnits& units,
                                   const void* out) {
  if (!Supports(spec) || (dtype != DType::kBf16 && dtype != DType::kFp32)) return false;
  const uintptr_t pair = dtype == DType::kFp32 ? 8 : 4;
  if (!DenseInPlace(out, dtype) || (StateBytes(spec, dtype) + units.side_bytes) % pair != 0) {
    return false;
  }
  for (const uint8_t* unit : units.at) {
    // The kernel stages a payload 16 bytes at a time.
    if ((reinterpret_cast<uintptr_t>(unit) + kHeaderBytes) % 16 != 0) return false;
  }
  return true;
}

absl::StatusOr<uint32_t> KernelDecoder::DecodeInPlace(const BlobSpec& spec, DType dtype,
                                                      Orientation layout, const DeviceUnits& units,
                                                      std::span<uint8_t> out) {
  const size_t unit_bytes = StateBytes(spec, dtype) + units.side_bytes;
  if (!DecodesInPlace(spec, dtype, units, out.data()) ||
      out.size() != units.at.size() * unit_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "in-place decode of ", units.at.size(), " units of ", spec.ToString(), " into ", out.size(),
        " bytes: not aligned for the kernels, or not ", unit_bytes, " bytes a unit"));
  }
  leapcache::StatusOr<PoolLayout> pool = MakePoolLayout(spec, 1, 1);
  if (!pool.ok()) return base::FromFormatStatus(pool.status());
  absl::MutexLock lock(&mu_);
  const KernelCodecScratch& k = *scratch_;
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaSetDevice(k.device), "cudaSetDevice"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(
      cudaMemsetAsync(lists_.device_crc, 0, sizeof(uint32_t), k.stream), "cudaMemsetAsync"));
  // Batches of the lists' capacity, on one stream: each batch's lists are uploaded after the
  // previous batch's kernels have read theirs (the stream orders the copy after them, and the
  // host refills its pinned lists only once that copy is done).
  for (size_t first = 0; first < units.at.size(); first += lists_.capacity) {
    const size_t n = std::min(lists_.capacity, units.at.size() - first);
    if (first > 0) {
      LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaStreamSynchronize(k.stream), "decode batch"));
    }
    auto* payloads = reinterpret_cast<const uint8_t**>(lists_.host);
    auto* copies = reinterpret_cast<transport::DeviceCopy*>(lists_.host + n * sizeof(payloads[0]));
    uint8_t* const dst = out.data() + first * unit_bytes;
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* unit = units.at[first + i];
      payloads[i] = unit + kHeaderBytes;
      if (units.side_bytes > 0) {
        copies[i] = {unit + units.blob_bytes,
                     dst + i * unit_bytes + (unit_bytes - units.side_bytes), units.side_bytes};
      }
    }
    const size_t list_bytes = n * (units.side_bytes > 0 ? kListBytesPerUnit : sizeof(payloads[0]));
    LC_RETURN_IF_ERROR(LC_CUDA_STATUS(
        cudaMemcpyAsync(lists_.device, lists_.host, list_bytes, cudaMemcpyHostToDevice, k.stream),
        "cudaMemcpyAsync"));
    kernels::PayloadDecodeParams p;
    p.batch = static_cast<int>(n);
    p.payloads = reinterpret_cast<const uint8_t* const*>(lists_.device);
    p.states = dst;
    p.stride_bytes = unit_bytes;
    p.dtype = dtype;
    p.layout = layout;
    LC_RETURN_IF_ERROR(base::FromFormatStatus(kernels::WindowDecodePayloads(*pool, p, k.stream)));
    if (units.side_bytes > 0) {
      LC_RETURN_IF_ERROR(
          LC_CUDA_STATUS(transport::LaunchCopyBatch(reinterpret_cast<const transport::DeviceCopy*>(
                                                        lists_.device + n * sizeof(payloads[0])),
                                                    n, k.stream),
                         "LaunchCopyBatch"));
    }
  }
  // One CRC over everything written, read back with the stream's one wait.
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(transport::LaunchCrc32c(out.data(), out.size(), lists_.device_crc, k.stream),
                     "LaunchCrc32c"));
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(cudaMemcpyAsync(lists_.host_crc, lists_.device_crc, sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost, k.stream),
                     "cudaMemcpyAsync"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaStreamSynchronize(k.stream), "in-place decode"));
  return *lists_.host_crc;
}

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
