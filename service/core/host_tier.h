// HostTier: a MemoryTier in host memory. One aligned allocation made at construction, carved into
// fixed-size pages; nothing is allocated or returned to the OS afterwards.
//
// Pages are the allocation unit (see residency_table.h for how blobs are packed into them).
// Pages are 4 KiB-aligned so the region can be registered for DMA (cudaHostRegister): a server
// with a CUDA device maps the whole allocation into the device's address space
// (service/cuda/host_tier_mapping.h), and the tier then reports device addresses beside its
// host addresses, so gets from it into an engine's GPU buffer are one device-side gather over
// PCIe instead of staged copies. In ASan builds free pages are poisoned, so a read through a
// stale span (a lease used after release, a reservation written after its deadline) is reported.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/core/memory_tier.h"
#include "service/core/page_allocator.h"

namespace leapcache::core {

inline constexpr size_t kHostPageAlignment = 4096;

class HostTier final : public MemoryTier {
 public:
  // capacity = floor(budget_bytes / page_bytes) pages. INVALID_ARGUMENT if page_bytes is not a
  // positive multiple of kHostPageAlignment, the budget holds no page, or more than 2^32 - 1
  // pages; RESOURCE_EXHAUSTED if the host cannot provide the memory.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(std::string name, size_t budget_bytes,
                                                          size_t page_bytes);
  ~HostTier() override;

  const std::string& name() const override { return name_; }
  size_t page_bytes() const override { return page_bytes_; }
  size_t capacity_pages() const override { return capacity_pages_; }
  size_t used_pages() const override;
  absl::Status Allocate(size_t n, std::vector<PageId>* pages) override;
  void Free(std::span<const PageId> pages) override;
  absl::Status CopyIn(PageId page, size_t offset, std::span<const uint8_t> src) override;
  absl::Status CopyOut(PageId page, size_t offset, std::span<uint8_t> dst) const override;
  uint8_t* HostAddress(PageId page) const override;

  // The one allocation, for registering it with a device.
  uint8_t* arena() const { return base_; }
  size_t arena_bytes() const { return capacity_pages_ * page_bytes_; }
  // Declares the allocation mapped on CUDA device `device` at `device_base` (an address that the
  // device's kernels read the same bytes through); `unmap` runs before the allocation is freed.
  // Once, before the tier is shared. REQUIRES: device >= 0, device_base != nullptr.
  void MapOnDevice(int device, const uint8_t* device_base, std::function<void()> unmap);
  int cuda_device() const override { return device_; }
  const uint8_t* DeviceAddress(PageId page) const override;

 private:
  HostTier(std::string name, uint8_t* base, size_t page_bytes, size_t capacity_pages);

  const std::string name_;
  uint8_t* const base_;  // owned; std::aligned_alloc'ed
  const size_t page_bytes_;
  const size_t capacity_pages_;
  PageAllocator pages_;
  int device_ = -1;                       // MapOnDevice's, or -1
  const uint8_t* device_base_ = nullptr;  // ... and the allocation's address there
  std::function<void()> unmap_;
};

}  // namespace leapcache::core
