// Process-wide allocator setting for a server that moves messages of megabytes.
//
// glibc serves allocations above its mmap threshold with fresh mappings and unmaps them on free,
// so every decode step, put chunk or get message of a few MB page-faults its buffers in again
// (about 12% of a B = 256 attached decode step's CPU time, measured with perf). Raising the
// mmap and trim thresholds keeps freed large blocks in the heap for the next message. The cost
// is resident memory: up to kTrimThreshold of freed heap per arena stays mapped, on top of the
// budgeted memory tiers.
#pragma once

#include <cstddef>

namespace leapcache::server {

inline constexpr size_t kMmapThreshold = 64u << 20;
inline constexpr size_t kTrimThreshold = 128u << 20;

// Call once, at process start, before other threads allocate. A no-op where the C library is not
// glibc.
void KeepLargeAllocationsMapped();

}  // namespace leapcache::server
