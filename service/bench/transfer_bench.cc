// leapcache-transfer-bench: checkpoint get/put bandwidth over each data-plane transport, against
// the copy bandwidth of the same bytes measured in the same run (numbers printed, not asserted),
// and where a get's time goes.
//
//   leapcache-transfer-bench [--reps=N] [--ucx-tls=TLS] [--json=PATH] [--target=HOST:PORT]
//                            [--engine-gpu=D] [--metrics-port=P] [--transports=T,...]
//                            [--transfer-channel=auto|rpc|shm]
//
// One 32-layer x 32-head x 128 x 128 checkpoint, as compact 8-bit window-format blobs (20 MB),
// its first layer alone (0.6 MB, the unit of an engine that pages states per layer) and as
// dense bf16 states (32 MiB; the service encodes puts and decodes gets with its codec), moved by
// an engine in this process with AttachedEngine: inline gRPC, UCX into host memory, and, where a
// GPU is present, UCX into device memory (staged through pinned host memory, or direct if the
// UCX found reports CUDA support), over CUDA IPC (the service maps the engine's device buffers;
// needs the server in another process: --target) and over NCCL (send/recv between the server's
// GPU 0 and the engine's GPU; needs --engine-gpu other than 0).
// Each bandwidth is the median of N runs; "copy" is memcpy between host buffers for host rows
// and, for device rows, cudaMemcpy device-to-device on one GPU or cudaMemcpyPeer with peer
// access enabled across two, of the same bytes; device rows also give cudaMemcpy from pinned
// host memory of the same bytes ("pinned H2D", the bound of a get from a host tier into the
// engine's GPU memory). A second table gives each get's call latency
// (p50, p99, mean) and, with --metrics-port (the --target server's admin port on 127.0.0.1),
// the server's mean time per phase (leapcache_data_plane_phase_seconds) beside its RPC time; the
// rest of a call is the RPC's trip and the engine's side, of which the engine's check of the
// landed bytes is timed alone ("by the service" where the service checked them where they
// landed, TransferredCheckpoint::checked_by_service). Each get follows the put of its checkpoint;
// "again" repeats it at once (the server's phases average both). --transports=cuda_ipc,... keeps
// only those rows.
// --transfer-channel picks how the engine reaches the service (AttachOptions::transfer_channel):
// auto (the shared-memory transfer channel where the server offers one on this host; such rows
// say "+ channel", and their "server" time is the request's time on the service instead of the
// RPC's), rpc (always the Transfer RPCs), shm (the channel or nothing). By default the server
// runs in this process (CPU backend, loopback).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/loopback_http.h"
#include "base/mutex_deadlock_detection.h"
#include "gpu/format/format.h"
#include "gpu/reference/codec.h"
#include "leapcache/client.h"
#include "leapcache/data_plane.h"
#include "service/server/large_allocations.h"
#include "service/server/server.h"

#ifdef LEAPCACHE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "transport/device/device_crc32c.h"
#endif

namespace leapcache::bench {
namespace {

using Clock = std::chrono::steady_clock;
using client::MemoryKind;
using client::Transport;

constexpr int kLayers = 32, kHeads = 32, kDim = 128;

struct Flags {
  int reps = 5;
  std::string ucx_tls;
  std::string json;
  std::string target;
  // CUDA device of the engine's buffers; the server's context is on device 0. With 1 on a
  // two-GPU machine the cuda rows cross GPUs and "copy" is cudaMemcpyPeer GPU 0 -> GPU 1.
  int engine_gpu = 0;
  // The --target server's admin endpoint (127.0.0.1:PORT); 0: none, no per-phase breakdown.
  int metrics_port = 0;
  // Only these transports (inline, ucx, cuda_ipc, nccl); empty: every one the run allows.
  std::vector<std::string> transports;
  client::TransferChannel channel = client::TransferChannel::kAuto;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq),
                      value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (name == "--reps" && absl::SimpleAtoi(value, &f->reps) && f->reps > 0) continue;
    if (name == "--ucx-tls") {
      f->ucx_tls = value;
      continue;
    }
    if (name == "--json" && !value.empty()) {
      f->json = value;
      continue;
    }
    if (name == "--target" && !value.empty()) {
      f->target = value;
      continue;
    }
    if (name == "--engine-gpu" && absl::SimpleAtoi(value, &f->engine_gpu) && f->engine_gpu >= 0) {
      continue;
    }
    if (name == "--transports" && !value.empty()) {
      f->transports = absl::StrSplit(value, ',');
      continue;
    }
    if (name == "--transfer-channel" && (value == "auto" || value == "rpc" || value == "shm")) {
      f->channel = value == "auto"  ? client::TransferChannel::kAuto
                   : value == "rpc" ? client::TransferChannel::kRpc
                                    : client::TransferChannel::kSharedMemory;
      continue;
    }
    if (name == "--metrics-port" && absl::SimpleAtoi(value, &f->metrics_port) &&
        f->metrics_port > 0) {
      continue;
    }
    std::fprintf(stderr,
                 "usage: %s [--reps=N] [--ucx-tls=TLS] [--json=PATH] [--target=H:P] "
                 "[--engine-gpu=D] [--metrics-port=P] [--transports=T,...] "
                 "[--transfer-channel=auto|rpc|shm]\n",
                 argv[0]);
    return false;
  }
  return true;
}

