// Maps a host tier's memory into a CUDA device's address space: the tier's one allocation is
// registered (pinned, cudaHostRegisterMapped) and the tier told its device address
// (core::HostTier::MapOnDevice), so a read lease over it reports device addresses and a get into
// an engine's GPU buffer over CUDA IPC or NCCL gathers its blobs with one kernel reading over
// PCIe, instead of copying them into staging memory and up chunk by chunk. The registration is
// undone when the tier is destroyed, before its memory is freed.
#pragma once

#include "absl/status/status.h"
#include "service/core/host_tier.h"

namespace leapcache::cuda {

// Whether `device` exists (and so whether the server can map its host tiers there).
bool HaveDevice(int device);

// Registers `tier`'s allocation for `device`. RESOURCE_EXHAUSTED if it cannot be pinned (a
// locked-memory limit, the host out of memory), FAILED_PRECONDITION without the device;
// the tier stays unmapped then. Before the tier is shared.
absl::Status MapHostTier(core::HostTier& tier, int device);

}  // namespace leapcache::cuda
