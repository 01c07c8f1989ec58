// leapcache-load: replays a prefix-sharing workload against a leapcache server once per storage
// format, at the server's memory budget, and reports what each format keeps and hits.
//
//   leapcache-load --server=127.0.0.1:7470 --trace=mooncake_trace.jsonl --out=DIR
//   leapcache-load --server=127.0.0.1:7470 --scenario=chat --requests=2000 --rate=50 --out=DIR
//
// Writes DIR/report.json, DIR/report.md, DIR/headline.png and DIR/latency.png (with the gnuplot
// scripts and data beside them) and prints the headline table. Exit status: 0; 1 for bad flags,
// an unreachable server or (with --check) a report that is not self-consistent; 2 if only the
// plots could not be drawn.
//
// The formats run one after the other against the same server, each in its own namespace, the
// store emptied (every checkpoint the run put deleted) before the next: every format sees the
// same budget, the same page size and the same eviction policy, and the server is the one the
// operator runs. See --help for every flag.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/mutex_deadlock_detection.h"
#include "leapcache/client.h"
#include "load/counter_file.h"
#include "load/engine_model.h"
#include "load/load_format.h"
#include "load/load_report.h"
#include "load/load_runner.h"
#include "load/mooncake_trace.h"
#include "load/progress_line.h"
#include "load/report_check.h"
#include "load/report_json.h"
#include "load/report_markdown.h"
#include "load/report_plots.h"
#include "load/state_pool.h"
#include "load/synthetic_workload.h"
#include "base/status_macros.h"

ABSL_FLAG(std::string, server, "127.0.0.1:7470", "host:port of the leapcache-server to load");
ABSL_FLAG(std::string, tenant, "leapcache-load",
          "tenant of the namespaces (one per format: TENANT/FORMAT); runs against one server "
          "with different tenants never see each other's checkpoints");
ABSL_FLAG(std::string, out, "", "directory for report.json, report.md and the PNG plots (created)");
ABSL_FLAG(bool, check, false,
          "exit 1 unless the report is self-consistent (hits <= lookups, bytes accounted, memory "
          "<= budget, every get byte-exact, ...)");

// Workload: a trace or a generator.
ABSL_FLAG(std::string, trace, "",
          "Mooncake-format trace (JSON lines: timestamp ms, input_length, output_length, "
          "hash_ids); empty: a synthetic --scenario");
ABSL_FLAG(int64_t, max_requests, 0, "replay at most this many trace requests (0: all)");
ABSL_FLAG(std::string, scenario, "mixed",
          "synthetic workload: system-prompt, chat, agent, few-shot or mixed");
ABSL_FLAG(int64_t, requests, 1000, "synthetic: number of requests");
ABSL_FLAG(double, rate, 10, "synthetic: Poisson arrival rate, requests per second");
ABSL_FLAG(uint64_t, seed, 1, "synthetic workload and state-pool seed");
ABSL_FLAG(double, zipf, 1.0, "synthetic: Zipf exponent of prefix popularity (0: uniform)");
ABSL_FLAG(int64_t, population, 64,
          "synthetic: distinct system prompts / templates / conversations / agent sessions");
ABSL_FLAG(int64_t, block_tokens, 512, "tokens per block (the Mooncake trace's is 512)");
ABSL_FLAG(double, time_scale, 0,
          "multiplies arrival times and simulated prefill/decode times (0.1: ten times faster "
          "than real time); 0 runs as fast as the server answers");

// Model shape of the states.
ABSL_FLAG(int, layers, 4, "linear-attention layers per checkpoint");
ABSL_FLAG(int, heads, 4, "heads per layer");
ABSL_FLAG(int, dk, 128, "key dimension of a state");
ABSL_FLAG(int, dv, 128, "value dimension of a state");
ABSL_FLAG(std::string, kind, "gdn", "gdn or kda");
ABSL_FLAG(int, conv_channels, 0,
          "conv-state channels per layer (all heads; a multiple of --heads); 0: no conv state");
ABSL_FLAG(int, conv_width, 3, "conv-state width per channel (conv_kernel - 1)");
ABSL_FLAG(std::string, conv_dtype, "bf16", "conv-state element type: bf16, fp16 or fp32");
ABSL_FLAG(int, extra_bytes, 0, "opaque bytes per (layer, head) beside the states");
ABSL_FLAG(std::string, formats, "fp32,bf16,leap8,leap6,leap4",
          "storage formats to compare, in order: fp32, bf16, leap8, leap6, leap4");