// The name --transports takes.
std::string TransportLabel(Transport t) {
  return t == Transport::kInline ? "inline"
         : t == Transport::kUcx  ? "ucx"
         : t == Transport::kNccl ? "nccl"
                                 : "cuda_ipc";
}

[[noreturn]] void Die(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "leapcache-transfer-bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
// The q-quantile (nearest rank) of v.
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size()) + 0.999999);
  return v[std::min(v.size(), std::max<size_t>(i, 1)) - 1];
}
double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// The server's time per transfer, from its admin endpoint: the sum and count of each phase of
// leapcache_data_plane_phase_seconds ("get/move", ...), of the transfer RPCs'
// leapcache_rpc_duration_seconds ("get/rpc", "put/rpc") and of the channel transfers'
// leapcache_data_plane_channel_transfer_seconds ("get/channel", "put/channel"), as of one scrape.
using Scrape = std::map<std::string, std::pair<double, double>>;

// The value of label `name` in a series line's label set, or "".
std::string Label(absl::string_view line, absl::string_view name) {
  const std::string key = absl::StrCat(name, "=\"");
  const size_t at = line.find(key);
  if (at == absl::string_view::npos) return "";
  const size_t begin = at + key.size(), end = line.find('"', begin);
  return std::string(line.substr(begin, end - begin));
}

// The server's /metrics body: in this process, or from --metrics-port; "" with neither.
using MetricsSource = std::function<std::string()>;

Scrape ScrapeTransfers(const MetricsSource& metrics) {
  Scrape out;
  if (!metrics) return out;
  const std::string body = metrics();
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    std::string key;
    if (absl::StartsWith(line, "leapcache_data_plane_phase_seconds_")) {
      key = absl::StrCat(Label(line, "op"), "/", Label(line, "phase"));
    } else if (absl::StartsWith(line, "leapcache_rpc_duration_seconds_")) {
      const std::string method = Label(line, "method");
      if (method == "DataPlane/TransferGet") key = "get/rpc";
      if (method == "DataPlane/TransferPut") key = "put/rpc";
    } else if (absl::StartsWith(line, "leapcache_data_plane_channel_transfer_seconds_")) {
      key = absl::StrCat(Label(line, "op"), "/channel");
    }
    if (key.empty()) continue;
    const bool sum = absl::StrContains(line, "_sum{"), count = absl::StrContains(line, "_count{");
    double v = 0;
    if ((!sum && !count) || !absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) continue;
    (sum ? out[key].first : out[key].second) = v;
  }
  return out;
}

// Mean microseconds per transfer of each series between two scrapes.
std::map<std::string, double> MeanMicros(const Scrape& before, const Scrape& after) {
  std::map<std::string, double> out;
  for (const auto& [key, v] : after) {
    auto it = before.find(key);
    const double sum = v.first - (it == before.end() ? 0 : it->second.first);
    const double n = v.second - (it == before.end() ? 0 : it->second.second);
    if (n > 0) out[key] = 1e6 * sum / n;
  }
  return out;
}

// GB/s of `copy` moving `bytes`: one warm-up run, then the median of `reps` timed runs.
double CopyGbps(size_t bytes, int reps, const std::function<void()>& copy) {
  copy();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    copy();
    t.push_back(Seconds(Clock::now() - t0));
  }
  return bytes / Median(t) / 1e9;
}

// GB/s of memcpy of `bytes` between two host buffers already touched.
double MemcpyGbps(size_t bytes, int reps) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  return CopyGbps(bytes, reps, [&] { std::memcpy(dst.data(), src.data(), bytes); });
}

