#include "load/state_pool.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpu/reference/codec.h"
#include "gpu/reference/recurrence.h"
#include "gpu/tools/synthetic.h"
#include "base/format_status.h"
#include "base/status_macros.h"

namespace leapcache::load {
namespace {

// SplitMix64's finaliser: a cheap bijective mix, so nearby seeds pick unrelated entries.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Heads per synthetic "layer": sets the spread of GDN half-lives (gpu/tools/synthetic.h).
constexpr int kTrajectoryHeads = 8;

// The state S [dk][dv] after `tokens` steps of head `i`'s synthetic trajectory.
std::vector<float> RunTrajectory(const client::ModelShape& model, const StatePoolOptions& o,
                                 int i) {
  const StateKind kind = model.kind == client::StateKind::kGdn ? StateKind::kGdn : StateKind::kKda;
  tools::TrajectoryOptions t;
  t.kind = kind;
  t.dk = model.dk;
  t.dv = model.dv;
  t.seed = o.seed + static_cast<uint64_t>(i / kTrajectoryHeads);
  t.head = i % kTrajectoryHeads;
  t.num_heads = kTrajectoryHeads;
  tools::SyntheticTrajectory traj(t);
  const reference::StepOptions step{true, 1.0f / std::sqrt(static_cast<float>(model.dk))};
  std::vector<float> q(model.dk), k(model.dk), v(model.dv), g(reference::GateSize(kind, model.dk));
  std::vector<float> S(static_cast<size_t>(model.dk) * model.dv, 0.0f), o_out(model.dv);
  float beta = 0;
  for (int s = 0; s < o.trajectory_tokens; ++s) {
    traj.Next(q.data(), k.data(), v.data(), g.data(), &beta);
    reference::RecurrentStep(kind, model.dk, model.dv, step,
                             {q.data(), k.data(), v.data(), g.data(), beta}, S.data(), o_out.data());
  }
  return S;
}

// Side state `i`: the conv elements pseudo-random with the exponent's top bit clear (finite, as
// the server requires), then pseudo-random extra bytes.
void MakeSide(const client::ModelShape& model, uint64_t seed, int i, std::span<uint8_t> out) {
  size_t conv_bytes = 0;
  size_t width = 0;
  if (model.conv.has_value()) {
    width = model.conv->dtype == client::ConvDType::kFp32 ? 4 : 2;
    conv_bytes = static_cast<size_t>(model.conv->channels / model.total_heads) *
                 model.conv->width * width;
  }
  uint64_t x = Mix(seed ^ Mix(0x51de0000ull + static_cast<uint64_t>(i)));
  for (size_t b = 0; b < out.size(); ++b) {
    if (b % 8 == 0) x = Mix(x);
    out[b] = static_cast<uint8_t>(x >> (8 * (b % 8)));
  }
  for (size_t e = 0; e + width <= conv_bytes && width > 0; e += width) {
    out[e + width - 1] &= 0xbf;  // bit 30 of an fp32, bit 14 of a bf16 or fp16
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<StatePool>> StatePool::Build(const client::ModelShape& model,
                                                            const std::vector<LoadFormat>& formats,
                                                            const StatePoolOptions& options) {
  if (model.linear_layers < 1 || model.total_heads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("layers and heads must be >= 1 (got ",
                                                   model.linear_layers, " x ", model.total_heads, ")"));
  }
  if (options.distinct_states < 1 || options.distinct_states > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "distinct_states must be in [1, 4096] (got ", options.distinct_states, ")"));
  }
  if (options.trajectory_tokens < 1 || options.trajectory_tokens > 1 << 20) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trajectory_tokens must be in [1, 2^20] (got ", options.trajectory_tokens, ")"));
  }
  if (formats.empty()) return absl::InvalidArgumentError("at least one format is needed");
  for (const LoadFormat& f : formats) {
    LC_RETURN_IF_ERROR(base::FromFormatStatus(ValidateSpec(ToBlobSpec(model, f.format))));
  }
  std::unique_ptr<StatePool> pool(new StatePool());
  pool->model_ = model;
  pool->options_ = options;
  pool->heads_per_checkpoint_ = model.linear_layers * model.total_heads;
  pool->blobs_.resize(formats.size());
  if (model.conv.has_value()) {
    if (model.conv->channels < 1 || model.conv->channels % model.total_heads != 0 ||
        model.conv->width < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "conv channels must be a positive multiple of the heads and the width >= 1 (got ",
          model.conv->channels, " x ", model.conv->width, ")"));
    }
    pool->side_bytes_ = static_cast<uint64_t>(model.conv->channels / model.total_heads) *
                        model.conv->width * (model.conv->dtype == client::ConvDType::kFp32 ? 4 : 2);
  }
  if (model.extra_bytes < 0) return absl::InvalidArgumentError("extra bytes must be >= 0");
  pool->side_bytes_ += static_cast<uint64_t>(model.extra_bytes);
  pool->sides_.resize(pool->side_bytes_ * options.distinct_states);
  for (int i = 0; i < options.distinct_states; ++i) {
    MakeSide(model, options.seed, i,
             std::span<uint8_t>(pool->sides_).subspan(i * pool->side_bytes_, pool->side_bytes_));
  }
  const size_t elems = static_cast<size_t>(model.dk) * model.dv;
  std::vector<float> decoded(elems);
  for (int i = 0; i < options.distinct_states; ++i) {
    const std::vector<float> S = RunTrajectory(model, options, i);
    double norm = 0;
    for (float x : S) norm += static_cast<double>(x) * x;
    for (size_t f = 0; f < formats.size(); ++f) {
      const BlobSpec spec = ToBlobSpec(model, formats[f].format);
      StatusOr<std::vector<uint8_t>> blob = reference::Encode(spec, S.data(), Orientation::kKV);
      if (!blob.ok()) return base::FromFormatStatus(blob.status());
      LC_RETURN_IF_ERROR(base::FromFormatStatus(
          reference::Decode(*blob, decoded.data(), Orientation::kKV)));
      double err = 0;
      for (size_t e = 0; e < elems; ++e) {
        const double d = static_cast<double>(decoded[e]) - S[e];
        err += d * d;
      }
      FormatBlobs& fb = pool->blobs_[f];
      fb.blob_bytes = blob->size();
      fb.bytes.insert(fb.bytes.end(), blob->begin(), blob->end());
      fb.mean_relative_error += (norm > 0 ? std::sqrt(err / norm) : 0) / options.distinct_states;
    }
  }
  return pool;
}

