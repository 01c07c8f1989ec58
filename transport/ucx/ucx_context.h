// UcxContext: one UCP context with remote memory access, shared by every UCX worker and memory
// registration of a process (the engine's client library, or the service).
//
// What it reaches is decided at run time: host memory always (over whatever UCX selects: shared
// memory and CMA between processes of one host, tcp, RDMA); CUDA device memory directly only if
// the UCX found at run time reports UCS_MEMORY_TYPE_CUDA among the context's memory types.
// Debian's UCX 1.13 is built without CUDA transports, so there CUDA buffers are staged through
// pinned host memory by their owner (PinnedHostBuffer, transport/device/device_memory.h) and
// capabilities().cuda says kStaged.
// Thread-safe (the context is created for multi-threaded workers).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace leapcache::transport {

struct UcxOptions {
  // UCX_TLS for this context ("tcp", "sm,self", "rc,sm"...); empty: UCX's own choice (and the
  // UCX_TLS environment variable, if set).
  std::string transports;
  // Whether CUDA buffers can be staged by this process (it has the CUDA runtime and a device).
  bool cuda_staging = false;
};

class UcxContext {
 public:
  // UNAVAILABLE if UCX cannot be initialised (e.g. none of `transports` exists here);
  // INVALID_ARGUMENT for a transports value UCX rejects.
  static absl::StatusOr<std::unique_ptr<UcxContext>> Create(const UcxOptions& options);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return context_; }
  const Capabilities& capabilities() const { return capabilities_; }
  // True if UCX itself reports CUDA memory support.
  bool cuda_direct() const { return capabilities_.cuda == CudaAccess::kDirect; }

  // Registers [ptr, ptr + bytes) of `memory` kind for remote access; the descriptor carries its
  // packed rkey. INVALID_ARGUMENT for a null or empty range, or CUDA memory when UCX cannot
  // reach it directly (stage it: register the pinned host buffer instead).
  absl::StatusOr<std::unique_ptr<Registration>> Register(void* ptr, size_t bytes,
                                                         MemoryKind memory);

 private:
  UcxContext(ucp_context_h context, Capabilities capabilities)
      : context_(context), capabilities_(capabilities) {}
  ucp_context_h context_;
  Capabilities capabilities_;
};

// A UCS status as an absl::Status: `what` names the failed operation.
absl::Status UcsError(ucs_status_t status, const std::string& what);

}  // namespace leapcache::transport
