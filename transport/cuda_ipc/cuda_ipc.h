// CUDA IPC between an engine and the service on one host: the engine exports its device buffer
// (cudaIpcGetMemHandle of the allocation that holds it, plus the buffer's offset in it) and the
// service maps it (cudaIpcOpenMemHandle) and copies checkpoints into or out of it with
// cudaMemcpy, so the service still drives every transfer as with UCX. The mapped buffer is
// also offered to the service's kernels in place (RemoteRegion::mapping): attached decode steps
// the engine's vectors where they are.
//
// Why this direction: the service's tiers may be host memory (a CPU build has no GPU tier to
// export), and mapping the engine's buffer keeps one model for every transport: the engine
// registers, the service moves bytes, a dead engine is a failed transfer on the service's side.
// The engine's liveness is its process (same host: kill(pid, 0)); a transfer to a process that
// is gone fails with UNAVAILABLE before any copy.
// CUDA refuses to open a handle in the process that exported it, so both sides are separate
// processes. Built with the CUDA toolkit only (LEAPCACHE_WITH_CUDA).
#pragma once

#include <sys/types.h>

#include <memory>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace leapcache::transport {

// Engine side: a descriptor of [ptr, ptr + bytes) of device memory, key = IPC handle of its
// allocation + the offset of ptr in it. INVALID_ARGUMENT for null, empty, host memory or a
// range that leaves its allocation.
absl::StatusOr<std::unique_ptr<Registration>> ExportCudaIpc(void* ptr, size_t bytes);

// Service side: the connection to an engine process `pid` on this host, from the service's CUDA
// device `device`. Import maps its exported buffers there; Execute copies host ops with
// cudaMemcpy (synchronous; the deadline is checked between operations) and ops on the
// service's device memory as one kernel launch of device-to-device copies
// (takes_device_memory).
absl::StatusOr<std::unique_ptr<PeerConnection>> ConnectCudaIpc(pid_t pid, int device);

}  // namespace leapcache::transport
