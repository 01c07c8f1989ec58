// Public host API of leapcache's CUDA kernels. Every launcher validates shapes, pointers,
// alignment and dtypes first and returns INVALID_ARGUMENT naming the bad argument; the kernels
// themselves carry no error paths. Launches are asynchronous on `stream`; a launch error
// (cudaGetLastError after the launch) comes back as INTERNAL with the call and file:line.
//
// State pools are addressed through a slot index per request, as serving engines keep them:
// request b uses slot[b]; slot[b] < 0 or >= num_slots is padding (zero output, nothing read or
// written). Kernels are built for dk = dv = 128 (the shape of every GDN/KDA model in service).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/format/format.h"
#include "gpu/format/pool_layout.h"
#include "gpu/format/status.h"

namespace leapcache::kernels {

inline constexpr int kKernelDim = 128;

// Whether the window kernels (step, refit, encode, decode) serve states of `spec`: the leap codec
// at 8, 6 or 4 bits, dk = dv = kKernelDim. The one list callers consult before launching.
bool WindowKernelsServe(const BlobSpec& spec);

// One decode step's per-request inputs and outputs (device pointers).
struct StepParams {
  int batch = 0;
  int num_heads = 0;
  const int32_t* slot = nullptr;  // [batch]
  const void* q = nullptr;        // [batch][num_heads][dk], in_dtype
  const void* k = nullptr;        // [batch][num_heads][dk], in_dtype
  const void* v = nullptr;        // [batch][num_heads][dv], in_dtype
  DType in_dtype = DType::kBf16;
  const float* g = nullptr;       // log decay: [batch][num_heads] (GDN), [batch][num_heads][dk] (KDA)
  const float* beta = nullptr;    // [batch][num_heads]
  void* o = nullptr;              // [batch][num_heads][dv], out_dtype
  DType out_dtype = DType::kFp32;
  bool l2norm_qk = false;         // FLA use_qk_l2norm_in_kernel (eps 1e-6 inside the sqrt)
  float scale = 1.0f;             // multiplies q after the norm
};

// The honest baseline: the FP32 recurrence (reference/recurrence.h) in place on a pool
// [num_slots][num_heads][dv][dk] of fp32 states (value-major, K contiguous, as vLLM/FlashInfer).
Status Fp32DecodeStep(StateKind kind, const StepParams& p, float* state_pool, int num_slots,
                      cudaStream_t stream);

// The window format's decode step (FORMAT.md section 5) on a pool laid out by `layout`
// (kLeap at 8, 6 or 4 bits): for each request computes u and o from the boundary payload and the
// open window's records without materialising the state, and appends the record. A head whose
// window is full (n == p) must be refitted (WindowRefit) before its next step; stepped full, or
// with a record count outside [0, p] (a corrupt header), a head keeps its region as it was and
// its output is NaN.
Status WindowDecodeStep(const PoolLayout& layout, const StepParams& p, uint8_t* pool,
                        cudaStream_t stream);

// The boundary refit over the heads of slot[0..batch) whose window is full: reconstruct,
// fit compensators, smooth, quantize, write the new payload, reset the window. Heads with
// n != p are left untouched (cheap: one 4-byte read each), a count outside [0, p] included.
Status WindowRefit(const PoolLayout& layout, const int32_t* slot, int batch, uint8_t* pool,
                   cudaStream_t stream);

// One decode token: WindowDecodeStep, then WindowRefit over the batch's slots; the same bytes
// in the pool and in o. Batches whose heads fit in two waves of a CTA per head (two per SM: at
// most 4 x SMs heads) run both in one kernel, which saves the refit's launch and listing (at
// B = 1-8, H = 32, a quarter to a third of the token); larger ones take the two launches.
Status WindowDecodeStepAndRefit(const PoolLayout& layout, const StepParams& p, uint8_t* pool,
                                cudaStream_t stream);

// Dense states <-> pool regions. `states` is [batch][num_heads][dk][dv] (kKV) or
// [batch][num_heads][dv][dk] (kVK) in `dtype`, aligned to two elements. Encode writes a fresh
// boundary (n = 0, G = 0); decode writes the state the region represents, open window included
// (all NaN for a region whose record count is outside [0, p]).
// Every window kernel takes pools of the leap codec at 8, 6 or 4 bits.
struct DenseParams {
  int batch = 0;
  const int32_t* slot = nullptr;  // [batch]
  void* states = nullptr;
  DType dtype = DType::kFp32;
  Orientation layout = Orientation::kVK;
};
Status WindowEncode(const PoolLayout& layout, const DenseParams& p, uint8_t* pool,
                    cudaStream_t stream);
Status WindowDecode(const PoolLayout& layout, const DenseParams& p, const uint8_t* pool,
                    cudaStream_t stream);

// Dense states straight from payloads that lie anywhere in device memory, such as stored blobs'
// (a blob's bytes past its header are byte-identical to a fresh boundary region's first
// layout.payload().payload_bytes): state b, decoded from payloads[b] as WindowDecode decodes a
// region holding that payload and an empty window, bit for bit, is written at
// states + b * stride_bytes; the bytes between states are left as they are. Nothing past a
// payload is read, and the payloads are not checked (their blobs were, when stored).
// REQUIRES: each payloads[b] 16-byte aligned (the staging's copy unit).
struct PayloadDecodeParams {
  int batch = 0;
  const uint8_t* const* payloads = nullptr;  // [batch], device memory
  void* states = nullptr;
  uint64_t stride_bytes = 0;  // >= a state's bytes, a multiple of two elements
  DType dtype = DType::kFp32;
  Orientation layout = Orientation::kVK;
};
Status WindowDecodePayloads(const PoolLayout& layout, const PayloadDecodeParams& p,
                            cudaStream_t stream);

// One array for FindNonFinite: `count` elements of `dtype` (fp32, bf16 or fp16) in device memory.
struct FiniteCheck {
  const void* data = nullptr;
  uint64_t count = 0;
  DType dtype = DType::kFp32;
};
inline constexpr int kMaxFiniteChecks = 8;

// For each of `count` (1..kMaxFiniteChecks) arrays, the index of its first element that is an
// infinity or a NaN, or UINT64_MAX if every element is finite, written to first[i] (device
// memory, `count` words; the call sets them before the scan). One launch for all of them.
Status FindNonFinite(const FiniteCheck* checks, int count, uint64_t* first, cudaStream_t stream);

// FindNonFinite and its consequence for a decode step, in one launch, so that a step with a
// non-finite input advances no state with no host round trip and no further launch between the
// check and the step: queued on the step's stream before the step kernels, it writes the same
// answers as FindNonFinite to `answer` and turns the `batch` entries of `slot` into padding (-1)
// if any answer names an element (the step kernels skip padding).
struct StepGate {
  int32_t* slot = nullptr;  // device memory
  int batch = 0;
  // `count` words: device memory, or host memory mapped for the device (read after the stream's
  // wait, with no copy queued).
  uint64_t* answer = nullptr;
  // count + 1 words of device memory, zero before the first launch; each launch leaves them
  // zero. One per stream: launches that share it must not overlap.
  uint64_t* scratch = nullptr;
};
Status FindNonFiniteAndGate(const FiniteCheck* checks, int count, const StepGate& gate,
                            cudaStream_t stream);

}  // namespace leapcache::kernels
