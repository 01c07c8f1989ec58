// DeviceTier: a MemoryTier in GPU memory, the fastest tier of a server built with CUDA. One
// cudaMalloc at construction carved into fixed-size pages (PageAllocator); nothing is allocated
// or returned to the driver afterwards, so the tier never exceeds its budget and never
// fragments. Bytes move with cudaMemcpy; HostAddress is nullptr, so the store uploads into and
// copies out of it (reservations carry no host spans, leases copy blobs out), and evictions spill
// to the next (host) tier through CopyBetweenTiers. A put's commit checks its units here, where
// they lie (DigestUnits: one kernel, unit_digest_kernel.h), instead of copying them out.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/core/memory_tier.h"
#include "service/core/page_allocator.h"

namespace leapcache::cuda {

// Page sizes are multiples of 4 KiB, as for host tiers, so blobs keep the same packing.
inline constexpr size_t kDevicePageAlignment = 4096;

class DeviceTier final : public core::MemoryTier {
 public:
  // capacity = floor(budget_bytes / page_bytes) pages on CUDA device `device`.
  // INVALID_ARGUMENT for a bad shape (as HostTier); UNAVAILABLE if there is no such device;
  // RESOURCE_EXHAUSTED if the device cannot provide the memory.
  static absl::StatusOr<std::unique_ptr<DeviceTier>> Create(std::string name, int device,
                                                            size_t budget_bytes, size_t page_bytes);
  ~DeviceTier() override;

  const std::string& name() const override { return name_; }
  size_t page_bytes() const override { return page_bytes_; }
  size_t capacity_pages() const override { return pages_.capacity_pages(); }
  size_t used_pages() const override { return pages_.used_pages(); }
  absl::Status Allocate(size_t n, std::vector<core::PageId>* pages) override {
    return pages_.Allocate(n, pages);
  }
  void Free(std::span<const core::PageId> pages) override { pages_.Free(pages); }
  absl::Status CopyIn(core::PageId page, size_t offset, std::span<const uint8_t> src) override;
  absl::Status CopyOut(core::PageId page, size_t offset, std::span<uint8_t> dst) const override;
  uint8_t* HostAddress(core::PageId) const override { return nullptr; }
  int cuda_device() const override { return device_; }
  const uint8_t* DeviceAddress(core::PageId page) const override { return PageAddress(page); }
  absl::Status DigestUnits(std::span<const UnitPlace> places, const core::UnitLayout& layout,
                           std::span<core::UnitDigest> out) const override;

  int device() const { return device_; }

 private:
  uint8_t* PageAddress(core::PageId page) const;

  DeviceTier(std::string name, int device, uint8_t* base, size_t page_bytes, size_t pages);

  const std::string name_;
  const int device_;
  uint8_t* const base_;  // device memory, owned
  const size_t page_bytes_;
  core::PageAllocator pages_;

  // What DigestUnits reuses across commits: a stream, the unit list and the digests on the
  // device and their pinned host copies, grown to the largest put seen. One commit at a time
  // digests (a put's kernel takes tens of microseconds).
  struct DigestScratch {
    cudaStream_t stream = nullptr;
    size_t capacity = 0;  // units
    const uint8_t** device_units = nullptr;
    core::UnitDigest* device_digests = nullptr;
    const uint8_t** host_units = nullptr;
    core::UnitDigest* host_digests = nullptr;
  };
  absl::Status ReserveDigests(size_t units) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(digest_mu_);
  mutable absl::Mutex digest_mu_;
  mutable DigestScratch digest_ ABSL_GUARDED_BY(digest_mu_);
};

}  // namespace leapcache::cuda
