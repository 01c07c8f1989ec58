#include "service/compute/cpu/cpu_live_states.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/format_status.h"
#include "base/status_macros.h"
#include "gpu/format/half.h"
#include "gpu/reference/codec.h"
#include "gpu/reference/per_step.h"
#include "gpu/reference/window.h"
#include "service/compute/cpu/cpu_compute.h"

namespace leapcache::compute {
namespace {

BlobSpec Fp32Spec(const BlobSpec& spec) {
  BlobSpec fp32;
  fp32.kind = spec.kind;
  fp32.dk = spec.dk;
  fp32.dv = spec.dv;
  fp32.codec = Codec::kFp32;
  fp32.bits = 32;
  fp32.p = 1;
  fp32.r = 0;
  fp32.smoothing = false;
  return fp32;
}

template <typename T>
absl::StatusOr<T> FromFormat(leapcache::StatusOr<T> v) {
  if (!v.ok()) return base::FromFormatStatus(v.status());
  return std::move(v).value();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuLiveStates>> CpuLiveStates::Create(
    const DecodeShape& shape) {
  LC_RETURN_IF_ERROR(base::FromFormatStatus(ValidateSpec(shape.spec)));
  if (shape.slots <= 0 || shape.layers <= 0 || shape.heads <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("slots, layers and heads must be positive (got ",
                                                   shape.slots, ", ", shape.layers, ", ",
                                                   shape.heads, ")"));
  }
  std::unique_ptr<CpuLiveStates> b(new CpuLiveStates(shape));
  const size_t n = static_cast<size_t>(shape.slots) * shape.layers * shape.heads;
  b->trackers_.reserve(n);
  if (b->windowed()) {
    LC_ASSIGN_OR_RETURN(std::unique_ptr<reference::StateTracker> zero, b->MakeTracker(nullptr));
    b->zero_window_ = static_cast<reference::WindowState&>(*zero).Snapshot();
  }
  for (size_t i = 0; i < n; ++i) {
    LC_ASSIGN_OR_RETURN(std::unique_ptr<reference::StateTracker> t, b->MakeTracker(nullptr));
    b->trackers_.push_back(std::move(t));
  }
  return b;
}

absl::StatusOr<std::unique_ptr<reference::StateTracker>> CpuLiveStates::MakeTracker(
    const float* h0_kv) const {
  const reference::StepOptions step{shape_.l2norm_qk, shape_.scale};
  if (windowed()) {
    reference::WindowOptions options;
    options.spec = shape_.spec;
    options.step = step;
    if (h0_kv == nullptr && zero_window_.has_value()) {
      LC_ASSIGN_OR_RETURN(std::unique_ptr<reference::WindowState> w,
                          FromFormat(reference::WindowState::FromSnapshot(options, *zero_window_)));
      return std::unique_ptr<reference::StateTracker>(std::move(w));
    }
    LC_ASSIGN_OR_RETURN(std::unique_ptr<reference::WindowState> w,
                        FromFormat(reference::WindowState::Create(options, h0_kv)));
    return std::unique_ptr<reference::StateTracker>(std::move(w));
  }
  LC_ASSIGN_OR_RETURN(
      std::unique_ptr<reference::PerStepState> s,
      FromFormat(reference::PerStepState::Create(Fp32Spec(shape_.spec), step, h0_kv)));
  return std::unique_ptr<reference::StateTracker>(std::move(s));
}

absl::Status CpuLiveStates::Step(const LayerStep& step, const LayerOutput& out) {
  LC_RETURN_IF_ERROR(RequireHost(step.memory, "the step's inputs"));
  LC_RETURN_IF_ERROR(RequireHost(out.memory, "the step's output"));
  const int dk = shape_.spec.dk, dv = shape_.spec.dv, gate = shape_.gate_size();
  const size_t heads = static_cast<size_t>(shape_.heads);
  std::fill(out.o.begin(), out.o.end(), uint8_t{0});  // +0.0 in both dtypes
  std::vector<float> q(dk), k(dk), v(dv), o(dv);
  for (size_t b = 0; b < step.slot.size(); ++b) {
    const int slot = step.slot[b];
    if (slot < 0) continue;
    for (size_t h = 0; h < heads; ++h) {
      const size_t bh = b * heads + h;
      for (int i = 0; i < dk; ++i) {
        q[i] = ElementValue(step.dtype, step.q.data(), bh * dk + i);
        k[i] = ElementValue(step.dtype, step.k.data(), bh * dk + i);
      }
      for (int i = 0; i < dv; ++i) v[i] = ElementValue(step.dtype, step.v.data(), bh * dv + i);
      reference::StepInput in{q.data(), k.data(), v.data(), step.g.data() + bh * gate,
                              step.beta[bh]};
      leapcache::Status st =
          trackers_[index(slot, step.layer, static_cast<int>(h))]->Step(in, o.data());
      if (!st.ok()) {
        return base::FromFormatStatus(leapcache::Status(
            st.code(),
            absl::StrCat("slot ", slot, " layer ", step.layer, " head ", h, ": ", st.message())));
      }
      uint8_t* dst = out.o.data() + bh * dv * DTypeBytes(out.dtype);
      if (out.dtype == DType::kFp32) {
        std::memcpy(dst, o.data(), o.size() * sizeof(float));
      } else {
        for (int i = 0; i < dv; ++i) {
          const uint16_t h16 = FloatToBf16(o[i]);
          std::memcpy(dst + 2 * i, &h16, 2);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuLiveStates::Reset(int slot) {
  for (int l = 0; l < shape_.layers; ++l) {
    for (int h = 0; h < shape_.heads; ++h) {
      LC_ASSIGN_OR_RETURN(trackers_[index(slot, l, h)], MakeTracker(nullptr));
    }
  }
  return absl::OkStatus();
}

absl::Status CpuLiveStates::Load(int slot, std::span<const std::span<const uint8_t>> blobs) {
  const size_t per_slot = static_cast<size_t>(shape_.layers) * shape_.heads;
  if (blobs.size() != per_slot) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", per_slot, " blobs (layers x heads), got ", blobs.size()));
  }
  // Build every tracker first: a bad blob leaves the slot unchanged.
  std::vector<std::unique_ptr<reference::StateTracker>> loaded(per_slot);
  std::vector<float> S(static_cast<size_t>(shape_.spec.dk) * shape_.spec.dv);
  for (size_t i = 0; i < per_slot; ++i) {
    if (windowed()) {
      reference::WindowOptions options;
      options.spec = shape_.spec;
      options.step = {shape_.l2norm_qk, shape_.scale};
      reference::WindowSnapshot snapshot;
      snapshot.blob.assign(blobs[i].begin(), blobs[i].end());
      snapshot.G.assign(static_cast<size_t>(shape_.gate_size()), 0.0f);
      LC_ASSIGN_OR_RETURN(std::unique_ptr<reference::WindowState> w,
                          FromFormat(reference::WindowState::FromSnapshot(options, snapshot)));
      loaded[i] = std::move(w);
    } else {
      LC_RETURN_IF_ERROR(
          base::FromFormatStatus(reference::Decode(blobs[i], S.data(), Orientation::kKV)));
      LC_ASSIGN_OR_RETURN(loaded[i], MakeTracker(S.data()));
    }
  }
  for (size_t i = 0; i < per_slot; ++i) {
    trackers_[static_cast<size_t>(slot) * per_slot + i] = std::move(loaded[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<uint8_t>>> CpuLiveStates::Export(int slot) {
  const size_t per_slot = static_cast<size_t>(shape_.layers) * shape_.heads;
  std::vector<std::vector<uint8_t>> blobs;
  blobs.reserve(per_slot);
  std::vector<float> S(static_cast<size_t>(shape_.spec.dk) * shape_.spec.dv);
  for (size_t i = 0; i < per_slot; ++i) {
    const reference::StateTracker& t = *trackers_[static_cast<size_t>(slot) * per_slot + i];
    if (windowed()) {
      const auto& w = static_cast<const reference::WindowState&>(t);
      if (w.num_records() == 0) {
        blobs.emplace_back(w.blob().begin(), w.blob().end());
        continue;
      }
    }
    t.State(S.data());
    LC_ASSIGN_OR_RETURN(std::vector<uint8_t> blob,
                        FromFormat(reference::Encode(shape_.spec, S.data(), Orientation::kKV)));
    blobs.push_back(std::move(blob));
  }
  return blobs;
}

}  // namespace leapcache::compute
