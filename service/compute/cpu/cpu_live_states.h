// CpuLiveStates: the attached-decode states on the CPU reference (gpu/reference), the
// embedded backend. One reference tracker per (slot, layer, head): reference::WindowState for
// window-format namespaces, reference::PerStepState with the fp32 codec (the FP32 recurrence)
// for every other codec. Outputs are bit-identical to driving those trackers in process. Host
// memory only: a step whose vectors are in device memory is INVALID_ARGUMENT.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "gpu/reference/tracker.h"
#include "gpu/reference/window.h"
#include "service/compute/live_states.h"

namespace leapcache::compute {

class CpuLiveStates final : public LiveStates {
 public:
  // INVALID_ARGUMENT for a shape the reference cannot hold.
  static absl::StatusOr<std::unique_ptr<CpuLiveStates>> Create(const DecodeShape& shape);

  const char* name() const override { return "cpu"; }
  bool takes_device_memory() const override { return false; }
  absl::Status Step(const LayerStep& step, const LayerOutput& out) override;
  absl::Status Reset(int slot) override;
  absl::Status Load(int slot, std::span<const std::span<const uint8_t>> blobs) override;
  absl::StatusOr<std::vector<std::vector<uint8_t>>> Export(int slot) override;
  size_t state_bytes() const override { return LiveStateBytes(shape_); }

 private:
  explicit CpuLiveStates(const DecodeShape& shape) : LiveStates(shape) {}
  bool windowed() const { return shape_.spec.codec == Codec::kLeap; }
  size_t index(int slot, int layer, int head) const {
    return (static_cast<size_t>(slot) * shape_.layers + layer) * shape_.heads + head;
  }
  // A zero state (h0 == nullptr) or the dense state h0_kv [dk][dv] in the live form.
  absl::StatusOr<std::unique_ptr<reference::StateTracker>> MakeTracker(const float* h0_kv) const;

  std::vector<std::unique_ptr<reference::StateTracker>> trackers_;
  // The window form of the zero state, encoded once: every reset slot starts from it (encoding
  // it per (slot, layer, head) cost seconds per session at B = 256 x 32 heads).
  std::optional<reference::WindowSnapshot> zero_window_;
};

}  // namespace leapcache::compute
