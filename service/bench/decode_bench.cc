// leapcache-decode-bench: attached-decode step latency (an engine streaming one linear layer's
// token per call over gRPC to the service) against the same backend called in process (no RPC),
// at B = 1, 8, 64, 256 requests, H heads of 128 x 128, GDN and KDA, 8-bit window format, bf16
// inputs and outputs (what engines exchange). On the CUDA backend the in-process side runs
// twice: on host vectors (copied up and down each step) and on vectors already in device memory
// (the honest baseline: what an engine that embeds the kernels runs), and the attached ratio is
// against the latter. Every path runs the same inputs from the zero state; their last outputs
// are compared bit for bit (exit status 3 if they differ). Numbers printed (and written as JSON
// and Markdown), not asserted.
//
//   leapcache-decode-bench [--backend=cuda|cpu] [--steps=N] [--heads=H] [--batches=1,8,64,256]
//                          [--transport-only] [--server-device=D | --target=HOST:PORT]
//                          [--local-device=D] [--data-plane=ucx|cuda_ipc|nccl]
//                          [--step-channel=auto|stream|shm] [--out=DIR]
//
// With --data-plane the attached steps keep their vectors out of the messages: the engine
// attaches a DataPlane session over that transport, registers one buffer holding the packed
// inputs and o (host memory for ucx, device memory of --local-device for cuda_ipc and nccl), and
// each step names it (DecodeSession::StepInBuffer). cuda_ipc and nccl need the service in another
// process (--target); nccl needs it on another GPU. --step-channel picks how those steps reach
// the service (client/include/leapcache/decode_session.h, StepChannel): the shared-memory step
// channel where the service is on this host (auto, the default; shm: it or fail) or the gRPC
// Step stream (stream); the header line says which one ran.
// By default the service runs inside this process (loopback gRPC, decode pools on
// --server-device). With --target the attached path talks to a separate leapcache-server
// process instead (the engine and the service in different processes, e.g. on different GPUs);
// the in-process reference still runs here on --local-device. That server decides its own decode
// device and backend, so it must be started with the backend given here as --backend, or the
// two paths run different arithmetic and their outputs may legitimately differ; the bench
// checks the backend each session reports and exits 1 if it is not --backend. It must also
// accept one step's message (about 10 MiB for KDA at B = 256, H = 32) and hold one session's
// live states in its decode budget (the bench opens one session at a time), e.g.:
//
//   leapcache-server --listen=127.0.0.1:0 --port-file=PORT --metrics-listen= --gpu-device=0
//       --compute-backend=cuda --decode-memory-budget=16GiB --max-message-bytes=64MiB &
//   leapcache-decode-bench --backend=cuda --local-device=1 --target=127.0.0.1:$(cat PORT)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/mutex_deadlock_detection.h"
#include "gpu/format/half.h"
#include "leapcache/client.h"
#include "leapcache/data_plane.h"
#include "leapcache/decode_session.h"
#include "service/compute/compute.h"
#include "service/server/large_allocations.h"
#include "service/server/server.h"
#ifdef LEAPCACHE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace leapcache::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kDim = 128;

