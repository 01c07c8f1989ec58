#include "service/core/host_tier.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"

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
  absl::StatusOr<size_t> pages = TierPages(name, budget_bytes, page_bytes, kHostPageAlignment);
  if (!pages.ok()) return pages.status();
  void* base = std::aligned_alloc(kHostPageAlignment, *pages * page_bytes);
  if (base == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tier ", name, ": cannot allocate ", *pages * page_bytes, " bytes"));
  }
  return std::unique_ptr<HostTier>(
      new HostTier(std::move(name), static_cast<uint8_t*>(base), page_bytes, *pages));
}

HostTier::HostTier(std::string name, uint8_t* base, size_t page_bytes, size_t capacity_pages)
    : name_(std::move(name)),
      base_(base),
      page_bytes_(page_bytes),
      capacity_pages_(capacity_pages),
      pages_(name_, capacity_pages) {
  LC_POISON(base_, capacity_pages_ * page_bytes_);
}

HostTier::~HostTier() {
  if (unmap_) unmap_();
  LC_UNPOISON(base_, capacity_pages_ * page_bytes_);
  std::free(base_);
}

size_t HostTier::used_pages() const { return pages_.used_pages(); }

absl::Status HostTier::Allocate(size_t n, std::vector<PageId>* pages) {
  const size_t first = pages->size();
  if (absl::Status st = pages_.Allocate(n, pages); !st.ok()) return st;
  for (size_t i = first; i < pages->size(); ++i) {
    LC_UNPOISON(base_ + static_cast<size_t>((*pages)[i]) * page_bytes_, page_bytes_);
  }
  return absl::OkStatus();
}

void HostTier::Free(std::span<const PageId> pages) {
  // Poison first: once freed, a page may be handed out (and unpoisoned) by another thread.
  for (PageId p : pages) {
    if (p < capacity_pages_) LC_POISON(base_ + static_cast<size_t>(p) * page_bytes_, page_bytes_);
  }
  pages_.Free(pages);
}

absl::Status HostTier::CopyIn(PageId page, size_t offset, std::span<const uint8_t> src) {
  if (absl::Status st = pages_.CheckRange(page, page_bytes_, offset, src.size()); !st.ok()) {
    return st;
  }
  if (!src.empty()) std::memcpy(HostAddress(page) + offset, src.data(), src.size());
  return absl::OkStatus();
}

absl::Status HostTier::CopyOut(PageId page, size_t offset, std::span<uint8_t> dst) const {
  if (absl::Status st = pages_.CheckRange(page, page_bytes_, offset, dst.size()); !st.ok()) {
    return st;
  }
  if (!dst.empty()) std::memcpy(dst.data(), HostAddress(page) + offset, dst.size());
  return absl::OkStatus();
}

uint8_t* HostTier::HostAddress(PageId page) const {
  return page < capacity_pages_ ? base_ + static_cast<size_t>(page) * page_bytes_ : nullptr;
}

void HostTier::MapOnDevice(int device, const uint8_t* device_base, std::function<void()> unmap) {
  LC_CHECK(device >= 0 && device_base != nullptr && device_ < 0,
           "HostTier::MapOnDevice: one mapping, on a device, at an address");
  device_ = device;
  device_base_ = device_base;
  unmap_ = std::move(unmap);
}

const uint8_t* HostTier::DeviceAddress(PageId page) const {
  if (device_base_ == nullptr || page >= capacity_pages_) return nullptr;
  return device_base_ + static_cast<size_t>(page) * page_bytes_;
}

}  // namespace leapcache::core
