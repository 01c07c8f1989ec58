// CPU reference codec: dense fp32 state <-> v1 blob, for every codec of gpu/format/format.h.
//
// Encoding of the integer codecs (q = 2^(bits-1) - 1; scales are floored at the smallest
// positive float, so only all-zero rows and columns reach the floor):
//   int-row : s_k[a] = max(max_j |S[a,j]|, 2^-149);           code = rne(q * (S / s_k[a]))
//   int-col : s_v[j] = max(max_a |S[a,j]|, 2^-149);           code = rne(q * (S / s_v[j]))
//   leap    : E = S - sum_h K~_h U~_h^T (fp16 factors, compensators.h)
//             s_k[a] = max(sqrt(mean_j |E[a,j]|), 2^-149) (1 without smoothing)
//             s_v[j] = max(max_a |E[a,j] / s_k[a]|, 2^-149)
//             code   = rne(q * ((E[a,j] / s_k[a]) / s_v[j])), clamped to [-q, q]
// Dividing by the scale (rather than multiplying by q / scale) keeps tiny and subnormal rows
// at their relative precision: x / s is in [-1, 1] for any positive s >= |x|.
// Decoding of all of them: S[a,j] = code * s_k[a] * (s_v[j] / q) + sum_h K~[h][a] U~[h][j],
// absent scales being 1 (int-row has no s_v, so its element is code * s_k[a] / q).
// rne is round to nearest, ties to even (rounding toward zero doubles the error).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gpu/format/format.h"
#include "gpu/format/status.h"

namespace leapcache::reference {

// States larger than this are rejected (OUT_OF_RANGE): real states are O(1)-O(1e3), and the
// bound keeps every sum of the fit and the scales finite in fp32.
inline constexpr float kMaxStateMagnitude = 18446744073709551616.0f;  // 2^64
inline constexpr float kScaleFloor = 1.40129846432481707e-45f;         // 2^-149

// INVALID_ARGUMENT naming the first non-finite element, OUT_OF_RANGE past 2^64, else OK.
Status ValidateState(const float* state, size_t n);

// Encodes state ([dk][dv] for kKV, [dv][dk] for kVK) into a sealed blob of spec.
StatusOr<std::vector<uint8_t>> Encode(const BlobSpec& spec, const float* state, Orientation layout);

// Validates the blob (ParseBlob) and writes its state in `layout` to out[dk * dv].
// On error `out` is untouched.
Status Decode(std::span<const uint8_t> blob, float* out, Orientation layout);

// A validated blob unpacked into the arrays a readout works from: the form the decode kernels
// hold in registers and shared memory. Integer codecs keep codes (not dequantized values).
struct UnpackedBlob {
  BlobSpec spec;
  std::vector<int8_t> codes;       // [dv][dk] (integer codecs)
  std::vector<float> dense;        // [dv][dk] (float codecs)
  std::vector<float> row_scale;    // [dk], ones when absent
  std::vector<float> col_factor;   // [dv], s_v / q (1 / q when s_v is absent)
  std::vector<float> kfac, vfac;   // [r][dk], [r][dv], fp16 values
};

StatusOr<UnpackedBlob> Unpack(std::span<const uint8_t> blob);

// out[j] = sum_a B[a][j] * y[a] for the state B the blob holds (Eq. 10's first two terms):
//   integer: (sum_a code[j][a] * (s_k[a] * y[a])) * col_factor[j] + sum_h vfac[h][j] * (kfac[h] . y)
//   float  : sum_a dense[j][a] * y[a]
void BaseReadout(const UnpackedBlob& b, const float* y, float* out);

// The dense state [dk][dv] the blob holds.
void Dequantize(const UnpackedBlob& b, float* S_kv);

}  // namespace leapcache::reference
