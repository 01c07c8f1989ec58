// The checkpoint payloads of a load test: real recurrent states, not random bytes.
//
// Running the recurrence for every put at a full model shape is too slow, so at start the pool
// runs the FP32 GDN/KDA recurrence (gpu/reference/recurrence.h, FLA conventions) over
// `trajectory_tokens` tokens of synthetic inputs (gpu/tools/synthetic.h: low-rank keys, outlier
// value channels, per-head decays) for `distinct_states` heads, and encodes each final state
// once per format with the CPU reference codec, the same codec the server embeds. A checkpoint
// is layers x heads of these blobs, the (layer, head) slot k of checkpoint `seed` taking pool
// entry mix(seed, k) mod distinct_states: the bytes are a pure function of (format, seed), so
// every get can be checked byte for byte without keeping what was put, and two checkpoints
// practically never share all their blobs. Where the model has a conv state or extra bytes, each
// blob is followed by a side state of the same entry (finite pseudo-random conv elements of the
// model's dtype, then pseudo-random bytes): the units the server stores.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "leapcache/client.h"
#include "load/load_format.h"

namespace leapcache::load {

struct StatePoolOptions {
  int distinct_states = 32;
  int trajectory_tokens = 256;
  uint64_t seed = 1;
};

class StatePool {
 public:
  // INVALID_ARGUMENT for a bad shape or option; the codec's error if a state cannot be encoded.
  static absl::StatusOr<std::unique_ptr<StatePool>> Build(const client::ModelShape& model,
                                                          const std::vector<LoadFormat>& formats,
                                                          const StatePoolOptions& options);

  // The (layer, head)-ordered units (blob, then side state) of checkpoint `seed` in
  // formats[format], written to `out` (resized to checkpoint_bytes(format)).
  void CheckpointBlobs(size_t format, uint64_t seed, std::vector<uint8_t>& out) const;
  // True iff `bytes` are exactly CheckpointBlobs(format, seed).
  bool Matches(size_t format, uint64_t seed, std::span<const uint8_t> bytes) const;

  uint64_t blob_bytes(size_t format) const { return blobs_[format].blob_bytes; }
  // Of each (layer, head): its conv state and extra bytes (0 without them).
  uint64_t side_bytes() const { return side_bytes_; }
  uint64_t checkpoint_bytes(size_t format) const {
    return (blobs_[format].blob_bytes + side_bytes_) * static_cast<uint64_t>(heads_per_checkpoint_);
  }
  // ||decode(blob) - S|| / ||S|| averaged over the pool's states, per format.
  double mean_relative_error(size_t format) const { return blobs_[format].mean_relative_error; }
  const StatePoolOptions& options() const { return options_; }
  // One sentence for the reports: what the payloads are.
  std::string Description() const;

 private:
  struct FormatBlobs {
    uint64_t blob_bytes = 0;
    std::vector<uint8_t> bytes;  // distinct_states blobs back to back
    double mean_relative_error = 0;
  };
  StatePool() = default;
  size_t Entry(uint64_t seed, int slot) const;

  client::ModelShape model_;
  StatePoolOptions options_;
  int heads_per_checkpoint_ = 0;
  std::vector<FormatBlobs> blobs_;
  uint64_t side_bytes_ = 0;
  std::vector<uint8_t> sides_;  // distinct_states side states back to back
};

}  // namespace leapcache::load
