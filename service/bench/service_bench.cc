// leapcache-service-bench: end-to-end numbers of the service over loopback gRPC, printed as a
// table (nothing is asserted).
//
//   leapcache-service-bench [--seconds=S] [--reps=N] [--chunk-bytes=B] [--target=HOST:PORT]
//                           [--gpu-memory-budget=BYTES] [--lookups-only]
//                           [--lookup-batches=1,64] [--lookup-clients=1,8,64]
//                           [--lookup-engines] [--engine-spin-us=US]
//
// 1. Lookup throughput and p50/p99 call latency at 1, 8 and 64 concurrent clients (each its own
//    connection, one call in flight each) for S seconds each, on chains of 32 blocks with
//    checkpoints every 8 blocks: one Lookup per call (batch 1), or LookupBatch calls of the
//    given sizes (random chains; a scheduler step's lookups). --lookup-engines: each client an
//    AttachedEngine, whose lookups go through its transfer channel (shared memory) where the
//    server is on this host.
// 2. Put and get bandwidth of one 32-layer x 32-head x 128 x 128 checkpoint (gets into a new
//    Checkpoint, and GetInto a buffer the engine already has): compact 8-bit
//    blobs (20 MB), compact fp32 blobs (67 MB), dense fp32 states encoded / decoded by the
//    server (67 MB on the wire), each the median of N runs and set against a memcpy of the same
//    bytes measured in the same run (ratio = service / memcpy).
// By default the server runs in this process (CPU backend, loopback, port 0); --target
// measures a running leapcache-server instead (it needs >= 1 GiB of memory budget).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/mutex_deadlock_detection.h"
#include "gpu/format/format.h"
#include "gpu/reference/codec.h"
#include "leapcache/client.h"
#include "leapcache/data_plane.h"
#include "service/server/large_allocations.h"
#include "service/server/server.h"

namespace leapcache::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Flags {
  // Bytes of GPU tier in front of the host tier (servers built with CUDA); 0: host only.
  uint64_t gpu_memory_budget = 0;
  double seconds = 3;
  int reps = 5;
  size_t chunk_bytes = 1 << 20;
  std::string target;
  // Only the lookup rows (the put/get bandwidth rows are skipped).
  bool lookups_only = false;
  // Lookups per call (1: the Lookup RPC, more: LookupBatch) and concurrent clients, each row.
  std::vector<int> lookup_batches = {1};
  std::vector<int> lookup_clients = {1, 8, 64};
  // Each lookup client an attached engine (its session's transfer channel where the server is on
  // this host), its spin before it sleeps; otherwise a Client (the StateCache RPCs).
  bool lookup_engines = false;
  absl::Duration engine_spin = absl::Microseconds(50);
};

// "1,8,64" as positive integers (at most `max` each).
bool ParseList(const std::string& value, int max, std::vector<int>* out) {
  std::vector<int> parsed;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1 || v > max) return false;
    parsed.push_back(v);
  }
  if (parsed.empty()) return false;
  *out = std::move(parsed);
  return true;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  int64_t spin_us = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq),
                      value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (name == "--seconds" && absl::SimpleAtod(value, &f->seconds) && f->seconds > 0) continue;
    if (name == "--reps" && absl::SimpleAtoi(value, &f->reps) && f->reps > 0) continue;
    if (name == "--chunk-bytes" && absl::SimpleAtoi(value, &f->chunk_bytes) && f->chunk_bytes > 0) {
      continue;
    }
    if (name == "--gpu-memory-budget" && absl::SimpleAtoi(value, &f->gpu_memory_budget)) continue;
    if (name == "--lookup-batches" && ParseList(value, 4096, &f->lookup_batches)) continue;
    if (name == "--lookup-clients" && ParseList(value, 1024, &f->lookup_clients)) continue;
    if (name == "--lookup-engines" && value.empty()) {
      f->lookup_engines = true;
      continue;
    }
    if (name == "--engine-spin-us" && absl::SimpleAtoi(value, &spin_us) && spin_us >= 0) {
      f->engine_spin = absl::Microseconds(spin_us);
      continue;
    }
    if (name == "--lookups-only" && value.empty()) {
      f->lookups_only = true;
      continue;
    }
    if (name == "--target" && !value.empty()) {
      f->target = value;
      continue;
    }
    std::fprintf(stderr, "usage: %s [--seconds=S] [--reps=N] [--chunk-bytes=B] [--target=H:P] [--gpu-memory-budget=BYTES] [--lookups-only] [--lookup-batches=1,64] [--lookup-clients=1,8,64] [--lookup-engines] [--engine-spin-us=US]\n",
                 argv[0]);
    return false;
  }
  return true;
}