ABSL_FLAG(int, pool_states, 32, "distinct real head states in the payload pool");
ABSL_FLAG(int, state_tokens, 256, "tokens of recurrence behind each pooled state");

// Engines.
ABSL_FLAG(int, engines, 1, "simulated engines (one client connection each)");
ABSL_FLAG(int, slots, 1, "concurrent requests per engine");
ABSL_FLAG(std::string, admission, "branch-points",
          "checkpoint admission: every-block, branch-points or last-block");
ABSL_FLAG(double, prefill_tokens_per_s, 0, "prefill speed; 0: the FLOP model below");
ABSL_FLAG(double, active_params, 3e9, "FLOP model: active parameters");
ABSL_FLAG(int, attention_layers, 12, "FLOP model: full-attention layers");
ABSL_FLAG(int, d_model, 2048, "FLOP model: hidden size");
ABSL_FLAG(double, peak_tflops, 989, "FLOP model: accelerator peak, TFLOP/s");
ABSL_FLAG(double, mfu, 0.4, "FLOP model: achieved fraction of the peak");
ABSL_FLAG(double, decode_tokens_per_s, 60, "decode speed of one request");
ABSL_FLAG(bool, keep, false, "leave each format's checkpoints in the server (no emptying)");
ABSL_FLAG(std::string, counters_file, "",
          "where the checked gets (verified, mismatched, missing) are kept up to date while the "
          "run goes on, for a client that may be killed (counter_file.h); empty: none");
ABSL_FLAG(std::string, gnuplot, "gnuplot", "the gnuplot program for the PNG plots");

