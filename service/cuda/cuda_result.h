// A CUDA runtime result as an absl::Status for the service's CUDA code: INTERNAL naming the
// call that failed and CUDA's message.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace leapcache::cuda {

inline absl::Status CudaResult(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace leapcache::cuda
