// FP32 reference recurrences for Gated DeltaNet (GDN) and Kimi Delta Attention (KDA), one head,
// one token, with the conventions of flash-linear-attention's fused_recurrent kernels:
//
//   q, k   <- x / sqrt(sum(x^2) + 1e-6)      if l2norm_qk (FLA use_qk_l2norm_in_kernel)
//   q      <- q * scale                       (FLA default scale = dk^-1/2; the caller sets it)
//   S      <- exp(g) * S                      GDN: g scalar; KDA: row a scaled by exp(g[a])
//   u      <- beta * (v - S^T k)              the delta-rule correction, read after the decay
//   S      <- S + k u^T
//   o      <- S^T q
//
// S is [dk][dv] in math (key rows, value columns). All arithmetic is fp32 with sums taken in
// index order; the GPU kernels are checked against these functions.
#pragma once

#include "gpu/format/format.h"
#include "gpu/format/status.h"

namespace leapcache::reference {

inline constexpr float kL2NormEps = 1e-6f;  // FLA's l2norm epsilon, inside the square root

struct StepOptions {
  bool l2norm_qk = false;
  float scale = 1.0f;
};

// One token's inputs for one head. g is the log decay: [1] for GDN, [dk] for KDA.
struct StepInput {
  const float* q = nullptr;  // [dk]
  const float* k = nullptr;  // [dk]
  const float* v = nullptr;  // [dv]
  const float* g = nullptr;  // [1] or [dk]
  float beta = 0.0f;
};

inline int GateSize(StateKind kind, int dk) { return kind == StateKind::kGdn ? 1 : dk; }

// INVALID_ARGUMENT naming the first non-finite input, else OK.
Status ValidateStepInput(StateKind kind, int dk, int dv, const StepInput& in);

// Writes q_out = scale * maybe_l2norm(q), k_out = maybe_l2norm(k).
void PrepareQK(int dk, const StepOptions& opts, const float* q, const float* k, float* q_out,
               float* k_out);

// Advances S_kv [dk][dv] in place by one token and writes o[dv]. REQUIRES: valid input.
void RecurrentStep(StateKind kind, int dk, int dv, const StepOptions& opts, const StepInput& in,
                   float* S_kv, float* o);

}  // namespace leapcache::reference
