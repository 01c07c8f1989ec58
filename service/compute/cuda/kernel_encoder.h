// KernelEncoder: dense states -> sealed v1 blobs with the encode kernel (WindowEncode), for the
// server's dense puts when it runs on a GPU. One launch encodes a whole chunk of states into a
// scratch pool of fresh boundaries; each region's payload then leaves the device as the blob's
// payload, and the header is sealed on the host (SealBlob), exactly as a region becomes a
// checkpoint anywhere else (pool_layout.h). States in device memory are read in place (or
// copied on the device where they are not aligned for the kernel); host states are uploaded.
//
// The kernels round like the CPU reference up to one-code ties, so a state encoded here may
// differ from the CPU reference's blob in a few codes; both are valid blobs of the same format.
// Serves 8-bit window-format specs with dk = dv = 128 (Supports()); thread-safe (one chunk on
// the device at a time).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpu/format/format.h"
#include "gpu/kernels/kernels.h"
#include "service/compute/cuda/kernel_codec_scratch.h"
#include "service/compute/memory.h"

namespace leapcache::compute {

class KernelEncoder {
 public:
  // Scratch for `max_states` states per call. UNAVAILABLE without the device.
  static absl::StatusOr<std::unique_ptr<KernelEncoder>> Create(int device, int max_states);
  ~KernelEncoder();
  KernelEncoder(const KernelEncoder&) = delete;
  KernelEncoder& operator=(const KernelEncoder&) = delete;

  static bool Supports(const BlobSpec& spec);
  int max_states() const { return max_states_; }

  // `states`: n = states.data.size() / state_bytes whole states in dtype and layout, n <=
  // max_states(). Appends n sealed blobs to *blobs. REQUIRES: Supports(spec); finite states
  // (the caller checks them, as for the CPU path).
  absl::Status Encode(const BlobSpec& spec, DType dtype, Orientation layout, ConstBytes states,
                      std::vector<std::vector<uint8_t>>* blobs);

 private:
  KernelEncoder(std::unique_ptr<KernelCodecScratch> scratch, uint8_t* h_payloads)
      : max_states_(scratch->max_states), scratch_(std::move(scratch)), h_payloads_(h_payloads) {}

  const int max_states_;
  absl::Mutex mu_;
  const std::unique_ptr<KernelCodecScratch> scratch_ ABSL_GUARDED_BY(mu_);
  // Pinned, pool_bytes: the encoded payloads as downloaded, back to back.
  uint8_t* const h_payloads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::compute
