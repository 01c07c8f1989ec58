// CUDA runtime errors as leapcache::Status, with the failing call's text and file:line.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "gpu/format/status.h"

namespace leapcache::kernels {

inline Status CudaStatus(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return OkStatus();
  return InternalError(std::string(call) + " failed: " + cudaGetErrorString(e) + " at " + file +
                       ":" + std::to_string(line));
}

}  // namespace leapcache::kernels

#define LEAPCACHE_CUDA_RETURN_IF_ERROR(call) \
  LEAPCACHE_RETURN_IF_ERROR(::leapcache::kernels::CudaStatus((call), #call, __FILE__, __LINE__))

// After a launch: the launch's own error (bad configuration, no device), not the kernel's run.
#define LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED() \
  LEAPCACHE_CUDA_RETURN_IF_ERROR(cudaGetLastError())