size_t StatePool::Entry(uint64_t seed, int slot) const {
  return static_cast<size_t>(Mix(seed ^ Mix(static_cast<uint64_t>(slot))) %
                             static_cast<uint64_t>(options_.distinct_states));
}

void StatePool::CheckpointBlobs(size_t format, uint64_t seed, std::vector<uint8_t>& out) const {
  const FormatBlobs& fb = blobs_[format];
  const size_t unit = fb.blob_bytes + side_bytes_;
  out.resize(checkpoint_bytes(format));
  for (int k = 0; k < heads_per_checkpoint_; ++k) {
    const size_t e = Entry(seed, k);
    std::memcpy(out.data() + k * unit, fb.bytes.data() + e * fb.blob_bytes, fb.blob_bytes);
    if (side_bytes_ > 0) {
      std::memcpy(out.data() + k * unit + fb.blob_bytes, sides_.data() + e * side_bytes_,
                  side_bytes_);
    }
  }
}

bool StatePool::Matches(size_t format, uint64_t seed, std::span<const uint8_t> bytes) const {
  const FormatBlobs& fb = blobs_[format];
  const size_t unit = fb.blob_bytes + side_bytes_;
  if (bytes.size() != checkpoint_bytes(format)) return false;
  for (int k = 0; k < heads_per_checkpoint_; ++k) {
    const size_t e = Entry(seed, k);
    if (std::memcmp(bytes.data() + k * unit, fb.bytes.data() + e * fb.blob_bytes,
                    fb.blob_bytes) != 0) {
      return false;
    }
    // (Without side states sides_ is empty and its data() may be null, which memcmp must not
    // see even for 0 bytes.)
    if (side_bytes_ > 0 &&
        std::memcmp(bytes.data() + k * unit + fb.blob_bytes, sides_.data() + e * side_bytes_,
                    side_bytes_) != 0) {
      return false;
    }
  }
  return true;
}

std::string StatePool::Description() const {
  return absl::StrCat(
      "real ", model_.kind == client::StateKind::kGdn ? "GDN" : "KDA", " states: ",
      options_.distinct_states, " distinct ", model_.dk, "x", model_.dv,
      " heads, each the FP32 recurrence run over ", options_.trajectory_tokens,
      " tokens of synthetic inputs (gpu/tools/synthetic.h, seed ", options_.seed,
      "), encoded once per format with the CPU reference codec; a checkpoint is ",
      model_.linear_layers, " layers x ", model_.total_heads,
      " heads of them, chosen per (layer, head) by a hash of the checkpoint's block hash",
      side_bytes_ > 0 ? absl::StrCat(", each with a ", side_bytes_,
                                     "-byte side state (conv state and extra bytes)")
                      : "");
}

}  // namespace leapcache::load
