// UCX: one-sided RMA (ucx_peer_connection.h) into the engine's registered buffers, over whatever
// UCX selects (RDMA, tcp, shared memory). The engine's side keeps a worker progressing
// (ucx_target_worker.h) and stages device buffers through pinned host memory when UCX cannot
// reach device memory itself. Built with LEAPCACHE_TRANSPORT_UCX.
#pragma once

#include "transport/backend.h"

namespace leapcache::transport {

Backend UcxBackend();

}  // namespace leapcache::transport
