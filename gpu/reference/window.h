// WindowState: LeapQuant's per-window format for one head (paper Sec. 3.2-3.4, Eq. 4, 7, 10).
//
// The state is a boundary blob B (any codec; the product uses kLeap) plus the open window's
// append-only records j = 1..n (n < p between tokens):
//   k_j (fp16, [dk]) and u_j (fp16, [dv]), each divided by a power of two so its largest entry
//   lies in [1, 2) (no fp16 overflow or underflow whatever the inputs' scale), the product of the
//   two powers kept as an fp32 record scale w_j, and the cumulative log-gate G_j (fp32, [1] for
//   GDN, [dk] for KDA) since the window start, taken after token j's decay.
// The window keeps its own cumulative log-gate G (fp32). The state it represents is
//   S = diag(exp(G)) B + sum_j w_j diag(exp(G - G_j)) k_j u_j^T
// and it is never materialised per token: for a read vector x,
//   S^T x = B^T (exp(G) * x) + sum_j u_j * (w_j * sum_a k_j[a] x[a] exp(G[a] - G_j[a]))
// with B^T y computed from codes, scales and compensators (codec.h BaseReadout).
//
// One token (q, k, v, g, beta), after PrepareQK:
//   G <- G + g
//   u  = beta * (v - S^T k)                  (S after the decay, before the new record)
//   append (k, u, G) as a record (rounded to its storage precision)
//   o  = S^T q                               (S including the stored new record)
//   if n == p: B <- Encode(S) (the boundary refit), records cleared, G <- 0.
// Cumulative log-gates stay in fp32 because real KDA channels fall below -1000 within a window.
// Each token's log-gate is clamped at kMinLogGate first: exp() of anything below about -104 is
// already 0 in fp32, so the decay is unchanged, and the window's sums can never overflow.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "gpu/format/format.h"
#include "gpu/reference/codec.h"
#include "gpu/reference/tracker.h"

namespace leapcache::reference {

inline constexpr float kMinLogGate = -1000.0f;

enum class RecordPrecision {
  kFp16,  // the format: fp16 k and u with power-of-two record scales
  kFp32,  // test only: records kept exactly, to check the window algebra against the recurrence
};

struct WindowOptions {
  BlobSpec spec;  // the boundary blob's codec; spec.p is the window length
  StepOptions step;
  RecordPrecision records = RecordPrecision::kFp16;
};

// The window's stored form, field by field: what a device pool region holds (kernels' tests
// upload a snapshot, run a step on both sides and compare).
struct WindowSnapshot {
  std::vector<uint8_t> blob;             // the boundary blob (header + payload)
  std::vector<float> G;                  // [1] or [dk]
  std::vector<std::vector<float>> k, u;  // [n][dk], [n][dv]: stored values (fp16-exact)
  std::vector<float> scale;              // [n] record scales w_j
  std::vector<std::vector<float>> gcum;  // [n][1 or dk]
};

class WindowState final : public StateTracker {
 public:
  // h0_kv [dk][dv] or nullptr for a zero initial state; h0 is encoded as the first boundary.
  static StatusOr<std::unique_ptr<WindowState>> Create(const WindowOptions& options,
                                                       const float* h0_kv);
  Status Step(const StepInput& in, float* o) override;
  void State(float* S_kv) const override;

  // Rebuilds a window from its stored form. The snapshot must match options (shape, codec,
  // fewer than p records); INVALID_ARGUMENT otherwise.
  static StatusOr<std::unique_ptr<WindowState>> FromSnapshot(const WindowOptions& options,
                                                             const WindowSnapshot& snapshot);
  WindowSnapshot Snapshot() const;

  std::span<const uint8_t> blob() const { return blob_; }
  int num_records() const { return static_cast<int>(records_.size()); }
  // Bytes of one stored record and of the window's own running state (G), per head.
  static size_t RecordBytes(StateKind kind, int dk, int dv);
  static size_t WindowHeaderBytes(StateKind kind, int dk);

 private:
  struct Record {
    std::vector<float> k, u;  // stored values (fp16-representable unless kFp32)
    float scale = 1.0f;       // w_j
    std::vector<float> gcum;  // G_j
  };

  explicit WindowState(const WindowOptions& options);
  Status ResetBase(std::vector<uint8_t> blob);
  void Readout(const std::vector<float>& G, const std::vector<Record>& records, const float* x,
               float* out) const;
  void Reconstruct(const std::vector<float>& G, const std::vector<Record>& records,
                   float* S_kv) const;
  Record MakeRecord(const float* k, const float* u, const std::vector<float>& G) const;

  WindowOptions options_;
  int gate_size_;
  std::vector<uint8_t> blob_;
  UnpackedBlob base_;
  std::vector<float> G_;
  std::vector<Record> records_;
};

}  // namespace leapcache::reference