struct Flags {
  std::string backend = "cuda";
  int steps = 64;
  int heads = 32;
  std::vector<int> batches = {1, 8, 64, 256};
  std::string out;
  // Every request of the batch is padding: the backend does no work, so the attached numbers
  // are the RPC path alone (messages of the same size).
  bool transport_only = false;
  // CUDA devices of the server's decode pools and of the in-process backend: on a two-GPU
  // machine 0 and 1 put the service and the engine's reference on different GPUs.
  int server_device = 0;
  bool server_device_given = false;
  int local_device = 0;
  // host:port of an external leapcache-server; empty: start one in this process.
  std::string target;
  // The attached path's vectors in a registered data-plane buffer moved by this transport
  // (ucx: host memory over tcp; cuda_ipc, nccl: device memory of --local-device) instead of in
  // the step messages; empty: in the messages.
  std::string data_plane;
  client::StepChannel step_channel = client::StepChannel::kAuto;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq),
                      value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (name == "--backend" && (value == "cuda" || value == "cpu")) {
      f->backend = value;
    } else if (name == "--steps" && absl::SimpleAtoi(value, &f->steps) && f->steps > 0) {
    } else if (name == "--heads" && absl::SimpleAtoi(value, &f->heads) && f->heads > 0) {
    } else if (name == "--server-device" && absl::SimpleAtoi(value, &f->server_device) &&
               f->server_device >= 0) {
      f->server_device_given = true;
    } else if (name == "--local-device" && absl::SimpleAtoi(value, &f->local_device) &&
               f->local_device >= 0) {
    } else if (name == "--transport-only" && value.empty()) {
      f->transport_only = true;
    } else if (name == "--out" && !value.empty()) {
      f->out = value;
    } else if (name == "--target" && !value.empty()) {
      f->target = value;
    } else if (name == "--data-plane" &&
               (value == "ucx" || value == "cuda_ipc" || value == "nccl")) {
      f->data_plane = value;
    } else if (name == "--step-channel" &&
               (value == "auto" || value == "stream" || value == "shm")) {
      f->step_channel = value == "auto"     ? client::StepChannel::kAuto
                        : value == "stream" ? client::StepChannel::kStream
                                            : client::StepChannel::kSharedMemory;
    } else if (name == "--batches") {
      f->batches.clear();
      for (absl::string_view b : absl::StrSplit(value, ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(b, &n) || n <= 0) return false;
        f->batches.push_back(n);
      }
    } else {
      std::fprintf(stderr, "unknown or bad flag %s\n", a.c_str());
      return false;
    }
  }
  if (!f->target.empty() && f->server_device_given) {
    // The external server's gpu_device decides; accepting the flag would mislabel the run.
    std::fprintf(stderr,
                 "--server-device places the in-process server's decode pools; with --target "
                 "start the server with --gpu-device instead\n");
    return false;
  }
  return true;
}

struct Inputs {
  std::vector<uint16_t> q16, k16, v16;
  std::vector<float> g, beta;
  std::vector<int32_t> slot;
};

Inputs MakeInputs(StateKind kind, int batch, int heads, std::mt19937& rng) {
  Inputs in;
  const size_t bh = static_cast<size_t>(batch) * heads;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::vector<uint16_t>* w : {&in.q16, &in.k16, &in.v16}) {
    w->resize(bh * kDim);
    for (uint16_t& x : *w) x = FloatToBf16(normal(rng));
  }
  std::uniform_real_distribution<float> gate(-0.3f, -0.01f), b(0.05f, 0.95f);
  in.g.resize(kind == StateKind::kGdn ? bh : bh * kDim);
  for (float& x : in.g) x = gate(rng);
  in.beta.resize(bh);
  for (float& x : in.beta) x = b(rng);
  for (int i = 0; i < batch; ++i) in.slot.push_back(i);
  return in;
}

std::span<const uint8_t> Bytes(const std::vector<uint16_t>& w) {
  return {reinterpret_cast<const uint8_t*>(w.data()), w.size() * 2};
}

// The engine's registered step buffer for --data-plane: packed inputs, then o. Host memory for
// ucx, device memory of the engine's GPU for cuda_ipc and nccl (where an engine's vectors are).
class StepBuffer {
 public:
  StepBuffer(bool device, size_t bytes) : device_(device), host_(device ? 0 : bytes) {
#ifdef LEAPCACHE_WITH_CUDA
    if (device && cudaMalloc(&device_ptr_, bytes) != cudaSuccess) device_ptr_ = nullptr;
#endif
  }
  ~StepBuffer() {
#ifdef LEAPCACHE_WITH_CUDA
    if (device_ptr_ != nullptr) cudaFree(device_ptr_);
#endif
  }
  void* data() { return device_ ? device_ptr_ : host_.data(); }
  void Write(size_t offset, const void* src, size_t n) {
    if (!device_) {
      std::memcpy(host_.data() + offset, src, n);
      return;
    }
#ifdef LEAPCACHE_WITH_CUDA
    cudaMemcpy(static_cast<uint8_t*>(device_ptr_) + offset, src, n, cudaMemcpyHostToDevice);
#endif
  }
  void Read(size_t offset, void* dst, size_t n) const {
    if (!device_) {
      std::memcpy(dst, host_.data() + offset, n);
      return;
    }
#ifdef LEAPCACHE_WITH_CUDA
    cudaMemcpy(dst, static_cast<const uint8_t*>(device_ptr_) + offset, n, cudaMemcpyDeviceToHost);
#endif
  }

