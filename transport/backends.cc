// The registration table: one line per backend. The build switches of the optional backends
// live here and in transport/CMakeLists.txt only.
#include <vector>

#include "transport/backend.h"
#include "transport/inline/inline_backend.h"
#ifdef LEAPCACHE_WITH_CUDA
#include "transport/cuda_ipc/cuda_ipc_backend.h"
#endif
#ifdef LEAPCACHE_TRANSPORT_NCCL
#include "transport/nccl/nccl_backend.h"
#endif
#ifdef LEAPCACHE_TRANSPORT_UCX
#include "transport/ucx/ucx_backend.h"
#endif

namespace leapcache::transport {

std::span<const Backend> Backends() {
  // In the service's order of preference (backend.h).
  static const std::vector<Backend> table = {
#ifdef LEAPCACHE_WITH_CUDA
      CudaIpcBackend(),
#endif
#ifdef LEAPCACHE_TRANSPORT_NCCL
      NcclBackend(),
#endif
#ifdef LEAPCACHE_TRANSPORT_UCX
      UcxBackend(),
#endif
      InlineBackend(),
  };
  return table;
}

const Backend* FindBackend(TransportKind kind) {
  for (const Backend& b : Backends()) {
    if (b.kind == kind) return &b;
  }
  return nullptr;
}

}  // namespace leapcache::transport
