// Runs one workload against a leapcache server in one storage format: simulated engines
// (engine_model.h) look up, fetch, prefill, checkpoint and decode every request through the
// real client library, and the run's counters, latencies and server Stats come back as a
// FormatRun.
//
// Timing: request i is dispatched at arrival_s * time_scale (open loop) to the first free slot
// of `engines` x `slots_per_engine` workers; simulated prefill and decode sleep their modelled
// duration times time_scale. time_scale 0 dispatches everything at once and sleeps nothing: the
// replay then runs as fast as the server answers, and with one engine of one slot it is
// sequential and deterministic (what the format comparison uses).
//
// Each engine has its own Client (connection). Within a request: the deepest checkpoint along
// its full blocks' chain is looked up and, on a hit, fetched compact and compared byte for byte
// with what was put (StatePool: the bytes are a function of the hash); prefill then advances
// block by block, putting a checkpoint at each admitted boundary as it passes it; then decode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "leapcache/client.h"
#include "load/counter_file.h"
#include "load/engine_model.h"
#include "load/load_format.h"
#include "load/load_report.h"
#include "load/progress_line.h"
#include "load/state_pool.h"
#include "load/workload.h"

namespace leapcache::load {

struct RunnerOptions {
  std::string target = "127.0.0.1:7470";
  std::string tenant = "leapcache-load";
  client::ModelShape model;
  int64_t block_tokens = 512;
  Admission admission = Admission::kBranchPoints;
  ComputeModel compute;
  int engines = 1;
  int slots_per_engine = 1;
  double time_scale = 0;
  // Delete every checkpoint this run put once it is over, so the next format starts from an
  // empty store (the comparison's method); off leaves them for inspection.
  bool empty_store_after = true;
  // Where the checked gets are counted as they happen (counter_file.h); null: nowhere.
  CounterFile* counter_file = nullptr;
};

// INVALID_ARGUMENT naming the bad option.
absl::Status ValidateRunnerOptions(const RunnerOptions& options);

// Registers the namespace (model x format) and runs every request. Errors only for what stops
// the run (no server, a namespace refused); failed calls during the run are counted.
absl::StatusOr<FormatRun> RunFormat(const std::vector<WorkloadRequest>& requests,
                                    const StatePool& pool, size_t format_index,
                                    const LoadFormat& format, const RunnerOptions& options,
                                    ProgressLine& progress);

}  // namespace leapcache::load
