#include "service/cuda/device_tier.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"
#include "service/cuda/unit_digest_kernel.h"

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
  {
    absl::MutexLock lock(&digest_mu_);
    if (digest_.device_units != nullptr) cudaFree(digest_.device_units);
    if (digest_.device_digests != nullptr) cudaFree(digest_.device_digests);
    if (digest_.host_units != nullptr) cudaFreeHost(digest_.host_units);
    if (digest_.host_digests != nullptr) cudaFreeHost(digest_.host_digests);
    if (digest_.stream != nullptr) cudaStreamDestroy(digest_.stream);
  }
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

absl::Status DeviceTier::ReserveDigests(size_t units) const {
  DigestScratch& d = digest_;
  cudaError_t e = cudaSuccess;
  if (d.stream == nullptr) {
    e = PrepareUnitDigests(device_);
    // A blocking stream: the digests wait for the legacy stream's work, where CopyIn's
    // cudaMemcpy from pageable memory may still be moving the last bytes when it returns.
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&d.stream, cudaStreamDefault);
  }
  if (e == cudaSuccess && units > d.capacity) {
    if (d.device_units != nullptr) cudaFree(d.device_units);
    if (d.device_digests != nullptr) cudaFree(d.device_digests);
    if (d.host_units != nullptr) cudaFreeHost(d.host_units);
    if (d.host_digests != nullptr) cudaFreeHost(d.host_digests);
    d = {d.stream};
    const size_t want = std::max<size_t>(units, 1024);
    e = cudaMalloc(reinterpret_cast<void**>(&d.device_units), want * sizeof(*d.device_units));
    if (e == cudaSuccess) {
      e = cudaMalloc(reinterpret_cast<void**>(&d.device_digests), want * sizeof(*d.device_digests));
    }
    if (e == cudaSuccess) {
      e = cudaMallocHost(reinterpret_cast<void**>(&d.host_units), want * sizeof(*d.host_units));
    }
    if (e == cudaSuccess) {
      e = cudaMallocHost(reinterpret_cast<void**>(&d.host_digests), want * sizeof(*d.host_digests));
    }
    if (e == cudaSuccess) d.capacity = want;
  }
  if (e != cudaSuccess) {
    return LC_CUDA_STATUS(e, absl::StrCat("tier ", name_, ": room for ", units, " unit digests"));
  }
  return absl::OkStatus();
}

absl::Status DeviceTier::DigestUnits(std::span<const UnitPlace> places,
                                     const core::UnitLayout& layout,
                                     std::span<core::UnitDigest> out) const {
  if (out.size() != places.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(places.size(), " units, room for ", out.size(), " digests"));
  }
  for (const UnitPlace& p : places) {
    if (absl::Status st = pages_.CheckRange(p.page, page_bytes_, p.offset, layout.unit_bytes);
        !st.ok()) {
      return st;
    }
  }
  if (places.empty()) return absl::OkStatus();
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return LC_CUDA_STATUS(e, "cudaSetDevice");
  }
  absl::MutexLock lock(&digest_mu_);
  if (absl::Status st = ReserveDigests(places.size()); !st.ok()) return st;
  DigestScratch& d = digest_;
  for (size_t i = 0; i < places.size(); ++i) {
    d.host_units[i] = PageAddress(places[i].page) + places[i].offset;
  }
  const size_t n = places.size();
  cudaError_t e = cudaMemcpyAsync(d.device_units, d.host_units, n * sizeof(*d.device_units),
                                  cudaMemcpyHostToDevice, d.stream);
  if (e == cudaSuccess)
    e = LaunchUnitDigests(d.device_units, n, layout, d.device_digests, d.stream);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(d.host_digests, d.device_digests, n * sizeof(*d.host_digests),
                        cudaMemcpyDeviceToHost, d.stream);
  }
  if (const cudaError_t sync = cudaStreamSynchronize(d.stream); e == cudaSuccess) e = sync;
  if (e != cudaSuccess) {
    return LC_CUDA_STATUS(e, absl::StrCat("tier ", name_, ": digests of ", n, " units"));
  }
  std::copy(d.host_digests, d.host_digests + n, out.begin());
  return absl::OkStatus();
}

}  // namespace leapcache::cuda
