#include "load/load_runner.h"

#include <cmath>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "load/block_chain.h"
#include "load/latency_recorder.h"
#include "load/prefix_tracker.h"
#include "base/status_macros.h"

namespace leapcache::load {
namespace {

struct HashOfHash {
  size_t operator()(const client::BlockHash& h) const { return static_cast<size_t>(HashSeed(h)); }
};

// Everything the workers of one run share.
class RunState {
 public:
  RunState(const std::vector<WorkloadRequest>& requests, const StatePool& pool, size_t format,
           const RunnerOptions& options, uint32_t namespace_id, ProgressLine& progress)
      : requests_(requests), pool_(pool), format_(format), o_(options), ns_(namespace_id),
        progress_(progress) {}

  // Called by the dispatcher: request i is due now.
  void Dispatch(size_t i, absl::Time due) {
    absl::MutexLock lock(&mu_);
    queue_.push_back({i, due});
  }
  void CloseQueue() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

  // A worker's loop: runs requests until the queue is closed and empty.
  void Work(client::Client& client) {
    std::vector<uint8_t> scratch;
    while (true) {
      Item item;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &RunState::HasWork));
        if (queue_.empty()) return;
        item = queue_.front();
        queue_.pop_front();
      }
      const absl::Time start = absl::Now();
      ClientCounters c;
      c.queue_delay_s_max = absl::ToDoubleSeconds(start - item.due);
      RunRequest(client, requests_[item.index], c, scratch);
      latencies_.request.Record(absl::Now() - start);
      Merge(c);
    }
  }

  ClientCounters counters() {
    absl::MutexLock lock(&mu_);
    return totals_;
  }
  const absl::flat_hash_set<client::BlockHash, HashOfHash>& put_hashes() const
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return put_hashes_;  // read after every worker has joined
  }

  // Per call kind, recorded by every worker.
  struct Latencies {
    LatencyRecorder lookup, get, put, request;
  };
  Latencies& latencies() { return latencies_; }

 private:
  struct Item {
    size_t index = 0;
    absl::Time due;
  };
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closed_; }

  void Sleep(double model_seconds) const {
    if (o_.time_scale > 0 && model_seconds > 0) {
      absl::SleepFor(absl::Seconds(model_seconds * o_.time_scale));
    }
  }

  void RunRequest(client::Client& client, const WorkloadRequest& r, ClientCounters& c,
                  std::vector<uint8_t>& scratch) {
    const int64_t bt = o_.block_tokens;
    c.requests = 1;
    c.input_tokens = static_cast<uint64_t>(r.input_tokens);
    c.prefill_uncached_s = PrefillSeconds(o_.compute, 0, r.input_tokens);
    const int64_t full = FullBlocks(r, bt);
    int64_t restored_tokens = 0;
    std::vector<int64_t> admitted;
    std::vector<client::BlockHash> chain;
    if (full > 0) {
      c.requests_with_blocks = 1;
      absl::StatusOr<std::vector<client::BlockHash>> made =
          ChainFromBlockIds(std::span<const uint64_t>(r.block_ids).first(full));
      if (!made.ok()) {
        Fail(c, "chain", made.status());
      } else {
        chain = *std::move(made);
        const int64_t branch = tracker_.ObserveAndFindBranch(chain);
        const int64_t hit = LookupAndFetch(client, chain, c);
        restored_tokens = (hit + 1) * bt;
        admitted = AdmittedBlocks(o_.admission, full, hit, branch);
      }
    }
    c.hit_tokens = static_cast<uint64_t>(restored_tokens);
    // Prefill block by block, checkpointing at each admitted boundary as it is reached.
    int64_t position = restored_tokens;
    for (int64_t i : admitted) {
      const int64_t boundary = (i + 1) * bt;
      Sleep(PrefillSeconds(o_.compute, position, boundary));
      position = boundary;
      Put(client, chain[i], i, c, scratch);
    }
    Sleep(PrefillSeconds(o_.compute, position, r.input_tokens));
    c.prefill_s = PrefillSeconds(o_.compute, restored_tokens, r.input_tokens);
    c.decode_s = DecodeSeconds(o_.compute, r.output_tokens);
    Sleep(c.decode_s);
  }

  // The chain index of the checkpoint restored (-1: none).
  int64_t LookupAndFetch(client::Client& client, const std::vector<client::BlockHash>& chain,
                         ClientCounters& c) {
    c.lookups = 1;
    c.lookup_tokens = chain.size() * static_cast<uint64_t>(o_.block_tokens);
    client::LookupRequest lr;
    lr.namespace_id = ns_;
    lr.chain = chain;
    lr.block_tokens = o_.block_tokens;
    absl::Time t0 = absl::Now();
    absl::StatusOr<client::LookupResult> hit = client.Lookup(lr);
    latencies_.lookup.Record(absl::Now() - t0);
    if (!hit.ok()) {
      Fail(c, "lookup", hit.status());
      return -1;
    }
    if (!hit->hit) return -1;
    c.lookup_hits = 1;
    client::GetRequest gr;
    gr.namespace_id = ns_;
    gr.hash = chain[hit->index];
    t0 = absl::Now();
    absl::StatusOr<client::Checkpoint> got = client.Get(gr);
    latencies_.get.Record(absl::Now() - t0);
    if (!got.ok()) {
      // Evicted between the lookup and the get: the engine prefills from scratch.
      if (absl::IsNotFound(got.status())) {
        ++c.gets_missing;
      } else {
        Fail(c, "get", got.status());
      }
      return -1;
    }
    c.gets = 1;
    c.get_bytes = got->bytes.size();
    if (pool_.Matches(format_, HashSeed(gr.hash), got->bytes)) {
      c.gets_verified = 1;
      return hit->index;
    }
    c.gets_mismatched = 1;
    return -1;  // a wrong state is worse than none: prefill it all
  }

  void Put(client::Client& client, const client::BlockHash& hash, int64_t index, ClientCounters& c,
           std::vector<uint8_t>& scratch) {
    pool_.CheckpointBlobs(format_, HashSeed(hash), scratch);
    client::PutTarget t;
    t.namespace_id = ns_;
    t.hash = hash;
    t.position = {(index + 1) * o_.block_tokens, index + 1};
    const absl::Time t0 = absl::Now();
    const absl::Status st = client.PutCompact(t, scratch);
    latencies_.put.Record(absl::Now() - t0);
    if (st.ok()) {
      ++c.puts;
      c.put_bytes += scratch.size();
      absl::MutexLock lock(&mu_);
      put_hashes_.insert(hash);
    } else if (absl::IsResourceExhausted(st)) {
      ++c.puts_refused;
    } else if (absl::IsAlreadyExists(st) || absl::IsFailedPrecondition(st)) {
      // Another engine stored (ALREADY_EXISTS) or is storing (FAILED_PRECONDITION: a put in
      // flight for the key) the same prefix: the checkpoint will be there, nothing to redo.
      ++c.puts_duplicate;
    } else {
      Fail(c, "put", st);
    }
  }

  static void Fail(ClientCounters& c, const char* call, const absl::Status& st) {
    if (c.errors++ == 0) c.first_error = absl::StrCat(call, ": ", st.ToString());
  }

  void Merge(const ClientCounters& c) {
    absl::MutexLock lock(&mu_);
    ClientCounters& t = totals_;
    t.requests += c.requests;
    t.requests_with_blocks += c.requests_with_blocks;
    t.lookups += c.lookups;
    t.lookup_hits += c.lookup_hits;
    t.input_tokens += c.input_tokens;
    t.lookup_tokens += c.lookup_tokens;
    t.hit_tokens += c.hit_tokens;
    t.gets += c.gets;
    t.get_bytes += c.get_bytes;
    t.gets_verified += c.gets_verified;
    t.gets_mismatched += c.gets_mismatched;
    t.gets_missing += c.gets_missing;
    t.puts += c.puts;
    t.put_bytes += c.put_bytes;
    t.puts_refused += c.puts_refused;
    t.puts_duplicate += c.puts_duplicate;
    if (t.first_error.empty()) t.first_error = c.first_error;
    t.errors += c.errors;
    t.prefill_s += c.prefill_s;
    t.prefill_uncached_s += c.prefill_uncached_s;
    t.decode_s += c.decode_s;
    t.queue_delay_s_max = std::max(t.queue_delay_s_max, c.queue_delay_s_max);
    progress_.Update(t.requests, t.lookups, t.lookup_hits, t.puts, t.gets);
    if (o_.counter_file != nullptr) {
      o_.counter_file->Add(c.gets_verified, c.gets_mismatched, c.gets_missing);
    }
  }

  const std::vector<WorkloadRequest>& requests_;
  const StatePool& pool_;
  const size_t format_;
  const RunnerOptions& o_;
  const uint32_t ns_;
  ProgressLine& progress_;
  PrefixTracker tracker_;
  Latencies latencies_;

  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  ClientCounters totals_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<client::BlockHash, HashOfHash> put_hashes_ ABSL_GUARDED_BY(mu_);
};

