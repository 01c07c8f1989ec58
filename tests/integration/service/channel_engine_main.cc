// An engine that dies with its step channel open, for decode_channel_test: it attaches over UCX
// (loopback tcp), opens a decode session of every head of NAMESPACE_ID with two slots, runs one
// fp32 step of both slots through the shared-memory step channel, reports on stdout and then
// waits to be killed.
//
//   channel_engine TARGET NAMESPACE_ID
//
// Prints "stepped <decode session id> <data-plane session id>" then "ready", then sleeps.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "leapcache/data_plane.h"
#include "leapcache/decode_session.h"

int main(int argc, char** argv) {
  using namespace leapcache;  // NOLINT
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TARGET NAMESPACE_ID\n", argv[0]);
    return 2;
  }
  client::ClientOptions options;
  options.target = argv[1];
  client::AttachOptions attach;
  attach.transports = {client::Transport::kUcx};
  attach.ucx_transports = "tcp";
  attach.session_ttl = absl::Seconds(2);
  client::EngineIdentity identity;
  identity.name = "channel-engine";
  auto engine = client::AttachedEngine::Attach(options, identity, attach);
  if (!engine.ok()) {
    std::fprintf(stderr, "attach: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  client::DecodeSessionOptions open;
  open.namespace_id = static_cast<uint32_t>(std::atoi(argv[2]));
  open.slots = 2;
  open.step_channel = client::StepChannel::kSharedMemory;
  auto session = client::DecodeSession::Open(options, open);
  if (!session.ok()) {
    std::fprintf(stderr, "open: %s\n", session.status().ToString().c_str());
    return 1;
  }
  const std::vector<int32_t> slots = {0, 1};
  const auto& info = (*session)->info();
  const uint64_t in = client::PackedStepInputBytes(info, slots.size(), client::DType::kFp32);
  std::vector<float> buffer(
      (in + client::StepOutputBytes(info, slots.size(), client::DType::kFp32)) / sizeof(float));
  for (size_t i = 0; i < in / sizeof(float); ++i) buffer[i] = 0.01f * static_cast<float>(i % 97);
  auto id = (*engine)->RegisterBuffer(buffer.data(), buffer.size() * sizeof(float),
                                      client::MemoryKind::kHost);
  if (!id.ok()) return 1;
  for (int s : slots) {
    if (!(*session)->Reset(s).ok()) return 1;
  }
  client::DecodeBufferStep step;
  step.slot = slots;
  step.buffer = *id;
  step.output_offset = in;
  if (absl::Status st = (*session)->StepInBuffer(**engine, step); !st.ok()) {
    std::fprintf(stderr, "step: %s\n", st.ToString().c_str());
    return 1;
  }
  if (!(*session)->stepping_through_channel()) return 1;
  std::printf("stepped %llu %llu\nready\n", static_cast<unsigned long long>(info.id),
              static_cast<unsigned long long>((*engine)->session_id()));
  std::fflush(stdout);
  while (true) pause();
}
