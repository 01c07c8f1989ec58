#include "service/core/head_range.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace leapcache::core {

bool HeadRangeSet::Covers(HeadRange r) const {
  for (const HeadRange& x : ranges_) {
    if (x.begin <= r.begin && r.end <= x.end) return true;
  }
  return false;
}

bool HeadRangeSet::Overlaps(HeadRange r) const {
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const HeadRange& x) { return x.Overlaps(r); });
}

void HeadRangeSet::Add(HeadRange r) {
  LC_CHECK(!r.empty() && !Overlaps(r), "HeadRangeSet::Add of an empty or overlapping range");
  auto it =
      std::lower_bound(ranges_.begin(), ranges_.end(), r,
                       [](const HeadRange& a, const HeadRange& b) { return a.begin < b.begin; });
  it = ranges_.insert(it, r);
  // Merge with the right neighbour, then with the left one.
  if (auto next = it + 1; next != ranges_.end() && next->begin == it->end) {
    it->end = next->end;
    ranges_.erase(next);
  }
  if (it != ranges_.begin()) {
    auto prev = it - 1;
    if (prev->end == it->begin) {
      prev->end = it->end;
      ranges_.erase(it);
    }
  }
}

int HeadRangeSet::heads() const {
  int n = 0;
  for (const HeadRange& x : ranges_) n += x.size();
  return n;
}

std::string HeadRangeSet::ToString() const {
  std::string s = "{";
  for (size_t i = 0; i < ranges_.size(); ++i) {
    absl::StrAppend(&s, i ? ", " : "", HeadRangeToString(ranges_[i]));
  }
  return s + "}";
}

std::string HeadRangeToString(HeadRange r) { return absl::StrCat("[", r.begin, ", ", r.end, ")"); }

}  // namespace leapcache::core