client::NamespaceSpec SpecFor(const RunnerOptions& o, const LoadFormat& f) {
  client::NamespaceSpec spec;
  // One tenant per format, so a format's run never finds another format's checkpoints.
  spec.tenant = absl::StrCat(o.tenant, "/", f.label);
  spec.model = o.model;
  spec.format = f.format;
  return spec;
}

}  // namespace

absl::Status ValidateRunnerOptions(const RunnerOptions& o) {
  if (o.engines < 1 || o.engines > 256) {
    return absl::InvalidArgumentError(absl::StrCat("engines must be in [1, 256] (got ", o.engines, ")"));
  }
  if (o.slots_per_engine < 1 || o.slots_per_engine > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots_per_engine must be in [1, 256] (got ", o.slots_per_engine, ")"));
  }
  if (!std::isfinite(o.time_scale) || o.time_scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("time_scale must be finite and >= 0 (got ", o.time_scale, ")"));
  }
  if (o.block_tokens < 1 || o.block_tokens > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_tokens must be in [1, 65536] (got ", o.block_tokens, ")"));
  }
  return ValidateComputeModel(o.compute);
}

absl::StatusOr<FormatRun> RunFormat(const std::vector<WorkloadRequest>& requests,
                                    const StatePool& pool, size_t format_index,
                                    const LoadFormat& format, const RunnerOptions& o,
                                    ProgressLine& progress) {
  LC_RETURN_IF_ERROR(ValidateRunnerOptions(o));
  std::vector<std::unique_ptr<client::Client>> clients;
  for (int e = 0; e < o.engines; ++e) {
    client::ClientOptions options;
    options.target = o.target;
    LC_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c, client::Client::Create(options));
    clients.push_back(std::move(c));
  }
  client::Client& control = *clients.front();
  LC_ASSIGN_OR_RETURN(const client::NamespaceInfo ns, control.RegisterNamespace(SpecFor(o, format)));

  FormatRun run;
  run.label = format.label;
  run.format_label = ns.format_label;
  run.blob_bytes = pool.blob_bytes(format_index);
  run.checkpoint_bytes = pool.checkpoint_bytes(format_index);
  run.payload_relative_error = pool.mean_relative_error(format_index);
  if (ns.blob_bytes != run.blob_bytes || ns.side_bytes != pool.side_bytes()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server stores ", ns.blob_bytes, "-byte blobs with ", ns.side_bytes,
        "-byte side states for ", format.label, ", the pool made ", run.blob_bytes, " and ",
        pool.side_bytes()));
  }
  LC_ASSIGN_OR_RETURN(run.server.before, control.Stats());

  RunState state(requests, pool, format_index, o, ns.id, progress);
  progress.Start(format.label, requests.size());
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int e = 0; e < o.engines; ++e) {
    for (int s = 0; s < o.slots_per_engine; ++s) {
      workers.emplace_back([&state, c = clients[e].get()] { state.Work(*c); });
    }
  }
  // Times count from the first request, so an excerpt of a trace starts at once.
  const double first_arrival = requests.empty() ? 0 : requests.front().arrival_s;
  for (size_t i = 0; i < requests.size(); ++i) {
    const absl::Time due =
        start + absl::Seconds((requests[i].arrival_s - first_arrival) * o.time_scale);
    if (o.time_scale > 0) absl::SleepFor(due - absl::Now());
    state.Dispatch(i, o.time_scale > 0 ? due : absl::Now());
  }
  state.CloseQueue();
  for (std::thread& t : workers) t.join();
  run.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  progress.Finish();

  run.counters = state.counters();
  run.lookup_latency = state.latencies().lookup.Summarize();
  run.get_latency = state.latencies().get.Summarize();
  run.put_latency = state.latencies().put.Summarize();
  run.request_latency = state.latencies().request.Summarize();
  LC_ASSIGN_OR_RETURN(run.server.after, control.Stats());
  run.resident_checkpoints = Delta(run.server.before.checkpoints, run.server.after.checkpoints);
  if (!run.server.after.tiers.empty()) run.budget_bytes = run.server.after.tiers.front().capacity_bytes;

  if (o.empty_store_after) {
    run.store_emptied = true;
    for (const client::BlockHash& h : state.put_hashes()) {
      const absl::Status st = control.Delete(ns.id, h);
      if (st.ok()) {
        ++run.emptied_checkpoints;
      } else if (!absl::IsNotFound(st)) {
        return st;  // evicted ones are NOT_FOUND; anything else means the store is not empty
      }
    }
  }
  return run;
}

}  // namespace leapcache::load
