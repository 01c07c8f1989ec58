#include "service/core/page_allocator.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/lock.h"

namespace leapcache::core {

PageAllocator::PageAllocator(std::string tier, size_t capacity_pages)
    : tier_(std::move(tier)), capacity_pages_(capacity_pages) {
  base::WriterLock lock(&mu_);
  allocated_.assign(capacity_pages_, false);
  free_.reserve(capacity_pages_);
  // Pushed in reverse so that the first allocations take the lowest pages.
  for (size_t i = capacity_pages_; i-- > 0;) free_.push_back(static_cast<PageId>(i));
}

size_t PageAllocator::used_pages() const {
  base::ReaderLock lock(&mu_);
  return capacity_pages_ - free_.size();
}

absl::Status PageAllocator::Allocate(size_t n, std::vector<PageId>* pages) {
  base::WriterLock lock(&mu_);
  if (n > free_.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tier ", tier_, ": ", n, " pages requested, ", free_.size(), " free"));
  }
  for (size_t i = 0; i < n; ++i) {
    const PageId p = free_.back();
    free_.pop_back();
    allocated_[p] = true;
    pages->push_back(p);
  }
  return absl::OkStatus();
}

void PageAllocator::Free(std::span<const PageId> pages) {
  base::WriterLock lock(&mu_);
  for (PageId p : pages) {
    LC_CHECK(p < capacity_pages_ && allocated_[p], "MemoryTier::Free of a page not allocated");
    allocated_[p] = false;
    free_.push_back(p);
  }
}

absl::Status PageAllocator::CheckRange(PageId page, size_t page_bytes, size_t offset,
                                       size_t n) const {
  if (page >= capacity_pages_ || offset > page_bytes || n > page_bytes - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("tier ", tier_, ": range [", offset, ", +", n, ") of page ", page,
                     " leaves the page (", page_bytes, " bytes, ", capacity_pages_, " pages)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> TierPages(const std::string& tier, size_t budget_bytes, size_t page_bytes,
                                 size_t alignment) {
  if (page_bytes == 0 || page_bytes % alignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tier ", tier,
                                                   ": page_bytes must be a positive multiple of ",
                                                   alignment, " (got ", page_bytes, ")"));
  }
  const size_t pages = budget_bytes / page_bytes;
  if (pages == 0) {
    return absl::InvalidArgumentError(absl::StrCat("tier ", tier, ": budget of ", budget_bytes,
                                                   " bytes holds no page of ", page_bytes,
                                                   " bytes"));
  }
  if (pages > std::numeric_limits<PageId>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tier ", tier, ": ", pages, " pages exceed the 2^32 - 1 page limit"));
  }
  return pages;
}

}  // namespace leapcache::core
