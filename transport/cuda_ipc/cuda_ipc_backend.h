// CUDA IPC: for an engine on the service's host, the service maps the engine's exported device
// buffers (cuda_ipc.h) and copies into and out of them on its GPU, device to device. Device
// memory only. Built with LEAPCACHE_WITH_CUDA.
#pragma once

#include "transport/backend.h"

namespace leapcache::transport {

Backend CudaIpcBackend();

}  // namespace leapcache::transport
