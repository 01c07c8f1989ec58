// Synthetic GDN/KDA decode trajectories for the accuracy benchmark: per-token (q, k, v, g, beta)
// for one head, deterministic in (seed, kind, head). The generator's choices and why:
//  - keys and queries: 70% of tokens lie near one of m = 4 dominant unit directions (picked by
//    Zipf-like popularity 1, 1/2, 1/3, 1/4; cosine ~0.9 to it), 30% are isotropic; raw norms are
//    log-normal, so the l2 normalisation the kernels apply matters. Real heads attend to a few
//    directions, which makes states approximately low-rank plus noise.
//  - values: per-channel scales with heavy outliers (8 of dv channels scaled 10-50x, the rest 1),
//    an AR(1) latent (rho 0.95) shared across tokens plus white noise, and 1% spike tokens (5x):
//    the outlier columns are what breaks plain absmax quantization.
//  - gates: log decays g = ln(1/2) / half_life * exp(0.3 * N(0,1)). GDN heads get one half-life
//    each, log-spaced from 8 to 4,096 tokens across the heads; KDA heads get per-key-channel
//    half-lives log-uniform in [2, 8,192] tokens (a random assignment per head).
//  - beta = sigmoid(N(1, 1)).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "gpu/format/format.h"

namespace leapcache::tools {

struct TrajectoryOptions {
  StateKind kind = StateKind::kGdn;
  int dk = 128;
  int dv = 128;
  uint64_t seed = 1;
  int head = 0;       // which head of num_heads (sets the GDN half-life)
  int num_heads = 4;
};

class SyntheticTrajectory {
 public:
  explicit SyntheticTrajectory(const TrajectoryOptions& options);

  // Fills the next token's inputs: q, k [dk], v [dv], g [1] (GDN) or [dk] (KDA), beta.
  void Next(float* q, float* k, float* v, float* g, float* beta);

  // The head's mean half-life in tokens (GDN) or the median channel half-life (KDA).
  double half_life() const { return half_life_; }

 private:
  void NearDirection(float* x);

  TrajectoryOptions o_;
  std::mt19937_64 rng_;
  std::normal_distribution<float> normal_{0.0f, 1.0f};
  std::uniform_real_distribution<float> uniform_{0.0f, 1.0f};
  std::vector<std::vector<float>> directions_;  // m unit vectors [dk]
  std::vector<float> value_scale_;              // [dv]
  std::vector<float> latent_;                   // [dv] AR(1) state
  std::vector<float> log_decay_;                // [1] or [dk], mean per-token log decay
  double half_life_ = 0.0;
};

}  // namespace leapcache::tools