#ifdef LEAPCACHE_WITH_CUDA
bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
// GB/s of a device copy of `bytes` from device `from` to device `to` (bytes copied / time, as
// memcpy's): cudaMemcpy device-to-device on one GPU, cudaMemcpyPeer across two.
double DeviceCopyGbps(size_t bytes, int reps, int from, int to) {
  int current = 0;
  cudaGetDevice(&current);
  void *a = nullptr, *b = nullptr;
  cudaSetDevice(from);
  const bool ok_a = cudaMalloc(&a, bytes) == cudaSuccess;
  cudaSetDevice(to);
  const bool ok_b = cudaMalloc(&b, bytes) == cudaSuccess;
  if (from != to) {
    // Without peer access the driver stages the copy through host memory: enable it both ways
    // so the copy runs over the GPUs' own link (NVLink), the bound a transport can reach.
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, to, from) == cudaSuccess && can) {
      cudaSetDevice(to);
      cudaDeviceEnablePeerAccess(from, 0);
      cudaSetDevice(from);
      cudaDeviceEnablePeerAccess(to, 0);
    }
    cudaGetLastError();  // "already enabled" is fine
  }
  double gbps = 0;
  if (ok_a && ok_b) {
    auto copy = [&] {
      if (from == to) {
        cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
      } else {
        cudaMemcpyPeer(b, to, a, from, bytes);
      }
      cudaDeviceSynchronize();
    };
    gbps = CopyGbps(bytes, reps, copy);
  }
  cudaFree(a);
  cudaFree(b);
  cudaSetDevice(current);
  return gbps;
}
// GB/s of cudaMemcpy of `bytes` from pinned host memory into device `to`: the bound of a get
// from a host tier into the engine's GPU memory.
double PinnedHostToDeviceGbps(size_t bytes, int reps, int to) {
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(to);
  void *host = nullptr, *device = nullptr;
  double gbps = 0;
  if (cudaMallocHost(&host, bytes) == cudaSuccess && cudaMalloc(&device, bytes) == cudaSuccess) {
    std::memset(host, 0x5a, bytes);
    auto copy = [&] { cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice); };
    gbps = CopyGbps(bytes, reps, copy);
  }
  cudaFree(device);
  cudaFreeHost(host);
  cudaGetLastError();
  cudaSetDevice(current);
  return gbps;
}
#endif

uint16_t ToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even (states are finite)
  return static_cast<uint16_t>(u >> 16);
}

struct Payloads {
  std::vector<uint8_t> compact;     // 8-bit window-format blobs, (layer, head) order
  std::vector<uint8_t> one_layer;   // the first layer's blobs: a one-layer checkpoint
  std::vector<uint8_t> dense_bf16;  // [layers][heads][dk][dv] bf16
};

Payloads MakePayloads() {
  const size_t states = kLayers * kHeads, elems = kDim * kDim;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> dense(states * elems);
  for (float& x : dense) x = normal(rng);
  Payloads p;
  const BlobSpec spec = BlobSpec::Leap(StateKind::kGdn, 8);
  for (size_t s = 0; s < states; ++s) {
    StatusOr<std::vector<uint8_t>> blob =
        reference::Encode(spec, dense.data() + s * elems, Orientation::kKV);
    if (!blob.ok()) std::abort();
    p.compact.insert(p.compact.end(), blob->begin(), blob->end());
  }
  p.one_layer.assign(p.compact.begin(), p.compact.begin() + p.compact.size() / kLayers);
  p.dense_bf16.resize(dense.size() * 2);
  for (size_t i = 0; i < dense.size(); ++i) {
    const uint16_t h = ToBf16(dense[i]);
    std::memcpy(p.dense_bf16.data() + 2 * i, &h, 2);
  }
  return p;
}

struct Row {
  std::string transport, memory, payload;
  size_t bytes = 0;
  double put_gbps = 0, get_gbps = 0, copy_gbps = 0;
  double h2d_gbps = 0;  // device rows: pinned host -> device of the same bytes; 0 for host rows
  // Get call latency on the engine (us): median, 99th percentile, mean; the engine's own check of
  // the landed bytes (DeviceCrc32c of a device buffer, median); the server's phases (mean us).
  double get_p50_us = 0, get_p99_us = 0, get_mean_us = 0, check_us = 0;
  double again_p50_us = 0;          // the same get repeated at once (warm)
  bool checked_by_service = false;  // the service checked the landed bytes (no engine check)
  double miss_p50_us = 0;  // a get of an absent key: the call's floor
  double put_p50_us = 0;   // put call latency on the engine, median
  std::map<std::string, double> server_us;
};

// A server time of the row (mean us), "-" where the scrapes had none.
std::string ServerMicros(const Row& r, const std::string& key) {
  auto it = r.server_us.find(key);
  return it == r.server_us.end() ? std::string("-") : absl::StrFormat("%.1f", it->second);
}
// The server's time of an op's call: its RPC's, or through a channel the request's.
std::string ServerCallMicros(const Row& r, const std::string& op) {
  return r.server_us.contains(op + "/channel") ? ServerMicros(r, op + "/channel")
                                               : ServerMicros(r, op + "/rpc");
}