namespace leapcache::load {
namespace {

constexpr char kProgram[] = "leapcache-load";

absl::Status MakeDirs(const std::string& path) {
  std::string prefix;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      prefix = path.substr(0, i);
      if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::InternalError(absl::StrCat("--out: cannot create ", prefix, ": ",
                                                std::strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::StatusOr<client::ModelShape> ModelFromFlags() {
  client::ModelShape m;
  m.linear_layers = absl::GetFlag(FLAGS_layers);
  m.total_heads = absl::GetFlag(FLAGS_heads);
  m.dk = absl::GetFlag(FLAGS_dk);
  m.dv = absl::GetFlag(FLAGS_dv);
  const std::string kind = absl::GetFlag(FLAGS_kind);
  if (kind == "gdn") {
    m.kind = client::StateKind::kGdn;
  } else if (kind == "kda") {
    m.kind = client::StateKind::kKda;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--kind must be gdn or kda (got \"", kind, "\")"));
  }
  if (m.linear_layers < 1 || m.linear_layers > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--layers must be in [1, 1024] (got ", m.linear_layers, ")"));
  }
  if (m.total_heads < 1 || m.total_heads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--heads must be in [1, 1024] (got ", m.total_heads, ")"));
  }
  if (const int channels = absl::GetFlag(FLAGS_conv_channels); channels != 0) {
    absl::StatusOr<client::ConvDType> dtype =
        client::ConvDTypeFromName(absl::GetFlag(FLAGS_conv_dtype));
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--conv_dtype: ", dtype.status().message()));
    }
    m.conv = client::ConvShape{channels, absl::GetFlag(FLAGS_conv_width), *dtype};
  }
  m.extra_bytes = absl::GetFlag(FLAGS_extra_bytes);
  return m;
}

struct Workload {
  std::vector<WorkloadRequest> requests;
  std::string description;
};

absl::StatusOr<Workload> WorkloadFromFlags() {
  Workload w;
  const std::string trace = absl::GetFlag(FLAGS_trace);
  if (!trace.empty()) {
    MooncakeTraceOptions o;
    o.block_tokens = absl::GetFlag(FLAGS_block_tokens);
    o.max_requests = absl::GetFlag(FLAGS_max_requests);
    if (o.max_requests < 0) return absl::InvalidArgumentError("--max_requests must be >= 0");
    LC_ASSIGN_OR_RETURN(w.requests, LoadMooncakeTrace(trace, o));
    w.description = absl::StrCat("Mooncake-format trace ", Basename(trace),
                                 o.max_requests > 0 ? absl::StrCat(" (first ", o.max_requests,
                                                                   " requests)")
                                                    : "");
    return w;
  }
  SyntheticOptions o;
  LC_ASSIGN_OR_RETURN(o.scenario, ParseScenario(absl::GetFlag(FLAGS_scenario)));
  o.requests = absl::GetFlag(FLAGS_requests);
  o.rate_per_s = absl::GetFlag(FLAGS_rate);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.zipf_s = absl::GetFlag(FLAGS_zipf);
  o.population = absl::GetFlag(FLAGS_population);
  o.block_tokens = absl::GetFlag(FLAGS_block_tokens);
  LC_ASSIGN_OR_RETURN(w.requests, GenerateSyntheticWorkload(o));
  w.description = absl::StrFormat(
      "synthetic %s workload (seed %d, Poisson %.3g req/s, Zipf s = %.2f over %d prompts/sessions)",
      ScenarioName(o.scenario), o.seed, o.rate_per_s, o.zipf_s, o.population);
  return w;
}

absl::StatusOr<RunnerOptions> RunnerFromFlags(const client::ModelShape& model) {
  RunnerOptions o;
  o.target = absl::GetFlag(FLAGS_server);
  o.tenant = absl::GetFlag(FLAGS_tenant);
  o.model = model;
  o.block_tokens = absl::GetFlag(FLAGS_block_tokens);
  LC_ASSIGN_OR_RETURN(o.admission, ParseAdmission(absl::GetFlag(FLAGS_admission)));
  o.compute.prefill_tokens_per_s = absl::GetFlag(FLAGS_prefill_tokens_per_s);
  o.compute.active_params = absl::GetFlag(FLAGS_active_params);
  o.compute.attention_layers = absl::GetFlag(FLAGS_attention_layers);
  o.compute.d_model = absl::GetFlag(FLAGS_d_model);
  o.compute.peak_flops = absl::GetFlag(FLAGS_peak_tflops) * 1e12;
  o.compute.mfu = absl::GetFlag(FLAGS_mfu);
  o.compute.decode_tokens_per_s = absl::GetFlag(FLAGS_decode_tokens_per_s);
  o.engines = absl::GetFlag(FLAGS_engines);
  o.slots_per_engine = absl::GetFlag(FLAGS_slots);
  o.time_scale = absl::GetFlag(FLAGS_time_scale);
  o.empty_store_after = !absl::GetFlag(FLAGS_keep);
  LC_RETURN_IF_ERROR(ValidateRunnerOptions(o));
  return o;
}

int Run(const std::string& command) {
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(st.message()).c_str());
    return 1;
  };
  const std::string out_dir = absl::GetFlag(FLAGS_out);
  if (out_dir.empty()) return fail(absl::InvalidArgumentError("--out is required"));
  absl::StatusOr<client::ModelShape> model = ModelFromFlags();
  if (!model.ok()) return fail(model.status());
  absl::StatusOr<std::vector<LoadFormat>> formats = ParseFormats(absl::GetFlag(FLAGS_formats));
  if (!formats.ok()) return fail(formats.status());
  absl::StatusOr<RunnerOptions> runner = RunnerFromFlags(*model);
  if (!runner.ok()) return fail(runner.status());
  absl::StatusOr<Workload> workload = WorkloadFromFlags();
  if (!workload.ok()) return fail(workload.status());
  if (absl::Status st = MakeDirs(out_dir); !st.ok()) return fail(st);
  {
    // Fail fast on an unreachable server, before the payload pool is built.
    client::ClientOptions options;
    options.target = runner->target;
    absl::StatusOr<std::unique_ptr<client::Client>> probe = client::Client::Create(options);
    if (!probe.ok()) return fail(probe.status());
    absl::StatusOr<client::ServerStats> stats = (*probe)->Stats();
    if (!stats.ok()) return fail(stats.status());
    for (const client::TierStats& t : stats->tiers) {
      std::printf("%s: server %s, tier %s: %.1f MiB in %llu-byte pages\n", kProgram,
                  runner->target.c_str(), t.name.c_str(), t.capacity_bytes / 1048576.0,
                  static_cast<unsigned long long>(t.page_bytes));
    }
  }

