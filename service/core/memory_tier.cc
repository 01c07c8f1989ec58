#include "service/core/memory_tier.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace leapcache::core {

absl::Status CopyBetweenTiers(const MemoryTier& src, PageId src_page, size_t src_offset,
                              MemoryTier& dst, PageId dst_page, size_t dst_offset, size_t n) {
  // The direct paths below hand one side's raw address to the other, so check both ranges here.
  for (auto [tier, offset] : {std::pair<const MemoryTier*, size_t>{&src, src_offset},
                              std::pair<const MemoryTier*, size_t>{&dst, dst_offset}}) {
    if (offset > tier->page_bytes() || n > tier->page_bytes() - offset) {
      return absl::InvalidArgumentError(absl::StrCat("tier ", tier->name(), ": range [", offset,
                                                     ", +", n, ") leaves the page (",
                                                     tier->page_bytes(), " bytes)"));
    }
  }
  if (const uint8_t* s = src.HostAddress(src_page); s != nullptr) {
    return dst.CopyIn(dst_page, dst_offset, std::span<const uint8_t>(s + src_offset, n));
  }
  if (uint8_t* d = dst.HostAddress(dst_page); d != nullptr) {
    return src.CopyOut(src_page, src_offset, std::span<uint8_t>(d + dst_offset, n));
  }
  std::vector<uint8_t> bounce(n);
  if (absl::Status st = src.CopyOut(src_page, src_offset, bounce); !st.ok()) return st;
  return dst.CopyIn(dst_page, dst_offset, bounce);
}

}  // namespace leapcache::core