 private:
  bool device_;
  std::vector<uint8_t> host_;
  void* device_ptr_ = nullptr;
};

struct Timing {
  double mean_us = 0, p50_us = 0, p99_us = 0;
};

template <typename F>
Timing Time(int steps, F&& step) {
  for (int i = 0; i < 16; ++i) step();  // warm up: one window, one refit
  std::vector<double> us;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    step();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  Timing t;
  for (double u : us) t.mean_us += u / us.size();
  std::sort(us.begin(), us.end());
  t.p50_us = us[us.size() / 2];
  t.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return t;
}

// The in-process live states: the compute seam's backend of `backend` ("cuda" or "cpu") on
// `device`, exactly what the server's compute_backend makes.
absl::StatusOr<std::unique_ptr<compute::LiveStates>> InProcess(const std::string& backend,
                                                                 const compute::DecodeShape& s,
                                                                 int device) {
  static std::unique_ptr<compute::Compute> made;  // one per process, as in the server
  if (made == nullptr) {
    absl::StatusOr<std::unique_ptr<compute::Compute>> c = compute::MakeCompute(
        backend == "cuda" ? compute::Choice::kCuda : compute::Choice::kCpu, device);
    if (!c.ok()) return c.status();
    made = *std::move(c);
  }
  return made->OpenLiveStates(s);
}

// Why an external server (--target) refused a session or a step, when it ran out of something
// the in-process server is given (see the header for a full command line).
std::string TargetHint(const Flags& flags, const absl::Status& status) {
  if (flags.target.empty() || !absl::IsResourceExhausted(status)) return "";
  return " (the server at --target needs --max-message-bytes=64MiB and a --decode-memory-budget "
         "holding one session's states, e.g. 16GiB)";
}