// The engine's buffer: host memory, or device memory where the run has a GPU.
class EngineBuffer {
 public:
  EngineBuffer(MemoryKind kind, size_t bytes) : kind_(kind), bytes_(bytes) {
    if (kind == MemoryKind::kHost) {
      host_.resize(bytes);
      ptr_ = host_.data();
    } else {
#ifdef LEAPCACHE_WITH_CUDA
      if (cudaMalloc(&ptr_, bytes) != cudaSuccess) Die("cudaMalloc", absl::InternalError(""));
#endif
    }
  }
  ~EngineBuffer() {
#ifdef LEAPCACHE_WITH_CUDA
    if (kind_ == MemoryKind::kCuda) cudaFree(ptr_);
#endif
  }
  void* data() const { return ptr_; }
  void Fill(const std::vector<uint8_t>& src) {
    if (kind_ == MemoryKind::kHost) {
      std::memcpy(ptr_, src.data(), src.size());
      return;
    }
#ifdef LEAPCACHE_WITH_CUDA
    cudaMemcpy(ptr_, src.data(), src.size(), cudaMemcpyHostToDevice);
#endif
  }
  std::vector<uint8_t> Read(size_t n) const {
    std::vector<uint8_t> out(n);
    if (kind_ == MemoryKind::kHost) {
      std::memcpy(out.data(), ptr_, n);
    } else {
#ifdef LEAPCACHE_WITH_CUDA
      cudaMemcpy(out.data(), ptr_, n, cudaMemcpyDeviceToHost);
#endif
    }
    return out;
  }
  size_t size() const { return bytes_; }

 private:
  MemoryKind kind_;
  size_t bytes_;
  std::vector<uint8_t> host_;
  void* ptr_ = nullptr;
};

client::BlockHash Key(int i, uint8_t salt) {
  client::BlockHash h{};
  std::memcpy(h.data(), &i, sizeof(i));
  h[31] = salt;
  return h;
}

