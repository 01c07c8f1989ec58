// The simulated serving engine's clock and checkpoint policy. No model runs: prefill and decode
// take the time a FLOP model (or a fixed tokens/s) says, and the engine decides at which block
// boundaries it checkpoints its recurrent states into the service (DESIGN.md's engine flows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace leapcache::load {

// Which block boundaries of a prefill become checkpoints (only those past the lookup's hit).
enum class Admission {
  kEveryBlock,    // every full block
  kBranchPoints,  // where the prompt leaves every earlier prompt, and the last full block
  kLastBlock,     // the last full block only (the next turn of a conversation hits there)
};
const char* AdmissionName(Admission a);
absl::StatusOr<Admission> ParseAdmission(const std::string& name);

struct ComputeModel {
  // Prefill cost = 2 * active_params per token (the matmuls) + the quadratic part of the
  // full-attention layers, 4 * d_model FLOPs per token per earlier token per layer (QK^T and
  // AV); linear-attention layers are linear in tokens and folded into the params term. Defaults:
  // a Qwen3-Next-80B-A3B-like hybrid (3B active, 12 of 48 layers full attention, d_model 2048).
  double active_params = 3e9;
  int attention_layers = 12;
  int d_model = 2048;
  double peak_flops = 989e12;  // H100/H200 dense BF16
  double mfu = 0.4;            // achieved fraction of the peak in prefill
  // If > 0, prefill runs at this many tokens/s instead of the FLOP model.
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 60;  // one request's decode speed
};

// INVALID_ARGUMENT naming the bad field.
absl::Status ValidateComputeModel(const ComputeModel& m);

// Seconds to prefill tokens [from, to) of a prompt (the first `from` come from a checkpoint).
double PrefillSeconds(const ComputeModel& m, int64_t from, int64_t to);
// Seconds to decode `tokens` output tokens.
double DecodeSeconds(const ComputeModel& m, int64_t tokens);

// Chain indices (block i + 1 ends at index i) the engine puts after prefilling a prompt of
// `full_blocks` whole blocks whose lookup hit at `hit_index` (-1: miss), where `branch_index` is
// the deepest block an earlier prompt already reached (-1: none). Ascending, all > hit_index.
std::vector<int64_t> AdmittedBlocks(Admission admission, int64_t full_blocks, int64_t hit_index,
                                    int64_t branch_index);

}  // namespace leapcache::load
