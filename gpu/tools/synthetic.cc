#include "gpu/tools/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace leapcache::tools {

namespace {

constexpr int kDirections = 4;
constexpr float kNearFraction = 0.7f;
constexpr float kDirectionNoise = 0.5f;  // per-coordinate noise / sqrt(dk): cosine ~0.9
constexpr int kOutlierChannels = 8;
constexpr float kLatentRho = 0.95f;
constexpr float kSpikeProbability = 0.01f;
constexpr float kGateJitter = 0.3f;

}  // namespace

SyntheticTrajectory::SyntheticTrajectory(const TrajectoryOptions& o)
    : o_(o), rng_(o.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(o.kind) * 1000003ull +
                  static_cast<uint64_t>(o.head)) {
  directions_.assign(kDirections, std::vector<float>(o.dk));
  for (auto& d : directions_) {
    float n = 0.0f;
    for (float& x : d) {
      x = normal_(rng_);
      n += x * x;
    }
    for (float& x : d) x /= std::sqrt(n);
  }
  value_scale_.assign(o.dv, 1.0f);
  std::vector<int> channels(o.dv);
  std::iota(channels.begin(), channels.end(), 0);
  std::shuffle(channels.begin(), channels.end(), rng_);
  for (int i = 0; i < std::min(kOutlierChannels, o.dv); ++i) {
    value_scale_[channels[i]] = 10.0f + 40.0f * uniform_(rng_);
  }
  latent_.assign(o.dv, 0.0f);
  const float ln_half = std::log(0.5f);
  if (o.kind == StateKind::kGdn) {
    // Half-lives log-spaced over the heads: 8 ... 4096 tokens.
    const double t = o.num_heads > 1 ? static_cast<double>(o.head) / (o.num_heads - 1) : 0.0;
    half_life_ = 8.0 * std::pow(4096.0 / 8.0, t);
    log_decay_.assign(1, ln_half / static_cast<float>(half_life_));
  } else {
    log_decay_.resize(o.dk);
    std::vector<double> hl(o.dk);
    for (int a = 0; a < o.dk; ++a) {
      hl[a] = 2.0 * std::pow(8192.0 / 2.0, static_cast<double>(uniform_(rng_)));
      log_decay_[a] = ln_half / static_cast<float>(hl[a]);
    }
    std::nth_element(hl.begin(), hl.begin() + o.dk / 2, hl.end());
    half_life_ = hl[o.dk / 2];
  }
}

void SyntheticTrajectory::NearDirection(float* x) {
  const int dk = o_.dk;
  if (uniform_(rng_) < kNearFraction) {
    // Popularity 1 : 1/2 : 1/3 : 1/4.
    const float weights[kDirections] = {1.0f, 0.5f, 1.0f / 3, 0.25f};
    float u = uniform_(rng_) * (1.0f + 0.5f + 1.0f / 3 + 0.25f);
    int i = 0;
    while (i < kDirections - 1 && u > weights[i]) u -= weights[i++];
    const float sign = uniform_(rng_) < 0.5f ? -1.0f : 1.0f;
    const float noise = kDirectionNoise / std::sqrt(static_cast<float>(dk));
    for (int a = 0; a < dk; ++a) x[a] = sign * directions_[i][a] + noise * normal_(rng_);
  } else {
    for (int a = 0; a < dk; ++a) x[a] = normal_(rng_) / std::sqrt(static_cast<float>(dk));
  }
  const float norm = std::exp(0.5f * normal_(rng_));  // log-normal raw norm
  for (int a = 0; a < dk; ++a) x[a] *= norm;
}

void SyntheticTrajectory::Next(float* q, float* k, float* v, float* g, float* beta) {
  NearDirection(q);
  NearDirection(k);
  const float spike = uniform_(rng_) < kSpikeProbability ? 5.0f : 1.0f;
  const float innovation = std::sqrt(1.0f - kLatentRho * kLatentRho);
  for (int j = 0; j < o_.dv; ++j) {
    latent_[j] = kLatentRho * latent_[j] + innovation * normal_(rng_);
    v[j] = spike * value_scale_[j] * (0.6f * latent_[j] + 0.8f * normal_(rng_));
  }
  for (size_t i = 0; i < log_decay_.size(); ++i) {
    g[i] = log_decay_[i] * std::exp(kGateJitter * normal_(rng_));
  }
  *beta = 1.0f / (1.0f + std::exp(-(1.0f + normal_(rng_))));
}

}  // namespace leapcache::tools