[[noreturn]] void Die(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "leapcache-service-bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

std::unique_ptr<client::Client> Connect(const Flags& f, const std::string& target) {
  client::ClientOptions o;
  o.target = target;
  o.chunk_bytes = f.chunk_bytes;
  o.max_message_bytes = std::max<size_t>(8 << 20, f.chunk_bytes + (128 << 10));
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(o);
  if (!c.ok()) Die("connect", c.status());
  return std::move(c).value();
}

client::BlockHash Key(uint64_t i, uint8_t salt) {
  client::BlockHash h{};
  std::memcpy(h.data(), &i, sizeof(i));
  h[30] = 0xBE;
  h[31] = salt;
  return h;
}

// --- 1. lookups -------------------------------------------------------------------------------

struct LookupRow {
  int batch = 1;
  int clients = 0;
  double ops_per_second = 0;  // lookups
  double calls_per_second = 0;
  double p50_us = 0, p99_us = 0;
  double hit_rate = 0;
};

LookupRow BenchLookups(const Flags& f, const std::string& target, uint32_t ns,
                       const std::vector<std::vector<client::BlockHash>>& chains, int batch,
                       int clients) {
  std::vector<std::vector<double>> latencies(clients);
  std::atomic<uint64_t> hits{0};
  std::atomic<bool> go{false};
  std::vector<std::unique_ptr<client::Client>> conns;
  std::vector<std::unique_ptr<client::AttachedEngine>> engines;
  for (int i = 0; i < clients; ++i) {
    if (!f.lookup_engines) {
      conns.push_back(Connect(f, target));
      continue;
    }
    client::ClientOptions o;
    o.target = target;
    client::AttachOptions attach;
    attach.transports = {client::Transport::kInline};
    attach.channel_spin = f.engine_spin;
    client::EngineIdentity identity;
    identity.name = absl::StrCat("bench-", i);
    absl::StatusOr<std::unique_ptr<client::AttachedEngine>> e =
        client::AttachedEngine::Attach(o, identity, attach);
    if (!e.ok()) Die("attach", e.status());
    engines.push_back(std::move(e).value());
  }
  // One call of client i: one lookup or a batch.
  const auto lookup = [&](int i, const client::LookupRequest& q) {
    return f.lookup_engines ? engines[i]->Lookup(q) : conns[i]->Lookup(q);
  };
  const auto lookup_batch = [&](int i, std::span<const client::LookupRequest> q) {
    return f.lookup_engines ? engines[i]->LookupBatch(q) : conns[i]->LookupBatch(q);
  };
  std::vector<std::thread> threads;
  const auto duration = std::chrono::duration<double>(f.seconds);
  Clock::time_point start;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      std::mt19937 rng(i + 1);
      while (!go.load()) std::this_thread::yield();
      const Clock::time_point end = start + std::chrono::duration_cast<Clock::duration>(duration);
      std::vector<client::LookupRequest> requests(batch);
      while (Clock::now() < end) {
        for (client::LookupRequest& q : requests) q = {ns, chains[rng() % chains.size()], {}, 0, 256};
        const Clock::time_point t0 = Clock::now();
        if (batch == 1) {
          absl::StatusOr<client::LookupResult> r = lookup(i, requests[0]);
          latencies[i].push_back(Seconds(Clock::now() - t0) * 1e6);
          if (!r.ok()) Die("lookup", r.status());
          if (r->hit) ++hits;
          continue;
        }
        absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> r =
            lookup_batch(i, requests);
        latencies[i].push_back(Seconds(Clock::now() - t0) * 1e6);
        if (!r.ok()) Die("lookup batch", r.status());
        for (const absl::StatusOr<client::LookupResult>& one : *r) {
          if (!one.ok()) Die("lookup in a batch", one.status());
          if (one->hit) ++hits;
        }
      }
    });
  }
  start = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  const double elapsed = Seconds(Clock::now() - start);
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  LookupRow row;
  row.batch = batch;
  row.clients = clients;
  row.calls_per_second = all.size() / elapsed;
  row.ops_per_second = row.calls_per_second * batch;
  row.p50_us = all[all.size() / 2];
  row.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  row.hit_rate = static_cast<double>(hits.load()) / (static_cast<double>(all.size()) * batch);
  return row;
}

// --- 2. bandwidth ------------------------------------------------------------------------------

