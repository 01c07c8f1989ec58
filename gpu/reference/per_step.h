// PerStepState: the state is stored in a codec and re-encoded after every token
// (decode -> FP32 recurrence step -> encode). With codec fp32 it is the FP32 reference itself;
// with bf16, fp16, int-row, int-col it is the per-step baseline the window format is measured
// against.
#pragma once

#include <memory>
#include <vector>

#include "gpu/format/format.h"
#include "gpu/reference/tracker.h"

namespace leapcache::reference {

class PerStepState final : public StateTracker {
 public:
  // h0_kv [dk][dv] or nullptr for a zero initial state.
  static StatusOr<std::unique_ptr<PerStepState>> Create(const BlobSpec& spec,
                                                        const StepOptions& step,
                                                        const float* h0_kv);
  Status Step(const StepInput& in, float* o) override;
  void State(float* S_kv) const override;
  const std::vector<uint8_t>& blob() const { return blob_; }

 private:
  PerStepState(const BlobSpec& spec, const StepOptions& step) : spec_(spec), step_(step) {}
  BlobSpec spec_;
  StepOptions step_;
  std::vector<uint8_t> blob_;
};

}  // namespace leapcache::reference
