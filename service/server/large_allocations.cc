#include "service/server/large_allocations.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace leapcache::server {

void KeepLargeAllocationsMapped() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold));
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThreshold));
#endif
}

}  // namespace leapcache::server
