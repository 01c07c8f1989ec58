#include "service/core/host_tier.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "service/core/check.h"
#include "service/core/lock.h"

#if defined(ABSL_HAVE_ADDRESS_SANITIZER)
#include <sanitizer/asan_interface.h>
#define LC_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define LC_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define LC_POISON(p, n) ((void)(p), (void)(n))
#define LC_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace leapcache::core {

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(std::string name, size_t budget_bytes,
                                                           size_t page_bytes) {
  if (page_bytes == 0 || page_bytes % kHostPageAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tier ", name,
                                                   ": page_bytes must be a positive multiple of ",
                                                   kHostPageAlignment, " (got ", page_bytes, ")"));
  }
  const size_t pages = budget_bytes / page_bytes;
  if (pages == 0) {
    return absl::InvalidArgumentError(absl::StrCat("tier ", name, ": budget of ", budget_bytes,
                                                   " bytes holds no page of ", page_bytes,
                                                   " bytes"));
  }
  if (pages > std::numeric_limits<PageId>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tier ", name, ": ", pages, " pages exceed the 2^32 - 1 page limit"));
  }
  void* base = std::aligned_alloc(kHostPageAlignment, pages * page_bytes);
  if (base == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tier ", name, ": cannot allocate ", pages * page_bytes, " bytes"));
  }
  return std::unique_ptr<HostTier>(
      new HostTier(std::move(name), static_cast<uint8_t*>(base), page_bytes, pages));
}

HostTier::HostTier(std::string name, uint8_t* base, size_t page_bytes, size_t capacity_pages)
    : name_(std::move(name)),
      base_(base),
      page_bytes_(page_bytes),
      capacity_pages_(capacity_pages) {
  WriterLock lock(&mu_);
  allocated_.assign(capacity_pages_, false);
  free_.reserve(capacity_pages_);
  // Pushed in reverse so that the first allocations take the lowest pages.
  for (size_t i = capacity_pages_; i-- > 0;) free_.push_back(static_cast<PageId>(i));
  LC_POISON(base_, capacity_pages_ * page_bytes_);
}

HostTier::~HostTier() {
  LC_UNPOISON(base_, capacity_pages_ * page_bytes_);
  std::free(base_);
}

size_t HostTier::used_pages() const {
  ReaderLock lock(&mu_);
  return capacity_pages_ - free_.size();
}

absl::Status HostTier::Allocate(size_t n, std::vector<PageId>* pages) {
  WriterLock lock(&mu_);
  if (n > free_.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tier ", name_, ": ", n, " pages requested, ", free_.size(), " free"));
  }
  for (size_t i = 0; i < n; ++i) {
    const PageId p = free_.back();
    free_.pop_back();
    allocated_[p] = true;
    LC_UNPOISON(base_ + static_cast<size_t>(p) * page_bytes_, page_bytes_);
    pages->push_back(p);
  }
  return absl::OkStatus();
}

void HostTier::Free(std::span<const PageId> pages) {
  WriterLock lock(&mu_);
  for (PageId p : pages) {
    LC_CHECK(p < capacity_pages_ && allocated_[p], "HostTier::Free of a page not allocated");
    allocated_[p] = false;
    LC_POISON(base_ + static_cast<size_t>(p) * page_bytes_, page_bytes_);
    free_.push_back(p);
  }
}

absl::Status HostTier::CheckRange(PageId page, size_t offset, size_t n) const {
  if (page >= capacity_pages_ || offset > page_bytes_ || n > page_bytes_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("tier ", name_, ": range [", offset, ", +", n, ") of page ", page,
                     " leaves the page (", page_bytes_, " bytes, ", capacity_pages_, " pages)"));
  }
  return absl::OkStatus();
}

absl::Status HostTier::CopyIn(PageId page, size_t offset, std::span<const uint8_t> src) {
  if (absl::Status st = CheckRange(page, offset, src.size()); !st.ok()) return st;
  if (!src.empty()) std::memcpy(HostAddress(page) + offset, src.data(), src.size());
  return absl::OkStatus();
}

absl::Status HostTier::CopyOut(PageId page, size_t offset, std::span<uint8_t> dst) const {
  if (absl::Status st = CheckRange(page, offset, dst.size()); !st.ok()) return st;
  if (!dst.empty()) std::memcpy(dst.data(), HostAddress(page) + offset, dst.size());
  return absl::OkStatus();
}

uint8_t* HostTier::HostAddress(PageId page) const {
  return page < capacity_pages_ ? base_ + static_cast<size_t>(page) * page_bytes_ : nullptr;
}

}  // namespace leapcache::core
