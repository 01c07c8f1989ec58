// LiveStates: the live recurrent states of one attached-decode session and the step that
// advances them, made by a compute backend (compute.h: Compute::OpenLiveStates). An engine that leaves its live states in the service sends, per linear layer
// and token, the projected q, k, v, gate and beta of its requests' heads and gets the layer's
// output back; the backend owns the states in between.
//
// Shape of a session: `slots` live requests x `layers` linear layers x `heads` heads, each a
// dk x dv state in the namespace's live form:
//   - window-format namespaces (codec leap): the window representation of FORMAT.md section 5
//     (boundary blob + open window's records), refitted at every p-th token;
//   - every other codec: an FP32 state (what an engine keeps), encoded with the namespace's
//     codec only when it is committed as a checkpoint.
// Implementations: CpuLiveStates (cpu/: the CPU reference, bit-identical to running
// reference::WindowState / the FP32 recurrence in process) and CudaLiveStates (cuda/: the fused
// decode and boundary-refit kernels on a device pool, reading the step's vectors in place where
// they are in device memory).
//
// Not thread-safe: a session serialises its calls (decode_session_table.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/format/format.h"
#include "service/compute/dense_state.h"
#include "service/compute/memory.h"

namespace leapcache::compute {

struct DecodeShape {
  BlobSpec spec;  // the namespace's storage format (kind, dk, dv, codec, p, ...)
  int slots = 0;
  int layers = 0;
  int heads = 0;
  bool l2norm_qk = false;  // FLA use_qk_l2norm_in_kernel
  float scale = 1.0f;      // multiplies q after the norm
  int gate_size() const { return spec.kind == StateKind::kGdn ? 1 : spec.dk; }
};

// One layer's inputs for a batch of requests, request-major:
//   slot[b]            the request's slot, or -1 for a padding entry (zero output, no state
//   touched) q, k [b][h][dk], v [b][h][dv] in `dtype`; g [b][h][gate], beta [b][h] fp32
// `dtype` (and the output's) is fp32 or bf16, as engines hand them over: the CUDA backend passes
// bf16 straight to the kernels; the CPU backend widens it exactly (ElementValue).
// `slot` is host memory; the vectors are in `memory` (device memory: LiveStates::
// takes_device_memory() backends only). The caller (DecodeSession) has checked sizes, slot
// range and uniqueness, and, for host vectors, finiteness.
struct LayerStep {
  int layer = 0;
  std::span<const int32_t> slot;
  DType dtype = DType::kFp32;
  std::span<const uint8_t> q, k, v;
  std::span<const float> g, beta;
  Memory memory = Memory::kHost;  // of q, k, v, g and beta
  // The caller vouches that device vectors are finite, so the backend runs the kernels alone:
  // what an engine that embeds the kernels on its own vectors runs, the benchmark's baseline.
  // Never set from a request: DecodeSession refuses it.
  bool known_finite = false;
};

// Where a step's output goes: [b][h][dv] in `dtype`.
struct LayerOutput {
  DType dtype = DType::kFp32;
  std::span<uint8_t> o;
  Memory memory = Memory::kHost;
};

class LiveStates {
 public:
  virtual ~LiveStates() = default;
  const DecodeShape& shape() const { return shape_; }
  // "cpu" or "cuda", for the session's description and metrics.
  virtual const char* name() const = 0;
  // Whether a step's vectors may be in device memory of the backend's device.
  virtual bool takes_device_memory() const = 0;

  // Advances every non-padding request of `step` by one token and writes the output (zeros for
  // padding). Host vectors are checked before (DecodeSession). Vectors in device memory, which
  // the host cannot read, the backend checks itself on its device, in the step's own pass: if
  // one holds an infinity or a NaN no state moves (o is then unspecified) and Step returns
  // INVALID_ARGUMENT naming its first such element in q, k, v, g, beta order ("k[17] is not
  // finite"), as the host check names it. Any other error is internal (a device failure, a
  // state the codec cannot hold) and names the (slot, layer, head).
  virtual absl::Status Step(const LayerStep& step, const LayerOutput& out) = 0;

  // Sets every (layer, head) state of `slot` to zero.
  virtual absl::Status Reset(int slot) = 0;
  // Sets the slot's states from v1 blobs of the namespace's format, (layer, head) order; the
  // window starts empty at the blob, so the next tokens continue exactly from the checkpoint.
  virtual absl::Status Load(int slot, std::span<const std::span<const uint8_t>> blobs) = 0;
  // The slot's states as v1 blobs of the namespace's format, (layer, head) order, without
  // changing them: a window at its boundary hands out its blob as is; an open window (or an
  // FP32 state) is encoded from the state it represents.
  virtual absl::StatusOr<std::vector<std::vector<uint8_t>>> Export(int slot) = 0;

  // Device or host bytes the live states occupy.
  virtual size_t state_bytes() const = 0;

 protected:
  explicit LiveStates(const DecodeShape& shape) : shape_(shape) {}
  const DecodeShape shape_;
};

// Bytes one session of `shape` holds on the CPU backend (what admission control charges).
size_t LiveStateBytes(const DecodeShape& shape);

}  // namespace leapcache::compute
