// CudaLiveStates: the attached-decode states in a device pool, advanced by the fused decode
// and boundary-refit kernels (gpu/kernels/kernels.h). Pool slot (slot, layer) is region row
// slot * layers + layer, heads inside it, so one launch per layer serves the whole batch.
//   - leap namespaces (8, 6 and 4 bits): a window pool (gpu/format/pool_layout.h);
//     WindowDecodeStepAndRefit (the step, then the refit of exactly the heads whose window filled);
//   - fp32 namespaces: an FP32 pool [slot][head][dv][dk]; Fp32DecodeStep.
// A step's vectors in device memory (the engine's, mapped) are read and written in place; host
// vectors go through one pinned staging copy each way. Loads and exports go through the host form
// of a region (WriteRegion / ReadRegion) and the CPU reference codec, so a checkpoint leaves the
// pool as the same v1 blob the CPU backend exports. Other codecs and shapes the kernels do not
// build (dk = dv = 128 only) are UNIMPLEMENTED; the server then uses the CPU backend.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "gpu/format/pool_layout.h"
#include "service/compute/live_states.h"

namespace leapcache::compute {

class CudaLiveStates final : public LiveStates {
 public:
  // UNIMPLEMENTED for a format or shape the kernels do not build; UNAVAILABLE without a device;
  // RESOURCE_EXHAUSTED when the pool does not fit.
  static absl::StatusOr<std::unique_ptr<CudaLiveStates>> Create(const DecodeShape& shape,
                                                                   int device);
  ~CudaLiveStates() override;

  const char* name() const override { return "cuda"; }
  bool takes_device_memory() const override { return true; }
  // Device vectors are checked finite in the step's own stream pass (QueueFiniteGate): one
  // wait for the step and its check together.
  absl::Status Step(const LayerStep& step, const LayerOutput& out) override;
  absl::Status Reset(int slot) override;
  absl::Status Load(int slot, std::span<const std::span<const uint8_t>> blobs) override;
  absl::StatusOr<std::vector<std::vector<uint8_t>>> Export(int slot) override;
  size_t state_bytes() const override { return pool_bytes_; }

 private:
  explicit CudaLiveStates(const DecodeShape& shape) : LiveStates(shape) {}
  bool windowed() const { return shape_.spec.codec == Codec::kLeap; }
  size_t row_bytes() const;  // one (slot, layer): heads regions or heads fp32 states
  uint8_t* row(int slot, int layer) const {
    return pool_ + row_bytes() * (static_cast<size_t>(slot) * shape_.layers + layer);
  }
  absl::Status WriteRows(int slot, const std::vector<uint8_t>& host_rows);
  // Queues, after the slots' upload and before the kernels, one launch: the finiteness check of
  // the step's device vectors, which turns the slots to padding if one fails and writes its
  // answer to h_first_ (kernels::FindNonFiniteAndGate).
  absl::Status QueueFiniteGate(const LayerStep& step);
  // After the step's wait: INVALID_ARGUMENT naming the first non-finite element, as the host
  // check names it ("k[17] is not finite"), or OK.
  absl::Status FiniteVerdict() const;

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  PoolLayout layout_;  // windowed only
  uint8_t* pool_ = nullptr;
  size_t pool_bytes_ = 0;
  // Per-step staging, sized for a batch of `slots` requests.
  int32_t* d_slot_ = nullptr;
  float* d_in_ = nullptr;   // q | k | v | g | beta
  float* d_out_ = nullptr;  // o
  float* h_in_ = nullptr;   // pinned mirrors
  float* h_out_ = nullptr;
  int32_t* h_slot_ = nullptr;
  // The finiteness gate: its scratch (device memory, zero at rest) and its answer, a first
  // non-finite index per vector, in pinned host memory mapped for the device (d_first_ is the
  // device's address of h_first_), so reading it after the step's wait needs no copy.
  uint64_t* d_gate_ = nullptr;
  uint64_t* h_first_ = nullptr;
  uint64_t* d_first_ = nullptr;
};

}  // namespace leapcache::compute
