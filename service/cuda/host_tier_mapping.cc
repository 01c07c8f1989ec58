#include "service/cuda/host_tier_mapping.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"

namespace leapcache::cuda {

bool HaveDevice(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return device >= 0 && device < n;
}

absl::Status MapHostTier(core::HostTier& tier, int device) {
  if (!HaveDevice(device)) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device ", device));
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return LC_CUDA_STATUS(e, "cudaSetDevice");
  }
  uint8_t* const arena = tier.arena();
  // Portable: the mapping holds in every context of the process, whichever device a call
  // thread last set.
  if (cudaError_t e = cudaHostRegister(arena, tier.arena_bytes(),
                                       cudaHostRegisterMapped | cudaHostRegisterPortable);
      e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("tier ", tier.name(), ": cannot pin its ", tier.arena_bytes(),
                     " bytes for CUDA device ", device, " (", cudaGetErrorString(e),
                     "): raise the locked-memory limit or set host_tier_mapping: off"));
  }
  void* device_base = nullptr;
  if (cudaError_t e = cudaHostGetDevicePointer(&device_base, arena, 0); e != cudaSuccess) {
    cudaHostUnregister(arena);
    return LC_CUDA_STATUS(e, absl::StrCat("tier ", tier.name(), ": cudaHostGetDevicePointer"));
  }
  tier.MapOnDevice(device, static_cast<const uint8_t*>(device_base),
                   [arena] { cudaHostUnregister(arena); });
  return absl::OkStatus();
}

}  // namespace leapcache::cuda
