// KernelDecoder: stored v1 blobs -> dense states with the decode kernel (WindowDecode), for the
// server's dense gets when it runs on a GPU. Each blob is checked on the host (ParseBlob: header,
// CRCs, the namespace's exact format; CheckStoredValues) and its payload placed in a region of a
// scratch pool as a fresh boundary (the payload is byte-identical to a region's, pool_layout.h);
// one launch then decodes the whole batch into the requested dtype and layout: in place where the
// destination is device memory aligned for the kernel, else through the scratch and one copy.
//
// The kernel computes in fp32 like the CPU reference but not in the same order, so a state
// decoded here equals the reference's to within fp32 rounding (relative L2 below 1e-6), not bit
// for bit. Serves 8-bit window-format specs with dk = dv = 128 (Supports()); thread-safe (one
// batch on the device at a time).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpu/format/format.h"
#include "gpu/kernels/kernels.h"
#include "service/compute/cuda/kernel_codec_scratch.h"
#include "service/compute/memory.h"

namespace leapcache::compute {

class KernelDecoder {
 public:
  // Scratch for `max_states` states per call. UNAVAILABLE without the device.
  static absl::StatusOr<std::unique_ptr<KernelDecoder>> Create(int device, int max_states);
  ~KernelDecoder();
  KernelDecoder(const KernelDecoder&) = delete;
  KernelDecoder& operator=(const KernelDecoder&) = delete;

  static bool Supports(const BlobSpec& spec);
  int max_states() const { return max_states_; }

  // Decodes blob(i) for i < n (n <= max_states()) into `out`: n whole states of dk x dv
  // elements in dtype and layout, state i at i * state bytes. A blob that fails its checks or is
  // not of `spec` gets DATA_LOSS naming it through `describe(i)`, before anything is launched.
  // REQUIRES: Supports(spec); out.data.size() == n * state bytes.
  absl::Status Decode(const BlobSpec& spec, DType dtype, Orientation layout, size_t n,
                      absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                      absl::FunctionRef<std::string(size_t)> describe, MutableBytes out);

 private:
  KernelDecoder(std::unique_ptr<KernelCodecScratch> scratch, uint8_t* h_pool)
      : max_states_(scratch->max_states), scratch_(std::move(scratch)), h_pool_(h_pool) {}

  const int max_states_;
  absl::Mutex mu_;
  const std::unique_ptr<KernelCodecScratch> scratch_ ABSL_GUARDED_BY(mu_);
  uint8_t* const h_pool_ ABSL_GUARDED_BY(mu_);  // pinned, pool_bytes: the regions as uploaded
};

}  // namespace leapcache::compute
