#include "service/cuda/device_tier.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"

namespace leapcache::cuda {
absl::StatusOr<std::unique_ptr<DeviceTier>> DeviceTier::Create(std::string name, int device,
                                                               size_t budget_bytes,
                                                               size_t page_bytes) {
  absl::StatusOr<size_t> pages =
      core::TierPages(name, budget_bytes, page_bytes, kDevicePageAlignment);
  if (!pages.ok()) return pages.status();
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("tier ", name, ": no CUDA device ", device, " (", count, " found)"));
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return LC_CUDA_STATUS(e, absl::StrCat("tier ", name, ": cudaSetDevice(", device, ")"));
  }
  void* base = nullptr;
  if (cudaMalloc(&base, *pages * page_bytes) != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "tier ", name, ": cannot allocate ", *pages * page_bytes, " bytes on device ", device));
  }
  return std::unique_ptr<DeviceTier>(
      new DeviceTier(std::move(name), device, static_cast<uint8_t*>(base), page_bytes, *pages));
}

DeviceTier::DeviceTier(std::string name, int device, uint8_t* base, size_t page_bytes, size_t pages)
    : name_(std::move(name)),
      device_(device),
      base_(base),
      page_bytes_(page_bytes),
      pages_(name_, pages) {}

DeviceTier::~DeviceTier() {
  cudaSetDevice(device_);
  cudaFree(base_);
}

uint8_t* DeviceTier::PageAddress(core::PageId page) const {
  return page < pages_.capacity_pages() ? base_ + static_cast<size_t>(page) * page_bytes_ : nullptr;
}

absl::Status DeviceTier::CopyIn(core::PageId page, size_t offset, std::span<const uint8_t> src) {
  if (absl::Status st = pages_.CheckRange(page, page_bytes_, offset, src.size()); !st.ok()) {
    return st;
  }
  if (src.empty()) return absl::OkStatus();
  // cudaSetDevice is per thread: RPC threads come and go.
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
    return LC_CUDA_STATUS(e, "cudaSetDevice");
  if (cudaError_t e =
          cudaMemcpy(PageAddress(page) + offset, src.data(), src.size(), cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    return LC_CUDA_STATUS(e, absl::StrCat("tier ", name_, ": copy into page ", page));
  }
  return absl::OkStatus();
}

absl::Status DeviceTier::CopyOut(core::PageId page, size_t offset, std::span<uint8_t> dst) const {
  if (absl::Status st = pages_.CheckRange(page, page_bytes_, offset, dst.size()); !st.ok()) {
    return st;
  }
  if (dst.empty()) return absl::OkStatus();
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
    return LC_CUDA_STATUS(e, "cudaSetDevice");
  if (cudaError_t e =
          cudaMemcpy(dst.data(), PageAddress(page) + offset, dst.size(), cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    return LC_CUDA_STATUS(e, absl::StrCat("tier ", name_, ": copy out of page ", page));
  }
  return absl::OkStatus();
}

}  // namespace leapcache::cuda
