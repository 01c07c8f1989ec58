// leapcache attached decode (proto/leapcache/v1/decode.proto): the engine leaves its requests'
// live recurrent states in the service and streams each linear layer's per-token inputs.
//
//   auto s = leapcache::client::DecodeSession::Open(options, {.namespace_id = ns, .slots = 64});
//   (*s)->Reset(0);                                   // or Load(0, chain[hit.index])
//   for each token, for each linear layer l:
//     (*s)->Step({.layer = l, .slot = slots, .q = q, .k = k, .v = v, .g = g, .beta = beta}, o);
//   (*s)->Commit(0, chain[j], {tokens, blocks});      // at a block boundary: a checkpoint
//
// Step runs over one bidirectional stream per session (opened on first use), one request and
// one response per call, so the per-token path has no call setup. A failed step returns the
// server's status and the next step opens a new stream. StepInBuffer, by default, first asks for
// a step channel (decode.proto, OpenStepChannel): if the service is on this host, its steps go
// through a shared-memory mailbox and skip gRPC altogether; otherwise they take the stream. A
// DecodeSession is one engine's decode loop: not for concurrent use. Its destructor closes the
// session on the server.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "leapcache/client.h"
#include "leapcache/data_plane.h"

namespace leapcache::client {

// How StepInBuffer reaches the service.
enum class StepChannel {
  kAuto,          // the shared-memory step channel where the service offers one on this host
  kStream,        // always the Step stream
  kSharedMemory,  // the channel or nothing: StepInBuffer fails if it cannot be had
};

struct DecodeSessionOptions {
  uint32_t namespace_id = 0;
  HeadRange heads;  // all heads if default
  int slots = 0;
  bool l2norm_qk = false;
  float scale = 0.0f;  // 0: dk^-1/2
  // NamespaceInfo::tag: the server refuses the session (FAILED_PRECONDITION) if namespace_id has
  // come to name another namespace. 0: not checked.
  uint64_t namespace_tag = 0;
  StepChannel step_channel = StepChannel::kAuto;
  // How long a step through the channel polls for its reply before it sleeps (it polls again
  // each time it wakes). The engine's thread waits for the step either way; polling only keeps
  // the wake-up out of the step's latency.
  absl::Duration channel_spin = absl::Milliseconds(10);
};

struct DecodeSessionInfo {
  uint64_t id = 0;
  int layers = 0;
  HeadRange heads;
  int dk = 0, dv = 0;
  StateKind kind = StateKind::kGdn;
  std::string backend;  // "cpu" or "cuda"
  uint64_t state_bytes = 0;
  int gate_size() const { return kind == StateKind::kGdn ? 1 : dk; }
};

// One linear layer's token for B requests, H = the session's heads. q, k, v are raw
// little-endian arrays in `dtype`; g and beta are fp32.
struct DecodeStep {
  int layer = 0;
  std::span<const int32_t> slot;  // [B]; -1: padding (zero output)
  DType dtype = DType::kFp32;
  std::span<const uint8_t> q, k, v;  // [B][H][dk], [B][H][dk], [B][H][dv]
  std::span<const float> g;          // [B][H] (GDN) or [B][H][dk] (KDA)
  std::span<const float> beta;       // [B][H]
  DType out_dtype = DType::kFp32;
};

// A step whose vectors are in a registered data-plane buffer (DecodeSession::StepInBuffer).
struct DecodeBufferStep {
  int layer = 0;
  std::span<const int32_t> slot;  // [B]; -1: padding (zero output)
  DType dtype = DType::kFp32;     // of q, k, v
  DType out_dtype = DType::kFp32;
  BufferId buffer = 0;
  uint64_t input_offset = 0;   // packed q | k | v | g | beta
  uint64_t output_offset = 0;  // o
};

// Bytes of the packed inputs and of o for B requests of a session (DecodeBufferStep).
uint64_t PackedStepInputBytes(const DecodeSessionInfo& info, size_t batch, DType dtype);
uint64_t StepOutputBytes(const DecodeSessionInfo& info, size_t batch, DType out_dtype);

class DecodeSession {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeSession>> Open(const ClientOptions& client,
                                                             const DecodeSessionOptions& options);
  ~DecodeSession();
  DecodeSession(const DecodeSession&) = delete;
  DecodeSession& operator=(const DecodeSession&) = delete;

  const DecodeSessionInfo& info() const;

  // Writes the layer's output, [B][H][dv] in step.out_dtype, into `o` (exactly that size).
  absl::Status Step(const DecodeStep& step, std::span<uint8_t> o);
  // The same step with its vectors in a buffer `engine` registered (host or device memory, as
  // its transport takes): the packed inputs at step.input_offset (q, k, v in step.dtype, then g
  // and beta in fp32, each whole, decode.proto's order) are read by the service over the
  // engine's transport, and o is written at step.output_offset before this returns. The engine
  // must be attached to the same server, over ucx, cuda_ipc or nccl (FAILED_PRECONDITION on
  // inline). At large batches this skips the gRPC path's copies of every vector; through a step
  // channel (options.step_channel) it skips gRPC too. A channel that fails (the session ended,
  // the service went away) returns the error and the next call asks for a new one.
  absl::Status StepInBuffer(AttachedEngine& engine, const DecodeBufferStep& step);
  // Whether StepInBuffer's last call went through a step channel.
  bool stepping_through_channel() const;
  absl::Status Reset(int slot);
  // The checkpoint's position on success.
  absl::StatusOr<Position> Load(int slot, const BlockHash& hash);
  absl::Status Commit(int slot, const BlockHash& hash, const Position& position);
  // Closes the session now (the destructor does it otherwise).
  absl::Status Close();

 private:
  struct Impl;
  explicit DecodeSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leapcache::client
