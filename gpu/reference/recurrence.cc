#include "gpu/reference/recurrence.h"

#include <cmath>
#include <string>
#include <vector>

namespace leapcache::reference {

namespace {

Status CheckFinite(const char* name, const float* x, int n) {
  if (x == nullptr) return InvalidArgumentError(std::string(name) + " is null");
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      return InvalidArgumentError(std::string(name) + "[" + std::to_string(i) + "] is not finite");
    }
  }
  return OkStatus();
}

void L2Normalize(int n, const float* x, float* out) {
  float ss = 0.0f;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss + kL2NormEps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv;
}

}  // namespace

Status ValidateStepInput(StateKind kind, int dk, int dv, const StepInput& in) {
  LEAPCACHE_RETURN_IF_ERROR(CheckFinite("q", in.q, dk));
  LEAPCACHE_RETURN_IF_ERROR(CheckFinite("k", in.k, dk));
  LEAPCACHE_RETURN_IF_ERROR(CheckFinite("v", in.v, dv));
  LEAPCACHE_RETURN_IF_ERROR(CheckFinite("g", in.g, GateSize(kind, dk)));
  if (!std::isfinite(in.beta)) return InvalidArgumentError("beta is not finite");
  return OkStatus();
}

void PrepareQK(int dk, const StepOptions& opts, const float* q, const float* k, float* q_out,
               float* k_out) {
  if (opts.l2norm_qk) {
    L2Normalize(dk, q, q_out);
    L2Normalize(dk, k, k_out);
  } else {
    for (int i = 0; i < dk; ++i) {
      q_out[i] = q[i];
      k_out[i] = k[i];
    }
  }
  for (int i = 0; i < dk; ++i) q_out[i] *= opts.scale;
}

void RecurrentStep(StateKind kind, int dk, int dv, const StepOptions& opts, const StepInput& in,
                   float* S, float* o) {
  std::vector<float> q(dk), k(dk), u(dv);
  PrepareQK(dk, opts, in.q, in.k, q.data(), k.data());
  for (int a = 0; a < dk; ++a) {
    const float decay = std::exp(kind == StateKind::kGdn ? in.g[0] : in.g[a]);
    for (int j = 0; j < dv; ++j) S[a * dv + j] *= decay;
  }
  for (int j = 0; j < dv; ++j) u[j] = 0.0f;
  for (int a = 0; a < dk; ++a) {
    for (int j = 0; j < dv; ++j) u[j] += S[a * dv + j] * k[a];
  }
  for (int j = 0; j < dv; ++j) u[j] = in.beta * (in.v[j] - u[j]);
  for (int a = 0; a < dk; ++a) {
    for (int j = 0; j < dv; ++j) S[a * dv + j] += k[a] * u[j];
  }
  for (int j = 0; j < dv; ++j) o[j] = 0.0f;
  for (int a = 0; a < dk; ++a) {
    for (int j = 0; j < dv; ++j) o[j] += S[a * dv + j] * q[a];
  }
}

}  // namespace leapcache::reference
