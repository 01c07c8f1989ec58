// PageAllocator: the page bookkeeping every MemoryTier shares: a fixed number of page ids, a
// LIFO free list (reuse warm pages first), and a bitmap that turns a double free into an abort.
// It knows nothing of where the pages' bytes live (host or device memory). Thread-safe.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/core/memory_tier.h"

namespace leapcache::core {

class PageAllocator {
 public:
  // `tier` names the owner in messages. REQUIRES: capacity_pages <= 2^32 - 1.
  PageAllocator(std::string tier, size_t capacity_pages);

  size_t capacity_pages() const { return capacity_pages_; }
  size_t used_pages() const;
  // All or nothing: appends n ids (lowest first on a fresh allocator) or RESOURCE_EXHAUSTED.
  absl::Status Allocate(size_t n, std::vector<PageId>* pages);
  // Aborts on a page that is not allocated.
  void Free(std::span<const PageId> pages);
  // INVALID_ARGUMENT unless [offset, offset + n) lies inside page `page` of `page_bytes`.
  absl::Status CheckRange(PageId page, size_t page_bytes, size_t offset, size_t n) const;

 private:
  const std::string tier_;
  const size_t capacity_pages_;
  mutable absl::Mutex mu_;
  std::vector<PageId> free_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> allocated_ ABSL_GUARDED_BY(mu_);
};

// The checks of a tier's shape (INVALID_ARGUMENT naming the tier): page_bytes a positive
// multiple of `alignment`, the budget holding at least one page and at most 2^32 - 1. Returns the
// page count.
absl::StatusOr<size_t> TierPages(const std::string& tier, size_t budget_bytes, size_t page_bytes,
                                 size_t alignment);

}  // namespace leapcache::core
