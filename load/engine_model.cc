#include "load/engine_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace leapcache::load {

const char* AdmissionName(Admission a) {
  switch (a) {
    case Admission::kEveryBlock: return "every-block";
    case Admission::kBranchPoints: return "branch-points";
    case Admission::kLastBlock: return "last-block";
  }
  return "?";
}

absl::StatusOr<Admission> ParseAdmission(const std::string& name) {
  for (Admission a : {Admission::kEveryBlock, Admission::kBranchPoints, Admission::kLastBlock}) {
    if (name == AdmissionName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "admission must be every-block, branch-points or last-block (got \"", name, "\")"));
}

absl::Status ValidateComputeModel(const ComputeModel& m) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(m.active_params)) return absl::InvalidArgumentError("active_params must be > 0");
  if (m.attention_layers < 0) return absl::InvalidArgumentError("attention_layers must be >= 0");
  if (m.d_model < 1) return absl::InvalidArgumentError("d_model must be >= 1");
  if (!positive(m.peak_flops)) return absl::InvalidArgumentError("peak_flops must be > 0");
  if (!positive(m.mfu) || m.mfu > 1) return absl::InvalidArgumentError("mfu must be in (0, 1]");
  if (!std::isfinite(m.prefill_tokens_per_s) || m.prefill_tokens_per_s < 0) {
    return absl::InvalidArgumentError("prefill_tokens_per_s must be >= 0 (0: FLOP model)");
  }
  if (!positive(m.decode_tokens_per_s)) {
    return absl::InvalidArgumentError("decode_tokens_per_s must be > 0");
  }
  return absl::OkStatus();
}

double PrefillSeconds(const ComputeModel& m, int64_t from, int64_t to) {
  if (to <= from) return 0;
  const double n = static_cast<double>(to - from);
  if (m.prefill_tokens_per_s > 0) return n / m.prefill_tokens_per_s;
  // Sum over tokens t in [from, to) of 4 * d_model * t per attention layer.
  const double f = static_cast<double>(from), t = static_cast<double>(to);
  const double attention = 2.0 * m.d_model * m.attention_layers * (t * t - f * f);
  const double flops = 2.0 * m.active_params * n + attention;
  return flops / (m.peak_flops * m.mfu);
}

double DecodeSeconds(const ComputeModel& m, int64_t tokens) {
  return tokens <= 0 ? 0 : static_cast<double>(tokens) / m.decode_tokens_per_s;
}

std::vector<int64_t> AdmittedBlocks(Admission admission, int64_t full_blocks, int64_t hit_index,
                                    int64_t branch_index) {
  std::vector<int64_t> out;
  const int64_t last = full_blocks - 1;
  if (last <= hit_index) return out;
  switch (admission) {
    case Admission::kEveryBlock:
      for (int64_t i = hit_index + 1; i <= last; ++i) out.push_back(i);
      break;
    case Admission::kBranchPoints:
      if (branch_index > hit_index && branch_index < last) out.push_back(branch_index);
      out.push_back(last);
      break;
    case Admission::kLastBlock:
      out.push_back(last);
      break;
  }
  return out;
}

}  // namespace leapcache::load
