// Random decode inputs and in-process reference trackers for the attached-decode tests.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "gpu/reference/per_step.h"
#include "gpu/reference/window.h"
#include "service/compute/live_states.h"

namespace leapcache::compute::testing {

// One layer's inputs for `batch` requests, realistic ranges: q, k, v ~ N(0, 1), log decays in
// [-0.5, -0.01] (GDN) or [-0.3, 0] per channel (KDA), beta in (0, 1).
struct RandomStep {
  std::vector<float> q, k, v, g, beta;
  RandomStep(const DecodeShape& s, int batch, std::mt19937& rng) {
    const size_t bh = static_cast<size_t>(batch) * s.heads;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> gdn(-0.5f, -0.01f), kda(-0.3f, 0.0f), b(0.05f, 0.95f);
    auto fill = [&](std::vector<float>& x, size_t n, auto& dist) {
      x.resize(n);
      for (float& e : x) e = dist(rng);
    };
    fill(q, bh * s.spec.dk, normal);
    fill(k, bh * s.spec.dk, normal);
    fill(v, bh * s.spec.dv, normal);
    if (s.spec.kind == StateKind::kGdn) {
      fill(g, bh, gdn);
    } else {
      fill(g, bh * s.spec.dk, kda);
    }
    fill(beta, bh, b);
  }
  // The step as an engine hands it over with fp32 q, k, v.
  LayerStep Step(int layer, std::span<const int32_t> slot) const {
    auto bytes = [](const std::vector<float>& x) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(x.data()), x.size() * 4);
    };
    return {layer, slot, DType::kFp32, bytes(q), bytes(k), bytes(v), g, beta};
  }
};

// An fp32 output buffer as a LayerOutput.
inline LayerOutput Fp32Out(std::vector<float>& o) {
  return {DType::kFp32, {reinterpret_cast<uint8_t*>(o.data()), o.size() * sizeof(float)}};
}

// The tracker the CPU backend must match for one (slot, layer, head).
inline std::unique_ptr<reference::StateTracker> ReferenceTracker(const DecodeShape& s) {
  const reference::StepOptions step{s.l2norm_qk, s.scale};
  if (s.spec.codec == Codec::kLeap) {
    reference::WindowOptions o;
    o.spec = s.spec;
    o.step = step;
    return std::move(reference::WindowState::Create(o, nullptr)).value();
  }
  BlobSpec fp32 = s.spec;
  fp32.codec = Codec::kFp32;
  fp32.bits = 32;
  fp32.p = 1;
  fp32.r = 0;
  fp32.smoothing = false;
  return std::move(reference::PerStepState::Create(fp32, step, nullptr)).value();
}

}  // namespace leapcache::compute::testing