Row Measure(const Flags& f, const MetricsSource& metrics, const std::string& target, uint32_t ns,
            Transport transport, MemoryKind memory, const std::string& payload_name,
            const std::vector<uint8_t>& payload, std::optional<client::DenseEncoding> dense,
            uint8_t salt) {
  client::ClientOptions options;
  options.target = target;
  client::EngineIdentity identity;
  identity.name = "transfer-bench";
  identity.gpu_index = f.engine_gpu;
  client::AttachOptions attach;
  attach.transports = {transport};
  attach.ucx_transports = f.ucx_tls;
  attach.transfer_channel = f.channel;
  auto engine = client::AttachedEngine::Attach(options, identity, attach);
  if (!engine.ok()) Die("attach", engine.status());
  EngineBuffer src(memory, payload.size()), dst(memory, payload.size());
  src.Fill(payload);
  auto src_id = (*engine)->RegisterBuffer(src.data(), src.size(), memory);
  auto dst_id = (*engine)->RegisterBuffer(dst.data(), dst.size(), memory);
  if (!src_id.ok()) Die("register", src_id.status());
  if (!dst_id.ok()) Die("register", dst_id.status());
  std::vector<double> put_t, get_t, again_t;
  bool checked_by_service = false;
  const Scrape before = ScrapeTransfers(metrics);
  for (int r = 0; r < f.reps; ++r) {
    const client::BlockHash key = Key(r, salt);
    const client::PutTarget t{ns, key, {256, 1}, {}, absl::ZeroDuration()};
    Clock::time_point t0 = Clock::now();
    absl::Status st = (*engine)->PutFrom(t, dense, *src_id, 0, payload.size());
    put_t.push_back(Seconds(Clock::now() - t0));
    if (!st.ok()) Die(payload_name + " put", st);
    t0 = Clock::now();
    auto got = (*engine)->GetInto({ns, key, {}, dense}, *dst_id, 0);
    get_t.push_back(Seconds(Clock::now() - t0));
    if (!got.ok()) Die(payload_name + " get", got.status());
    if (got->total_bytes != payload.size()) Die(payload_name, absl::DataLossError("size"));
    checked_by_service = got->checked_by_service;
    // The same get again at once: the checkpoint and the device warm from the first.
    t0 = Clock::now();
    auto again = (*engine)->GetInto({ns, key, {}, dense}, *dst_id, 0);
    again_t.push_back(Seconds(Clock::now() - t0));
    if (!again.ok()) Die(payload_name + " get again", again.status());
    if (!dense.has_value() && r == 0 && dst.Read(payload.size()) != payload) {
      Die(payload_name, absl::DataLossError("bytes differ"));
    }
    st = (*engine)->client().Delete(ns, key);
    if (!st.ok()) Die("delete", st);
  }
  const Scrape after = ScrapeTransfers(metrics);
  // A get of a key that is not there: the call's floor (the RPC's trip, the session, the
  // lookup), outside the scrapes.
  std::vector<double> miss_t;
  for (int r = 0; r < f.reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    auto got =
        (*engine)->GetInto({ns, Key(r, static_cast<uint8_t>(salt + 128)), {}, dense}, *dst_id, 0);
    miss_t.push_back(Seconds(Clock::now() - t0));
    if (got.ok() || got.status().code() != absl::StatusCode::kNotFound) {
      Die(payload_name + " miss", got.ok() ? absl::InternalError("a hit") : got.status());
    }
  }
  Row row;
  row.server_us = MeanMicros(before, after);
  row.miss_p50_us = 1e6 * Median(miss_t);
  row.put_p50_us = 1e6 * Median(put_t);
  row.get_p50_us = 1e6 * Median(get_t);
  row.get_p99_us = 1e6 * Quantile(get_t, 0.99);
  row.get_mean_us = 1e6 * Mean(get_t);
  row.again_p50_us = 1e6 * Median(again_t);
  row.checked_by_service = checked_by_service;
#ifdef LEAPCACHE_WITH_CUDA
  if (memory == MemoryKind::kCuda) {
    // What the engine's check of the landed bytes costs by itself (the client runs it on every
    // get into device memory the service wrote directly).
    std::vector<double> t;
    for (int r = 0; r < std::max(f.reps, 5); ++r) {
      const Clock::time_point t0 = Clock::now();
      if (!transport::DeviceCrc32c(dst.data(), payload.size()).ok()) break;
      t.push_back(Seconds(Clock::now() - t0));
    }
    if (!t.empty()) row.check_us = 1e6 * Median(t);
  }
#endif
  row.transport = transport == Transport::kInline ? "inline gRPC" : TransportLabel(transport);
  if ((*engine)->transferring_through_channel()) row.transport += " + channel";
  if (transport != (*engine)->transport()) {
    Die("attach", absl::InternalError("the service chose another transport"));
  }
  row.memory = memory == MemoryKind::kHost ? "host" : "cuda";
  row.payload = payload_name;
  row.bytes = payload.size();
  row.put_gbps = payload.size() / Median(put_t) / 1e9;
  row.get_gbps = payload.size() / Median(get_t) / 1e9;
  if (memory == MemoryKind::kHost) {
    row.copy_gbps = MemcpyGbps(payload.size(), std::max(f.reps, 5));
  } else {
#ifdef LEAPCACHE_WITH_CUDA
    row.copy_gbps = DeviceCopyGbps(payload.size(), std::max(f.reps, 5), 0, f.engine_gpu);
    row.h2d_gbps = PinnedHostToDeviceGbps(payload.size(), std::max(f.reps, 5), f.engine_gpu);
#endif
  }
  return row;
}

// Gets of a scheduler step: `gets` one-layer reads (get g: layer g % layers of checkpoint
// g % checkpoints, into a page of its own), one GetInto each against one GetBatch of them all, in
// rounds that alternate the two (the machine's speed drifts), every page's bytes checked once.
struct BatchRow {
  std::string transport, memory, what;
  int gets = 0;
  double each_us = 0, batch_us = 0, each_worst_us = 0, batch_worst_us = 0;
};

