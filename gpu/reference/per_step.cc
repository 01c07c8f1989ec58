#include "gpu/reference/per_step.h"

#include "gpu/reference/codec.h"

namespace leapcache::reference {

StatusOr<std::unique_ptr<PerStepState>> PerStepState::Create(const BlobSpec& spec,
                                                             const StepOptions& step,
                                                             const float* h0_kv) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateSpec(spec));
  std::unique_ptr<PerStepState> s(new PerStepState(spec, step));
  std::vector<float> zero;
  if (h0_kv == nullptr) {
    zero.assign(static_cast<size_t>(spec.dk) * spec.dv, 0.0f);
    h0_kv = zero.data();
  }
  LEAPCACHE_ASSIGN_OR_RETURN(s->blob_, Encode(spec, h0_kv, Orientation::kKV));
  return s;
}

Status PerStepState::Step(const StepInput& in, float* o) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateStepInput(spec_.kind, spec_.dk, spec_.dv, in));
  std::vector<float> S(static_cast<size_t>(spec_.dk) * spec_.dv);
  std::vector<float> out(spec_.dv);
  LEAPCACHE_RETURN_IF_ERROR(Decode(blob_, S.data(), Orientation::kKV));
  RecurrentStep(spec_.kind, spec_.dk, spec_.dv, step_, in, S.data(), out.data());
  LEAPCACHE_ASSIGN_OR_RETURN(std::vector<uint8_t> next, Encode(spec_, S.data(), Orientation::kKV));
  blob_ = std::move(next);
  std::copy(out.begin(), out.end(), o);
  return OkStatus();
}

void PerStepState::State(float* S_kv) const {
  const Status s = Decode(blob_, S_kv, Orientation::kKV);
  (void)s;  // blob_ was produced by Encode: always valid
}

}  // namespace leapcache::reference