  StatePoolOptions pool_options;
  pool_options.distinct_states = absl::GetFlag(FLAGS_pool_states);
  pool_options.trajectory_tokens = absl::GetFlag(FLAGS_state_tokens);
  pool_options.seed = absl::GetFlag(FLAGS_seed);
  const absl::Time pool_start = absl::Now();
  absl::StatusOr<std::unique_ptr<StatePool>> pool = StatePool::Build(*model, *formats, pool_options);
  if (!pool.ok()) return fail(pool.status());
  std::printf("%s: %zu requests; payload pool of %d states built in %.1f s\n", kProgram,
              workload->requests.size(), pool_options.distinct_states,
              absl::ToDoubleSeconds(absl::Now() - pool_start));
  std::fflush(stdout);

  LoadReport report;
  report.command = command;
  report.workload = workload->description;
  report.workload_requests = workload->requests.size();
  report.payloads = (*pool)->Description();
  report.method =
      "each format runs the same requests in order against the same server, in its own "
      "namespace, and the store is emptied (every checkpoint the run put deleted) before the "
      "next format, so all formats see the same memory budget, page size and eviction policy; "
      "resident checkpoints are the server's count at the end of each run";
  report.server_target = runner->target;
  report.model = *model;
  report.block_tokens = runner->block_tokens;
  report.admission = AdmissionName(runner->admission);
  report.engines = runner->engines;
  report.slots_per_engine = runner->slots_per_engine;
  report.time_scale = runner->time_scale;

  ProgressLine progress(isatty(STDOUT_FILENO) == 1);
  std::unique_ptr<CounterFile> counters;
  if (const std::string path = absl::GetFlag(FLAGS_counters_file); !path.empty()) {
    counters = std::make_unique<CounterFile>(path);
    if (!counters->Flush()) {
      return fail(absl::InvalidArgumentError(absl::StrCat("cannot write --counters_file ", path)));
    }
    runner->counter_file = counters.get();
  }
  for (size_t f = 0; f < formats->size(); ++f) {
    absl::StatusOr<FormatRun> run =
        RunFormat(workload->requests, **pool, f, (*formats)[f], *runner, progress);
    if (!run.ok()) return fail(run.status());
    std::printf("%s: %-6s %8.1f req/s  hit %5.1f%%  token hit %5.1f%%  resident %llu  "
                "evictions %llu  (%.1f s)\n",
                kProgram, run->label.c_str(), RequestsPerSecond(*run), 100 * RequestHitRate(*run),
                100 * TokenHitRate(*run),
                static_cast<unsigned long long>(run->resident_checkpoints),
                static_cast<unsigned long long>(
                    Delta(run->server.before.evictions, run->server.after.evictions)),
                run->wall_s);
    std::fflush(stdout);
    report.runs.push_back(*std::move(run));
  }
  if (counters != nullptr) counters->Flush();

  const std::vector<std::string> violations = CheckReport(report);
  if (absl::Status st = WriteFile(out_dir + "/report.json", ReportToJson(report, violations));
      !st.ok()) {
    return fail(st);
  }
  if (absl::Status st = WriteFile(out_dir + "/report.md", ReportToMarkdown(report, violations));
      !st.ok()) {
    return fail(st);
  }
  std::printf("\n%s\n", HeadlineTable(report).c_str());
  for (const std::string& v : violations) std::printf("%s: inconsistent: %s\n", kProgram, v.c_str());
  std::printf("%s: report in %s/report.md and report.json (%s)\n", kProgram, out_dir.c_str(),
              violations.empty() ? "self-consistent" : "NOT self-consistent");
  const absl::Status plots = WritePlots(report, out_dir, absl::GetFlag(FLAGS_gnuplot));
  if (absl::GetFlag(FLAGS_check) && !violations.empty()) return 1;
  if (!plots.ok()) {
    std::fprintf(stderr, "%s: plots: %s\n", kProgram, std::string(plots.message()).c_str());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace leapcache::load

int main(int argc, char** argv) {
  leapcache::base::StopMutexDeadlockDetection();
  absl::FlagsUsageConfig usage;
  // --help lists this tool's flags only, not those of the libraries linked in.
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "load/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "replays a prefix-sharing workload against a leapcache server once per storage format and "
      "reports hit rates, resident checkpoints, latencies and memory.\n"
      "  leapcache-load --server=HOST:PORT (--trace=FILE | --scenario=NAME) --out=DIR [flags]");
  std::vector<std::string> args(argv, argv + argc);
  absl::ParseCommandLine(argc, argv);
  args[0] = "leapcache-load";
  return leapcache::load::Run(absl::StrJoin(args, " "));
}