BatchRow MeasureBatch(const Flags& f, const std::string& target, uint32_t ns, Transport transport,
                      MemoryKind memory, const std::string& what, const std::vector<uint8_t>& blobs,
                      int checkpoints, int gets, uint8_t salt) {
  client::ClientOptions options;
  options.target = target;
  client::EngineIdentity identity;
  identity.name = "transfer-bench-batch";
  identity.gpu_index = f.engine_gpu;
  client::AttachOptions attach;
  attach.transports = {transport};
  attach.ucx_transports = f.ucx_tls;
  attach.transfer_channel = f.channel;
  auto engine = client::AttachedEngine::Attach(options, identity, attach);
  if (!engine.ok()) Die("attach", engine.status());
  const size_t layer_bytes = blobs.size() / kLayers;
  const size_t page = (layer_bytes + 4095) / 4096 * 4096;
  EngineBuffer src(memory, blobs.size()), pages(memory, page * gets);
  src.Fill(blobs);
  auto src_id = (*engine)->RegisterBuffer(src.data(), src.size(), memory);
  auto pages_id = (*engine)->RegisterBuffer(pages.data(), pages.size(), memory);
  if (!src_id.ok()) Die("register", src_id.status());
  if (!pages_id.ok()) Die("register", pages_id.status());
  for (int c = 0; c < checkpoints; ++c) {
    const client::PutTarget t{ns, Key(c, salt), {256, 1}, {}, absl::ZeroDuration()};
    if (absl::Status st = (*engine)->PutFrom(t, std::nullopt, *src_id, 0, blobs.size()); !st.ok()) {
      Die(what + " put", st);
    }
  }
  std::vector<client::GetItem> items;
  for (int g = 0; g < gets; ++g) {
    client::GetItem item{{ns, Key(g % checkpoints, salt), {}, std::nullopt},
                         *pages_id,
                         static_cast<uint64_t>(g) * page};
    item.request.layers = {g % kLayers, g % kLayers + 1};
    items.push_back(item);
  }
  const auto check = [&] {
    const std::vector<uint8_t> landed = pages.Read(pages.size());
    for (int g = 0; g < gets; ++g) {
      const size_t l = g % kLayers;
      if (!std::equal(blobs.begin() + l * layer_bytes, blobs.begin() + (l + 1) * layer_bytes,
                      landed.begin() + g * page)) {
        Die(what, absl::DataLossError(absl::StrCat("page ", g, " differs")));
      }
    }
  };
  std::vector<double> each_t, batch_t;
  for (int r = 0; r < f.reps; ++r) {
    Clock::time_point t0 = Clock::now();
    for (const client::GetItem& item : items) {
      auto got = (*engine)->GetInto(item.request, item.buffer, item.offset);
      if (!got.ok()) Die(what + " get", got.status());
    }
    each_t.push_back(Seconds(Clock::now() - t0));
    if (r == 0) check();
    t0 = Clock::now();
    auto got = (*engine)->GetBatch(items);
    batch_t.push_back(Seconds(Clock::now() - t0));
    if (!got.ok()) Die(what + " batch", got.status());
    for (const auto& one : *got) {
      if (!one.ok()) Die(what + " batch get", one.status());
    }
    if (r == 0) check();
  }
  for (int c = 0; c < checkpoints; ++c) {
    if (absl::Status st = (*engine)->client().Delete(ns, Key(c, salt)); !st.ok()) {
      Die("delete", st);
    }
  }
  BatchRow row;
  row.transport = transport == Transport::kInline ? "inline gRPC" : TransportLabel(transport);
  if ((*engine)->transferring_through_channel()) row.transport += " + channel";
  row.memory = memory == MemoryKind::kHost ? "host" : "cuda";
  row.what = what;
  row.gets = gets;
  row.each_us = 1e6 * Median(each_t);
  row.batch_us = 1e6 * Median(batch_t);
  row.each_worst_us = 1e6 * *absl::c_max_element(each_t);
  row.batch_worst_us = 1e6 * *absl::c_max_element(batch_t);
  return row;
}

int Main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) return 2;
  std::unique_ptr<server::Server> server;
  std::string target = f.target;
  if (target.empty()) {
    server::ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "";
    config.memory_budget = 1ull << 30;
    absl::StatusOr<std::unique_ptr<server::Server>> s = server::Server::Start(config);
    if (!s.ok()) Die("server", s.status());
    server = std::move(s).value();
    target = server->grpc_address();
  }
  MetricsSource metrics;
  if (server != nullptr) {
    metrics = [&server] { return server->RenderMetrics(); };
  } else if (f.metrics_port != 0) {
    metrics = [port = f.metrics_port] {
      absl::StatusOr<base::HttpResponse> r = base::HttpGet(port, "/metrics");
      if (!r.ok()) Die("scrape /metrics", r.status());
      if (r->status != 200) Die("scrape /metrics", absl::UnavailableError(r->headers));
      return r->body;
    };
  }
  client::ClientOptions options;
  options.target = target;
  auto c = client::Client::Create(options);
  if (!c.ok()) Die("connect", c.status());
  client::NamespaceSpec spec;
  spec.tenant = "transfer-bench";
  spec.model = {kLayers, kHeads, kDim, kDim, client::StateKind::kGdn};
  spec.format = client::StorageFormat::Leap(8);
  auto ns = (*c)->RegisterNamespace(spec);
  if (!ns.ok()) Die("register namespace", ns.status());
  // One layer of the same model: what an engine that pages states per layer gets at a time.
  spec.model.linear_layers = 1;
  auto ns_layer = (*c)->RegisterNamespace(spec);
  if (!ns_layer.ok()) Die("register namespace", ns_layer.status());
  const Payloads p = MakePayloads();

  std::vector<std::pair<Transport, MemoryKind>> runs = {{Transport::kInline, MemoryKind::kHost},
                                                        {Transport::kUcx, MemoryKind::kHost}};
  bool gpu = false;
