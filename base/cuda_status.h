// A CUDA runtime result as an absl::Status, for every CUDA-built file above gpu/ (the kernels
// have their own, on the format library's Status: gpu/kernels/cuda_status.h). Header-only, so
// leapcache_base itself needs no CUDA; include it only where the CUDA runtime is linked.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace leapcache::base {

// OK for cudaSuccess; otherwise `code` (INTERNAL unless the caller knows better) with
// "<what>: <CUDA's message> (<file>:<line>)".
inline absl::Status CudaStatus(cudaError_t e, absl::string_view what, const char* file, int line,
                               absl::StatusCode code = absl::StatusCode::kInternal) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::Status(code,
                      absl::StrCat(what, ": ", cudaGetErrorString(e), " (", file, ":", line, ")"));
}

}  // namespace leapcache::base

// The status of CUDA runtime call `expr`, named by `what` ("cudaMalloc of the step inputs").
#define LC_CUDA_STATUS(expr, what) ::leapcache::base::CudaStatus((expr), (what), __FILE__, __LINE__)
