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
//
// DecodeInPlace serves a dense get whose blobs lie in the device's memory (the GPU tier) and
// whose destination does too (an engine's buffer mapped over CUDA IPC): the kernel reads each
// blob's payload where it lies and writes its state straight into the destination, a copy
// kernel places the side states beside them and a CRC kernel checksums what was written; no
// byte crosses to the host, one host wait per call.
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
#include "service/compute/compute.h"
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

  // Whether DecodeInPlace takes `units` into `out` in `dtype`: Supports(spec), each blob's
  // payload 16-byte aligned, `out` and each dense unit (a state and side_bytes) aligned to two
  // elements.
  static bool DecodesInPlace(const BlobSpec& spec, DType dtype, const DeviceUnits& units,
                             const void* out);
  // Compute::DecodeInPlace for this device: any number of units, in batches of the device's
  // list capacity. REQUIRES: DecodesInPlace(spec, dtype, units, out.data()), `out` and every
  // unit device memory this device reaches, out.size() == units.at.size() * unit bytes.
  absl::StatusOr<uint32_t> DecodeInPlace(const BlobSpec& spec, DType dtype, Orientation layout,
                                         const DeviceUnits& units, std::span<uint8_t> out);

 private:
  // What one in-place call uploads and reads back: per unit a payload address and a side
  // state copy, and the CRC word.
  struct InPlaceLists {
    size_t capacity = 0;        // units
    uint8_t* host = nullptr;    // pinned: the lists as filled
    uint8_t* device = nullptr;  // the lists as the kernels read them
    uint32_t* host_crc = nullptr;
    uint32_t* device_crc = nullptr;
  };
  static constexpr size_t kInPlaceUnits = 4096;  // per batch: 160 KiB of lists

  KernelDecoder(std::unique_ptr<KernelCodecScratch> scratch, uint8_t* h_pool, InPlaceLists lists)
      : max_states_(scratch->max_states),
        scratch_(std::move(scratch)),
        h_pool_(h_pool),
        lists_(lists) {}

  const int max_states_;
  absl::Mutex mu_;
  const std::unique_ptr<KernelCodecScratch> scratch_ ABSL_GUARDED_BY(mu_);
  uint8_t* const h_pool_ ABSL_GUARDED_BY(mu_);  // pinned, pool_bytes: the regions as uploaded
  const InPlaceLists lists_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::compute
