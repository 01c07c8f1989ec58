// CpuDecodeBackend: the attached-decode states on the CPU reference (gpu/reference), the
// embedded backend. One reference tracker per (slot, layer, head): reference::WindowState for
// window-format namespaces, reference::PerStepState with the fp32 codec (the FP32 recurrence)
// for every other codec. Outputs are bit-identical to driving those trackers in process.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "gpu/reference/tracker.h"
#include "gpu/reference/window.h"
#include "service/decode/decode_backend.h"

namespace leapcache::decode {

class CpuDecodeBackend final : public DecodeBackend {
 public:
  // INVALID_ARGUMENT for a shape the reference cannot hold.
  static absl::StatusOr<std::unique_ptr<CpuDecodeBackend>> Create(const DecodeShape& shape);

  const char* name() const override { return "cpu"; }
  absl::Status Step(const LayerStep& step, const LayerOutput& out) override;
  absl::Status Reset(int slot) override;
  absl::Status Load(int slot, std::span<const std::span<const uint8_t>> blobs) override;
  absl::StatusOr<std::vector<std::vector<uint8_t>>> Export(int slot) override;
  size_t state_bytes() const override { return LiveStateBytes(shape_); }

 private:
  explicit CpuDecodeBackend(const DecodeShape& shape) : DecodeBackend(shape) {}
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

}  // namespace leapcache::decode