int Run(const Flags& flags) {
  std::unique_ptr<server::Server> srv;  // null with --target
  client::ClientOptions options;
  // One KDA step at B = 256, H = 32 is about 10 MiB (bf16 q, k, v and fp32 g); the client's
  // 8 MiB default would refuse it.
  options.max_message_bytes = 64 << 20;
  if (flags.target.empty()) {
    server::ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "";
    config.memory_budget = 256 * server::kMiB;
    config.max_message_bytes = 64 * server::kMiB;
    config.compute_backend = flags.backend;
    config.gpu_device = flags.server_device;
    config.decode_memory_budget = 16 * server::kGiB;
    absl::StatusOr<std::unique_ptr<server::Server>> started = server::Server::Start(config);
    if (!started.ok()) {
      std::fprintf(stderr, "server: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    srv = *std::move(started);
    options.target = srv->grpc_address();
  } else {
    options.target = flags.target;
  }
  absl::StatusOr<std::unique_ptr<client::Client>> client = client::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect to %s: %s\n", options.target.c_str(),
                 std::string(client.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<client::AttachedEngine> engine;
  if (!flags.data_plane.empty()) {
    client::EngineIdentity identity;
    identity.name = "decode-bench";
    client::AttachOptions attach;
    if (flags.data_plane == "ucx") {
      attach.transports = {client::Transport::kUcx};
      attach.ucx_transports = "tcp";
    } else {
#ifdef LEAPCACHE_WITH_CUDA
      cudaSetDevice(flags.local_device);
#endif
      identity.gpu_index = flags.local_device;
      attach.transports = {flags.data_plane == "nccl" ? client::Transport::kNccl
                                                      : client::Transport::kCudaIpc};
    }
    auto attached = client::AttachedEngine::Attach(options, identity, attach);
    if (!attached.ok()) {
      std::fprintf(stderr, "attach over %s: %s\n", flags.data_plane.c_str(),
                   std::string(attached.status().message()).c_str());
      return 1;
    }
    engine = *std::move(attached);
  }
  const std::string server_where = flags.target.empty()
                                       ? absl::StrCat("server device ", flags.server_device)
                                       : absl::StrCat("server ", flags.target);

  std::string md = absl::StrCat(
      "| kind | B | in-process, host vectors us/step | in-process, device vectors us/step | "
      "attached us/step (p50 / p99) | attached / in-process (device vectors) |\n",
      "|---|---|---|---|---|---|\n");
  std::string json = "[\n";
  std::printf(
      "attached decode, backend %s, H=%d, d=%d, 8-bit window, bf16 in/out, %d steps, "
      "%s, in-process device %d%s, vectors %s\n",
      flags.backend.c_str(), flags.heads, kDim, flags.steps, server_where.c_str(),
      flags.local_device, flags.transport_only ? ", transport only" : "",
      flags.data_plane.empty() ? "in the step messages"
                               : absl::StrCat("over the data plane (", flags.data_plane, ")")
                                     .c_str());
  std::printf("%-4s %5s %14s %14s %14s %14s %14s %8s\n", "kind", "B", "inproc_mean",
              "inproc_dev_mean", "att_mean", "att_p50", "att_p99", "ratio");
  bool mismatches = false;
  std::mt19937 rng(1);
  bool first = true;
  for (StateKind kind : {StateKind::kGdn, StateKind::kKda}) {
    client::NamespaceSpec spec;
    spec.tenant = "bench";
    spec.model = {1, flags.heads, kDim, kDim,
                  kind == StateKind::kGdn ? client::StateKind::kGdn : client::StateKind::kKda};
    spec.format = client::StorageFormat::Leap(8);
    absl::StatusOr<client::NamespaceInfo> ns = (*client)->RegisterNamespace(spec);
    if (!ns.ok()) {
      std::fprintf(stderr, "register namespace: %s\n", std::string(ns.status().message()).c_str());
      return 1;
    }
    for (int batch : flags.batches) {
      Inputs in = MakeInputs(kind, batch, flags.heads, rng);
      if (flags.transport_only) std::fill(in.slot.begin(), in.slot.end(), -1);
      compute::DecodeShape shape;
      shape.spec = BlobSpec::Leap(kind, 8, kDim, kDim);
      shape.slots = batch;
      shape.layers = 1;
      shape.heads = flags.heads;
      shape.l2norm_qk = true;
      shape.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
      std::vector<uint8_t> o(static_cast<size_t>(batch) * flags.heads * kDim * 2);  // bf16
      // Opened before the in-process run so a server that cannot serve it fails the bench at once.
      client::DecodeSessionOptions open{ns->id, {}, batch, true, 0.0f};
      open.step_channel = flags.step_channel;
      auto session = client::DecodeSession::Open(options, open);
      if (!session.ok()) {
        std::fprintf(stderr, "open: %s%s\n", std::string(session.status().message()).c_str(),
                     TargetHint(flags, session.status()).c_str());
        return 1;
      }
      // Bit-identical outputs are only expected from the same backend; an external server picks
      // its own (compute_backend), so a different one is a setup error, not a mismatch.
      if ((*session)->info().backend != flags.backend) {
        std::fprintf(stderr,
                     "the server decodes on its %s backend, the in-process reference on %s: "
                     "start the server with --compute-backend=%s\n",
                     (*session)->info().backend.c_str(), flags.backend.c_str(),
                     flags.backend.c_str());
        return 1;
      }
      // Fresh in-process live states from the zero state, for each in-process run.
      auto open_local = [&]() -> std::unique_ptr<compute::LiveStates> {
        absl::StatusOr<std::unique_ptr<compute::LiveStates>> b =
            InProcess(flags.backend, shape, flags.local_device);
        if (b.ok()) return *std::move(b);
        std::fprintf(stderr, "in-process backend: %s\n",
                     std::string(b.status().message()).c_str());
        return nullptr;
      };
      Timing local;
      {
        std::unique_ptr<compute::LiveStates> b = open_local();
        if (b == nullptr) return 1;
        const compute::LayerStep step{
            0, in.slot, DType::kBf16, Bytes(in.q16), Bytes(in.k16), Bytes(in.v16), in.g, in.beta};
        const compute::LayerOutput out{DType::kBf16, o};
        local = Time(flags.steps, [&] { (void)b->Step(step, out); });
      }
      // The honest baseline: the same kernels on vectors already in device memory, as an engine
      // that embeds them runs (no host copy of inputs or output; the step still waits for its
      // kernel, as every call of the backend does). Same inputs and steps from the zero state,
      // so its output must equal the host-vector run's bit for bit.
      Timing local_device;
      bool device_identical = true;
#ifdef LEAPCACHE_WITH_CUDA
      if (flags.backend == "cuda") {
        std::unique_ptr<compute::LiveStates> b = open_local();
        if (b == nullptr) return 1;
        const size_t parts[5] = {in.q16.size() * 2, in.k16.size() * 2, in.v16.size() * 2,
                                 in.g.size() * 4, in.beta.size() * 4};
        size_t total = o.size();
        for (size_t p : parts) total += (p + 255) / 256 * 256;
        StepBuffer device(true, total);
        const void* src[5] = {in.q16.data(), in.k16.data(), in.v16.data(), in.g.data(),
                              in.beta.data()};
        const uint8_t* base = static_cast<const uint8_t*>(device.data());
        size_t at = 0, offset[5];
        for (int i = 0; i < 5; ++i) {
          offset[i] = at;
          device.Write(at, src[i], parts[i]);
          at += (parts[i] + 255) / 256 * 256;
        }
        compute::LayerStep step{0,
                                in.slot,
                                DType::kBf16,
                                {base + offset[0], parts[0]},
                                {base + offset[1], parts[1]},
                                {base + offset[2], parts[2]},
                                {reinterpret_cast<const float*>(base + offset[3]), in.g.size()},
                                {reinterpret_cast<const float*>(base + offset[4]), in.beta.size()}};
        step.memory = compute::Memory::kDevice;
        // The kernels alone: an engine that embeds them does not check its own vectors finite
        // (the attached path does, on the device, in the same stream pass).
        step.known_finite = true;
        const compute::LayerOutput out{DType::kBf16,
                                       {static_cast<uint8_t*>(device.data()) + at, o.size()},
                                       compute::Memory::kDevice};
        local_device = Time(flags.steps, [&] { (void)b->Step(step, out); });
        std::vector<uint8_t> device_o(o.size());
        device.Read(at, device_o.data(), device_o.size());
        device_identical = device_o == o;
      }
#endif
      // Both paths run the same inputs the same number of times from the zero state, so their
      // last outputs must be identical bit for bit.
      const std::vector<uint8_t> local_o = o;
      const client::DecodeStep step{
          0,    in.slot, client::DType::kBf16, Bytes(in.q16), Bytes(in.k16), Bytes(in.v16),
          in.g, in.beta, client::DType::kBf16};
      std::span<uint8_t> out(o);
      absl::Status failed;
      Timing remote;
      if (engine == nullptr) {
        remote = Time(flags.steps, [&] {
          absl::Status st = (*session)->Step(step, out);
          if (!st.ok()) failed = st;
        });
      } else {
        // The engine's vectors already sit in its registered buffer (packed once: every step
        // takes the same inputs); the service reads them and writes o there.
        const client::DecodeSessionInfo& info = (*session)->info();
        const uint64_t in_bytes = client::PackedStepInputBytes(info, batch, client::DType::kBf16);
        StepBuffer buffer(flags.data_plane != "ucx", in_bytes + o.size());
        size_t at = 0;
        for (const std::span<const uint8_t> part :
             {Bytes(in.q16), Bytes(in.k16), Bytes(in.v16),
              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(in.g.data()),
                                       in.g.size() * 4),
              std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(in.beta.data()),
                                       in.beta.size() * 4)}) {
          buffer.Write(at, part.data(), part.size());
          at += part.size();
        }
        absl::StatusOr<client::BufferId> id = engine->RegisterBuffer(
            buffer.data(), in_bytes + o.size(),
            flags.data_plane == "ucx" ? client::MemoryKind::kHost : client::MemoryKind::kCuda);
        if (!id.ok()) {
          std::fprintf(stderr, "register: %s\n", std::string(id.status().message()).c_str());
          return 1;
        }
        client::DecodeBufferStep buffer_step;
        buffer_step.layer = 0;
        buffer_step.slot = in.slot;
        buffer_step.dtype = client::DType::kBf16;
        buffer_step.out_dtype = client::DType::kBf16;
        buffer_step.buffer = *id;
        buffer_step.input_offset = 0;
        buffer_step.output_offset = in_bytes;
        remote = Time(flags.steps, [&] {
          absl::Status st = (*session)->StepInBuffer(*engine, buffer_step);
          if (!st.ok()) failed = st;
        });
        buffer.Read(in_bytes, o.data(), o.size());
        (void)engine->ReleaseBuffer(*id);
        if (first) {
          std::printf("data-plane steps through the %s\n", (*session)->stepping_through_channel()
                                                               ? "shared-memory step channel"
                                                               : "gRPC Step stream");
        }
      }
      if (!failed.ok()) {
        std::fprintf(stderr, "step: %s%s\n", std::string(failed.message()).c_str(),
                     TargetHint(flags, failed).c_str());
        return 1;
      }
      const bool identical = o == local_o && device_identical;
      const char* k = kind == StateKind::kGdn ? "gdn" : "kda";
      // Against the device-vector baseline where there is one (the CUDA backend).
      const double baseline = local_device.mean_us > 0 ? local_device.mean_us : local.mean_us;
      const double ratio = remote.mean_us / baseline;
      std::printf("%-4s %5d %14.1f %14.1f %14.1f %14.1f %14.1f %8.2f %s\n", k, batch, local.mean_us,
                  local_device.mean_us, remote.mean_us, remote.p50_us, remote.p99_us, ratio,
                  identical ? "outputs identical" : "OUTPUTS DIFFER");
      if (!identical) mismatches = true;
      absl::StrAppend(&md, "| ", k, " | ", batch, " | ", absl::StrFormat("%.1f", local.mean_us),
                      " | ", absl::StrFormat("%.1f", local_device.mean_us), " | ",
                      absl::StrFormat("%.1f / %.1f", remote.p50_us, remote.p99_us), " | ",
                      absl::StrFormat("%.2fx", ratio), " |\n");
      absl::StrAppend(&json, first ? "" : ",\n",
                      absl::StrFormat("  {\"kind\": \"%s\", \"batch\": %d, \"heads\": %d, "
                                      "\"backend\": \"%s\", \"inprocess_mean_us\": %.2f, "
                                      "\"inprocess_device_vectors_mean_us\": %.2f, "
                                      "\"attached_mean_us\": %.2f, \"attached_p50_us\": %.2f, "
                                      "\"attached_p99_us\": %.2f, \"outputs_identical\": %s}",
                                      k, batch, flags.heads, flags.backend, local.mean_us,
                                      local_device.mean_us, remote.mean_us, remote.p50_us,
                                      remote.p99_us, identical ? "true" : "false"));
      first = false;
    }
  }
  json += "\n]\n";
  if (!flags.out.empty()) {
    std::ofstream(flags.out + "/decode_bench.json") << json;
    std::ofstream(flags.out + "/decode_bench.md") << md;
  }
  if (srv != nullptr) srv->Shutdown(absl::Seconds(1));
  return mismatches ? 3 : 0;
}

}  // namespace
}  // namespace leapcache::bench

int main(int argc, char** argv) {
  // As leapcache-server does: the in-process server's messages should cost what they do there.
  leapcache::server::KeepLargeAllocationsMapped();
  leapcache::base::StopMutexDeadlockDetection();
  leapcache::bench::Flags flags;
  if (!leapcache::bench::ParseFlags(argc, argv, &flags)) return 2;
  return leapcache::bench::Run(flags);
}