#ifdef LEAPCACHE_WITH_CUDA
  gpu = HaveGpu();
  if (gpu && cudaSetDevice(f.engine_gpu) != cudaSuccess) {
    Die("engine GPU", absl::InvalidArgumentError(absl::StrCat("no CUDA device ", f.engine_gpu)));
  }
  if (gpu) {
    runs.push_back({Transport::kInline, MemoryKind::kCuda});
    runs.push_back({Transport::kUcx, MemoryKind::kCuda});
    // CUDA refuses to open an IPC handle in the process that exported it: the server must be
    // another process (--target).
    if (server == nullptr) runs.push_back({Transport::kCudaIpc, MemoryKind::kCuda});
#ifdef LEAPCACHE_TRANSPORT_NCCL
    // NCCL puts its two ranks on two GPUs: the server's (0) and the engine's.
    if (f.engine_gpu != 0) runs.push_back({Transport::kNccl, MemoryKind::kCuda});
#endif
  }
#endif
  std::vector<Row> rows;
  uint8_t salt = 0;
  if (!f.transports.empty()) {
    std::erase_if(runs, [&](const std::pair<Transport, MemoryKind>& run) {
      return !absl::c_linear_search(f.transports, TransportLabel(run.first));
    });
  }
  for (const auto& [transport, memory] : runs) {
    rows.push_back(Measure(f, metrics, target, ns->id, transport, memory, "compact 8-bit",
                           p.compact, std::nullopt, ++salt));
    rows.push_back(Measure(f, metrics, target, ns_layer->id, transport, memory,
                           "compact 8-bit, 1 layer", p.one_layer, std::nullopt, ++salt));
    rows.push_back(
        Measure(f, metrics, target, ns->id, transport, memory, "dense bf16", p.dense_bf16,
                client::DenseEncoding{client::DType::kBf16, client::Layout::kKV}, ++salt));
  }
  std::vector<BatchRow> batches;
  for (const auto& [transport, memory] : runs) {
    // Every layer of one checkpoint into its own page; four layers of each of 16 checkpoints.
    batches.push_back(MeasureBatch(f, target, ns->id, transport, memory,
                                   "32 layers of one checkpoint", p.compact, 1, kLayers, ++salt));
    batches.push_back(MeasureBatch(f, target, ns->id, transport, memory,
                                   "16 checkpoints, 4 layers each", p.compact, 16, 64, ++salt));
  }
  std::printf(
      "\n| transport | engine memory | payload | bytes | put GB/s | get GB/s | copy GB/s | "
      "put / copy | get / copy | pinned H2D GB/s | get / H2D |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const std::string h2d = r.h2d_gbps > 0 ? absl::StrFormat("%.1f", r.h2d_gbps) : "-";
    const std::string per_h2d =
        r.h2d_gbps > 0 ? absl::StrFormat("%.4f", r.get_gbps / r.h2d_gbps) : "-";
    std::printf("| %s | %s | %s | %zu | %.3f | %.3f | %.1f | %.4f | %.4f | %s | %s |\n",
                r.transport.c_str(), r.memory.c_str(), r.payload.c_str(), r.bytes, r.put_gbps,
                r.get_gbps, r.copy_gbps, r.put_gbps / r.copy_gbps, r.get_gbps / r.copy_gbps,
                h2d.c_str(), per_h2d.c_str());
  }
  std::printf(
      "\nget latency on the engine (us) and where the server's part went (mean us per call%s)\n"
      "\n| transport | engine memory | payload | p50 | p99 | mean | again p50 | server call | "
      "session | "
      "open | list | move | engine check | absent key p50 |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      !metrics ? "; no --metrics-port: no server phases" : "");
  for (const Row& r : rows) {
    auto us = [&](const std::string& key) { return ServerMicros(r, key); };
    auto server = [&](const std::string& op) { return ServerCallMicros(r, op); };
    const std::string check = r.checked_by_service ? "by the service"
                              : r.check_us > 0     ? absl::StrFormat("%.1f", r.check_us)
                                                   : "-";
    std::printf(
        "| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %.1f |\n",
        r.transport.c_str(), r.memory.c_str(), r.payload.c_str(), r.get_p50_us, r.get_p99_us,
        r.get_mean_us, r.again_p50_us, server("get").c_str(), us("get/session").c_str(),
        us("get/open").c_str(), us("get/list").c_str(), us("get/move").c_str(), check.c_str(),
        r.miss_p50_us);
  }
  if (metrics) {
    std::printf(
        "\n| transport | engine memory | payload | put p50 | put server call | session | open | "
        "move | commit |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
      auto us = [&](const std::string& key) { return ServerMicros(r, key); };
      auto server = [&](const std::string& op) { return ServerCallMicros(r, op); };
      std::printf("| %s | %s | %s | %.1f | %s | %s | %s | %s | %s |\n", r.transport.c_str(),
                  r.memory.c_str(), r.payload.c_str(), r.put_p50_us, server("put").c_str(),
                  us("put/session").c_str(), us("put/open").c_str(), us("put/move").c_str(),
                  us("put/commit").c_str());
    }
  }
  std::printf(
      "\none-layer compact gets (a page each), one GetInto each against one GetBatch: median us "
      "of %d rounds (worst)\n\n| transport | engine memory | gets | of | each | batch | "
      "each / batch |\n|---|---|---:|---|---:|---:|---:|\n",
      f.reps);
  for (const BatchRow& b : batches) {
    std::printf("| %s | %s | %d | %s | %.0f (%.0f) | %.0f (%.0f) | %.2f |\n", b.transport.c_str(),
                b.memory.c_str(), b.gets, b.what.c_str(), b.each_us, b.each_worst_us, b.batch_us,
                b.batch_worst_us, b.each_us / b.batch_us);
  }
  if (!gpu || server != nullptr) {
    std::printf("| cuda_ipc | - | - | - | %s | | | | |\n",
                gpu ? "needs an out-of-process server (--target)" : "no GPU");
  }
  bool nccl_built = false;
#ifdef LEAPCACHE_TRANSPORT_NCCL
  nccl_built = true;
#endif
  if (!gpu || f.engine_gpu == 0 || !nccl_built) {
    std::printf("| nccl | - | - | - | %s | | | | |\n",
                !nccl_built ? "not built"
                : gpu       ? "needs the engine on another GPU (--engine-gpu=1)"
                            : "no GPU");
  }
  std::printf(
      "copy: memcpy host-to-host for host rows%s; engine buffers on GPU %d, server on "
      "GPU 0\n",
      !gpu                ? "; no GPU in this run"
      : f.engine_gpu == 0 ? ", cudaMemcpy device-to-device for cuda rows"
                          : ", cudaMemcpyPeer (peer access on) GPU 0 -> engine GPU for cuda rows",
      f.engine_gpu);
  std::string json = "{\"rows\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    absl::StrAppend(&json, i ? "," : "", "{\"transport\":\"", r.transport, "\",\"memory\":\"",
                    r.memory, "\",\"payload\":\"", r.payload, "\",\"bytes\":", r.bytes,
                    ",\"put_gbps\":", r.put_gbps, ",\"get_gbps\":", r.get_gbps,
                    ",\"copy_gbps\":", r.copy_gbps, ",\"h2d_gbps\":", r.h2d_gbps,
                    ",\"get_p50_us\":", r.get_p50_us, ",\"get_p99_us\":", r.get_p99_us,
                    ",\"get_mean_us\":", r.get_mean_us, ",\"again_p50_us\":", r.again_p50_us,
                    ",\"checked_by_service\":", r.checked_by_service ? "true" : "false",
                    ",\"engine_check_us\":", r.check_us, ",\"miss_p50_us\":", r.miss_p50_us,
                    ",\"server_us\":{");
    bool first = true;
    for (const auto& [key, v] : r.server_us) {
      absl::StrAppend(&json, first ? "" : ",", "\"", key, "\":", v);
      first = false;
    }
    absl::StrAppend(&json, "}}");
  }
  absl::StrAppend(&json, "],\"reps\":", f.reps, ",\"gpu\":", gpu ? "true" : "false",
                  ",\"engine_gpu\":", f.engine_gpu, "}\n");
  std::printf("%s", json.c_str());
  if (!f.json.empty()) {
    if (FILE* out = std::fopen(f.json.c_str(), "w")) {
      std::fputs(json.c_str(), out);
      std::fclose(out);
    }
  }
  return 0;
}

}  // namespace
}  // namespace leapcache::bench

int main(int argc, char** argv) {
  // As leapcache-server does: the in-process server's messages should cost what they do there.
  leapcache::server::KeepLargeAllocationsMapped();
  leapcache::base::StopMutexDeadlockDetection();
  return leapcache::bench::Main(argc, argv);
}
