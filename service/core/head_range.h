// A set of disjoint head ranges: which heads of a checkpoint are committed. Adjacent ranges merge,
// so two TP=2 halves [0, 16) + [16, 32) cover a TP=1 request for [0, 32).
#pragma once

#include <string>
#include <vector>

#include "service/core/types.h"

namespace leapcache::core {

class HeadRangeSet {
 public:
  // True iff every head of `r` is in the set. REQUIRES: !r.empty().
  bool Covers(HeadRange r) const;
  // True iff some head of `r` is in the set.
  bool Overlaps(HeadRange r) const;
  // REQUIRES: !r.empty() and !Overlaps(r).
  void Add(HeadRange r);
  void Clear() { ranges_.clear(); }
  bool empty() const { return ranges_.empty(); }
  int heads() const;
  // Sorted, disjoint, non-adjacent.
  const std::vector<HeadRange>& ranges() const { return ranges_; }
  std::string ToString() const;

 private:
  std::vector<HeadRange> ranges_;
};

std::string HeadRangeToString(HeadRange r);

}  // namespace leapcache::core