struct BandwidthRow {
  std::string what;
  size_t bytes = 0;
  double put_gbps = 0, get_gbps = 0, get_into_gbps = 0, memcpy_gbps = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GB/s of memcpy of `bytes` between two buffers already touched (no page faults timed).
double MemcpyGbps(size_t bytes, int reps) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 2);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    src[r % bytes] = static_cast<uint8_t>(r);
    const Clock::time_point t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    t.push_back(Seconds(Clock::now() - t0));
    if (dst[r % bytes] != static_cast<uint8_t>(r)) std::abort();  // keeps the copy observable
  }
  return bytes / Median(t) / 1e9;
}

client::NamespaceSpec ModelSpec(client::StorageFormat format) {
  client::NamespaceSpec s;
  s.tenant = "bench";
  s.model = {32, 32, 128, 128, client::StateKind::kGdn};
  s.format = format;
  return s;
}

BandwidthRow BenchTransfer(const Flags& f, client::Client& c, const std::string& what,
                           client::StorageFormat format, std::optional<client::DenseEncoding> dense,
                           uint8_t salt) {
  const client::NamespaceSpec spec = ModelSpec(format);
  absl::StatusOr<client::NamespaceInfo> ns = c.RegisterNamespace(spec);
  if (!ns.ok()) Die("register", ns.status());
  const size_t states = 32 * 32, elems = 128 * 128;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> dense_states(states * elems);
  for (float& x : dense_states) x = normal(rng);
  std::vector<uint8_t> payload;
  if (dense.has_value()) {
    const auto* p = reinterpret_cast<const uint8_t*>(dense_states.data());
    payload.assign(p, p + dense_states.size() * 4);
  } else {
    BlobSpec b;
    b.codec = static_cast<Codec>(static_cast<int>(format.codec));
    b.bits = format.bits;
    b.p = format.p;
    b.r = format.r;
    b.smoothing = format.smoothing;
    for (size_t s = 0; s < states; ++s) {
      StatusOr<std::vector<uint8_t>> blob =
          reference::Encode(b, dense_states.data() + s * elems, Orientation::kKV);
      if (!blob.ok()) std::abort();
      payload.insert(payload.end(), blob->begin(), blob->end());
    }
  }
  std::vector<double> put_t, get_t, get_into_t;
  // GetInto's destination, touched before it is timed (an engine's buffer is long mapped).
  std::vector<uint8_t> into(payload.size(), 0xA5);
  for (int r = 0; r < f.reps; ++r) {
    const client::BlockHash key = Key(r, salt);
    const client::PutTarget target{ns->id, key, {256, 1}, {}, absl::ZeroDuration()};
    Clock::time_point t0 = Clock::now();
    absl::Status st =
        dense.has_value() ? c.PutDense(target, *dense, payload) : c.PutCompact(target, payload);
    put_t.push_back(Seconds(Clock::now() - t0));
    if (!st.ok()) Die(what + " put", st);
    t0 = Clock::now();
    absl::StatusOr<client::Checkpoint> got = c.Get({ns->id, key, {}, dense});
    get_t.push_back(Seconds(Clock::now() - t0));
    if (!got.ok()) Die(what + " get", got.status());
    if (got->bytes.size() != payload.size()) std::abort();
    if (!dense.has_value() && got->bytes != payload) Die(what, absl::DataLossError("bytes differ"));
    t0 = Clock::now();
    absl::StatusOr<client::Checkpoint> got_into = c.GetInto({ns->id, key, {}, dense}, into);
    get_into_t.push_back(Seconds(Clock::now() - t0));
    if (!got_into.ok()) Die(what + " get into", got_into.status());
    if (!std::equal(into.begin(), into.end(), got->bytes.begin())) {
      Die(what, absl::DataLossError("GetInto's bytes differ from Get's"));
    }
    std::fill(into.begin(), into.end(), 0xA5);
    st = c.Delete(ns->id, key);  // keep memory for the next rows
    if (!st.ok()) Die(what + " delete", st);
  }
  BandwidthRow row;
  row.what = what;
  row.bytes = payload.size();
  row.put_gbps = payload.size() / Median(put_t) / 1e9;
  row.get_gbps = payload.size() / Median(get_t) / 1e9;
  row.get_into_gbps = payload.size() / Median(get_into_t) / 1e9;
  row.memcpy_gbps = MemcpyGbps(payload.size(), std::max(f.reps, 5));
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
    config.gpu_memory_budget = f.gpu_memory_budget;
    config.chunk_bytes = f.chunk_bytes;
    config.max_message_bytes = std::max<uint64_t>(8 << 20, f.chunk_bytes + (128 << 10));
    absl::StatusOr<std::unique_ptr<server::Server>> s = server::Server::Start(config);
    if (!s.ok()) Die("start server", s.status());
    server = std::move(s).value();
    target = server->grpc_address();
  }
  std::unique_ptr<client::Client> c = Connect(f, target);

  // Lookup namespace: small states (lookups never touch bytes); 64 prompts of 32 blocks of 256
  // tokens, checkpoints after blocks 8, 16, 24 and 32.
  client::NamespaceSpec small;
  small.tenant = "bench-lookup";
  small.model = {2, 4, 16, 16, client::StateKind::kGdn};
  small.format = client::StorageFormat::Leap(8);
  absl::StatusOr<client::NamespaceInfo> lns = c->RegisterNamespace(small);
  if (!lns.ok()) Die("register", lns.status());
  std::vector<std::vector<client::BlockHash>> chains;
  {
    BlobSpec b = BlobSpec::Leap(StateKind::kGdn, 8, 16, 16);
    std::vector<float> zero(16 * 16, 0.5f);
    std::vector<uint8_t> blob = *reference::Encode(b, zero.data(), Orientation::kKV);
    std::vector<uint8_t> blobs;
    for (int i = 0; i < 8; ++i) blobs.insert(blobs.end(), blob.begin(), blob.end());
    for (int p = 0; p < 64; ++p) {
      std::vector<uint32_t> tokens(32 * 256);
      for (size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<uint32_t>(p * 7919 + t);
      chains.push_back(*client::ChainHashes(tokens, 256));
      for (int blk : {7, 15, 23, 31}) {
        absl::Status st =
            c->PutCompact({lns->id, chains.back()[blk], {(blk + 1) * 256, blk + 1}, {}, {}}, blobs);
        // ALREADY_EXISTS: an earlier run against the same --target put it.
        if (!st.ok() && st.code() != absl::StatusCode::kAlreadyExists) Die("populate", st);
      }
    }
  }
  std::vector<LookupRow> lookups;
  for (int batch : f.lookup_batches) {
    for (int clients : f.lookup_clients) {
      lookups.push_back(BenchLookups(f, target, lns->id, chains, batch, clients));
    }
  }

  std::vector<BandwidthRow> rows;
  if (!f.lookups_only) {
    rows.push_back(
        BenchTransfer(f, *c, "compact leap8 blobs", client::StorageFormat::Leap(8), std::nullopt, 1));
    rows.push_back(BenchTransfer(f, *c, "compact fp32 blobs", {client::Codec::kFp32, 32, 1, 0, false},
                                 std::nullopt, 2));
    rows.push_back(
        BenchTransfer(f, *c, "dense fp32 <-> leap8 (server codec)", client::StorageFormat::Leap(8),
                      client::DenseEncoding{client::DType::kFp32, client::Layout::kKV}, 3));
  }
  std::printf("leapcache service benchmark (%s server, %u hardware threads, chunk %zu B)\n\n",
              server != nullptr ? "in-process" : "external", std::thread::hardware_concurrency(),
              f.chunk_bytes);
  std::printf("Lookup, 32-block chains (checkpoints every 8 blocks), %.0f s per row, %s\n\n",
              f.seconds,
              f.lookup_engines ? "attached engines (transfer channels where the server is local)"
                               : "clients (StateCache RPCs)");
  std::printf(
      "| lookups per call | clients | lookups/s | calls/s | call p50 us | call p99 us | hit rate |\n"
      "|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const LookupRow& r : lookups) {
    std::printf("| %d | %d | %.0f | %.0f | %.0f | %.0f | %.2f |\n", r.batch, r.clients,
                r.ops_per_second, r.calls_per_second, r.p50_us, r.p99_us, r.hit_rate);
  }
  if (rows.empty()) {
    c.reset();
    if (server != nullptr) server->Shutdown(absl::Seconds(5));
    return 0;
  }
  std::printf("\nPut / get of one 32-layer x 32-head x 128x128 checkpoint, median of %d\n\n",
              f.reps);
  std::printf(
      "| payload | bytes | put GB/s | get GB/s | get-into GB/s | memcpy GB/s | put/memcpy | "
      "get/memcpy | get-into/memcpy |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const BandwidthRow& r : rows) {
    std::printf("| %s | %zu | %.3f | %.3f | %.3f | %.2f | %.4f | %.4f | %.4f |\n", r.what.c_str(),
                r.bytes, r.put_gbps, r.get_gbps, r.get_into_gbps, r.memcpy_gbps,
                r.put_gbps / r.memcpy_gbps, r.get_gbps / r.memcpy_gbps,
                r.get_into_gbps / r.memcpy_gbps);
  }
  c.reset();
  if (server != nullptr) server->Shutdown(absl::Seconds(5));
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
