// What a load test measured: one FormatRun per storage format (the same workload against the
// same memory budget), and the settings that produced them. Plain data; the writers
// (report_json.h, report_markdown.h, report_plots.h) and the consistency check
// (report_check.h) read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "leapcache/client.h"
#include "load/latency_recorder.h"

namespace leapcache::load {

// Counted by the load tester itself, from its own calls.
struct ClientCounters {
  uint64_t requests = 0;              // requests run
  uint64_t requests_with_blocks = 0;  // requests with >= 1 full block (the others cannot hit)
  uint64_t lookups = 0, lookup_hits = 0;
  uint64_t input_tokens = 0;          // all prompt tokens
  uint64_t lookup_tokens = 0;         // tokens in the full blocks looked up
  uint64_t hit_tokens = 0;            // tokens restored from checkpoints
  uint64_t gets = 0, get_bytes = 0;
  uint64_t gets_verified = 0;         // byte-exact against what was put
  uint64_t gets_mismatched = 0;       // bytes differed
  uint64_t gets_missing = 0;          // NOT_FOUND after a hit (evicted in between)
  uint64_t puts = 0, put_bytes = 0;   // committed
  uint64_t puts_refused = 0;          // RESOURCE_EXHAUSTED: no room even after eviction
  uint64_t puts_duplicate = 0;        // another request stored or is storing the same key
  uint64_t errors = 0;                // any other failed call
  std::string first_error;            // the first of them: which call, and the status
  double prefill_s = 0;               // simulated prefill time with the cache
  double prefill_uncached_s = 0;      // what it would have been with no cache
  double decode_s = 0;
  double queue_delay_s_max = 0;       // longest wait of a request for a free engine slot
};

// Server Stats taken before and after the run, and what changed.
struct ServerView {
  client::ServerStats before, after;
};

struct FormatRun {
  std::string label;                 // fp32, bf16, leap8, ...
  std::string format_label;          // as the server names it
  uint64_t blob_bytes = 0;           // one (layer, head) blob
  uint64_t checkpoint_bytes = 0;     // one checkpoint (all layers and heads)
  double payload_relative_error = 0; // of the pool's states in this format
  double wall_s = 0;
  ClientCounters counters;
  LatencySummary lookup_latency, get_latency, put_latency, request_latency;
  ServerView server;
  uint64_t resident_checkpoints = 0;  // at the end of the run (server Stats)
  uint64_t budget_bytes = 0;          // primary tier capacity
  bool store_emptied = false;          // this run's checkpoints were deleted afterwards
  uint64_t emptied_checkpoints = 0;   // how many were still there to delete
};

struct LoadReport {
  std::string command;         // how it was run
  std::string workload;        // what the requests were
  std::string payloads;        // what the states were (StatePool::Description)
  std::string method;          // how the formats were compared
  std::string server_target;
  client::ModelShape model;
  int64_t block_tokens = 0;
  std::string admission;
  int engines = 0, slots_per_engine = 0;
  double time_scale = 0;
  uint64_t workload_requests = 0;
  std::vector<FormatRun> runs;
};

// Derived numbers, shared by every writer so they agree.
// Over all requests and all prompt tokens: a prompt shorter than one block cannot hit and
// counts as a miss, as it does for the engine.
double RequestHitRate(const FormatRun& r);  // lookup_hits / requests
double TokenHitRate(const FormatRun& r);    // hit_tokens / input_tokens
double RequestsPerSecond(const FormatRun& r);
uint64_t Delta(uint64_t before, uint64_t after);
// Memory the server holds in tier `name` after the run (0 if absent).
uint64_t TierUsedBytes(const client::ServerStats& s, const std::string& name);

}  // namespace leapcache::load
