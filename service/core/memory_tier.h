// A memory tier: one pool of equal-sized pages, allocated once at start from a byte budget.
//
// The store places checkpoints in tiers ordered fastest first (a GPU pool, then pinned host
// memory). A tier only hands out and takes back pages and moves bytes in and out of them; what a
// page holds is the store's business (residency_table.h). HostTier is the host implementation;
// a GPU pool implements the same interface in the CUDA backend (CopyIn/CopyOut become
// cudaMemcpy, HostAddress returns nullptr).
//
// Contract for implementations:
//  - capacity_pages() never changes; used_pages() <= capacity_pages() at every instant, so the
//    pool can never exceed its budget whatever the allocation pattern.
//  - Allocate is all-or-nothing. Free of a page not allocated is a programmer error (abort).
//  - All methods are thread-safe. Copies to distinct byte ranges may run concurrently; the
//    caller guarantees it owns the pages it copies to or from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "service/core/unit_digest.h"

namespace leapcache::core {

using PageId = uint32_t;

class MemoryTier {
 public:
  virtual ~MemoryTier() = default;

  virtual const std::string& name() const = 0;
  virtual size_t page_bytes() const = 0;
  virtual size_t capacity_pages() const = 0;
  virtual size_t used_pages() const = 0;
  size_t capacity_bytes() const { return capacity_pages() * page_bytes(); }
  size_t used_bytes() const { return used_pages() * page_bytes(); }

  // Appends `n` page ids to *pages, or returns RESOURCE_EXHAUSTED and appends nothing.
  virtual absl::Status Allocate(size_t n, std::vector<PageId>* pages) = 0;
  // REQUIRES: every page was allocated by this tier and not freed since.
  virtual void Free(std::span<const PageId> pages) = 0;

  // Bytes into / out of page `page` at `offset`. INVALID_ARGUMENT if the range leaves the page.
  // REQUIRES: the caller owns the page.
  virtual absl::Status CopyIn(PageId page, size_t offset, std::span<const uint8_t> src) = 0;
  virtual absl::Status CopyOut(PageId page, size_t offset, std::span<uint8_t> dst) const = 0;

  // The host address of the page's first byte, or nullptr if the tier's memory is not
  // host-addressable (device memory). Stable for the tier's lifetime.
  virtual uint8_t* HostAddress(PageId page) const = 0;
  // Device memory: the CUDA device holding the tier and the device address of a page's first
  // byte; -1 and nullptr for host memory. The core never dereferences it; transports that copy
  // device to device (CUDA IPC) serve gets from it without a trip through the host.
  virtual int cuda_device() const { return -1; }
  virtual const uint8_t* DeviceAddress(PageId page) const {
    (void)page;
    return nullptr;
  }

  // Where a unit of a put lies: `offset` bytes into `page`.
  struct UnitPlace {
    PageId page = 0;
    size_t offset = 0;
  };
  // Tiers that are not host-addressable may compute the commit's digests of units where they
  // lie (unit_digest.h): out[i] for the unit at places[i], each unit of layout.unit_bytes
  // within its page. UNIMPLEMENTED (the default): the caller copies the units out instead.
  // REQUIRES: out.size() == places.size(); the caller owns the pages.
  virtual absl::Status DigestUnits(std::span<const UnitPlace> places, const UnitLayout& layout,
                                   std::span<UnitDigest> out) const {
    (void)places;
    (void)layout;
    (void)out;
    return absl::UnimplementedError("this tier computes no unit digests");
  }
};

// Copies n bytes between two (tier, page, offset) places, directly when either side is
// host-addressable, else through a host bounce buffer.
absl::Status CopyBetweenTiers(const MemoryTier& src, PageId src_page, size_t src_offset,
                              MemoryTier& dst, PageId dst_page, size_t dst_offset, size_t n);

}  // namespace leapcache::core
