#include "load/report_markdown.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace leapcache::load {
namespace {

std::string Percent(double v) { return absl::StrFormat("%.1f%%", 100.0 * v); }
std::string Mib(uint64_t bytes) { return absl::StrFormat("%.1f", bytes / 1048576.0); }

const FormatRun* FindRun(const LoadReport& report, const std::string& label) {
  for (const FormatRun& r : report.runs) {
    if (r.label == label) return &r;
  }
  return nullptr;
}

}  // namespace

uint64_t Fp32StateBytes(const client::ModelShape& m) {
  return static_cast<uint64_t>(m.linear_layers) * m.total_heads * m.dk * m.dv * 4;
}

std::string HeadlineTable(const LoadReport& report) {
  const uint64_t fp32 = Fp32StateBytes(report.model);
  const FormatRun* base = FindRun(report, "fp32");
  std::string md =
      "| format | checkpoint bytes | memory saved vs fp32 | budget MiB | resident checkpoints | "
      "x fp32's | request hit rate | token hit rate | prefill time saved | evictions |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const FormatRun& r : report.runs) {
    const double saved = fp32 == 0 ? 0 : 1.0 - static_cast<double>(r.checkpoint_bytes) / fp32;
    const std::string vs_base =
        base != nullptr && base->resident_checkpoints > 0
            ? absl::StrFormat("%.2fx", static_cast<double>(r.resident_checkpoints) /
                                           base->resident_checkpoints)
            : "-";
    const double prefill_saved =
        r.counters.prefill_uncached_s > 0
            ? 1.0 - r.counters.prefill_s / r.counters.prefill_uncached_s
            : 0;
    absl::StrAppend(&md, "| ", r.label, " | ", r.checkpoint_bytes, " | ", Percent(saved), " | ",
                    Mib(r.budget_bytes), " | ", r.resident_checkpoints, " | ", vs_base, " | ",
                    Percent(RequestHitRate(r)), " | ", Percent(TokenHitRate(r)), " | ",
                    Percent(prefill_saved), " | ",
                    Delta(r.server.before.evictions, r.server.after.evictions), " |\n");
  }
  return md;
}

std::string ReportToMarkdown(const LoadReport& report, const std::vector<std::string>& violations) {
  std::string md = "# leapcache-load report\n\n";
  absl::StrAppend(&md, "Command: `", report.command, "`\n\n");
  absl::StrAppend(&md, "- Workload: ", report.workload, " (", report.workload_requests,
                  " requests, ", report.block_tokens, "-token blocks)\n");
  absl::StrAppend(&md, "- Model states: ", report.model.linear_layers, " linear layers x ",
                  report.model.total_heads, " heads x ", report.model.dk, "x", report.model.dv,
                  " ", report.model.kind == client::StateKind::kGdn ? "GDN" : "KDA", " (",
                  Mib(Fp32StateBytes(report.model)), " MiB per checkpoint in FP32)\n");
  absl::StrAppend(&md, "- Payloads: ", report.payloads, "\n");
  absl::StrAppend(&md, "- Engines: ", report.engines, " x ", report.slots_per_engine,
                  " slots, admission ", report.admission, ", time scale ", report.time_scale,
                  report.time_scale == 0 ? " (as fast as the server answers)" : "", "\n");
  absl::StrAppend(&md, "- Method: ", report.method, "\n");
  absl::StrAppend(&md, "- Self-consistency: ",
                  violations.empty() ? "all checks hold" : "VIOLATED", "\n");
  for (const std::string& v : violations) absl::StrAppend(&md, "  - ", v, "\n");

  absl::StrAppend(&md, "\n## At one memory budget\n\n", HeadlineTable(report));
  absl::StrAppend(&md,
                  "\n\"memory saved\" compares a checkpoint's stored bytes (blobs with headers) "
                  "with its states in FP32; \"x fp32's\" is resident checkpoints over the fp32 "
                  "run's; the request hit rate is hits over all requests (a prompt shorter "
                  "than a block cannot hit), the token hit rate prompt tokens restored from a "
                  "verified checkpoint over all prompt tokens; prefill time is the engine "
                  "model's.\n");

  absl::StrAppend(&md,
                  "\n## Traffic and latency\n\n"
                  "| format | requests/s | lookup p50 / p99 us | get p50 / p99 us | put p50 / p99 "
                  "us | puts | put MiB | gets (verified) | get MiB | puts refused | wall s |\n"
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const FormatRun& r : report.runs) {
    const ClientCounters& c = r.counters;
    absl::StrAppend(
        &md, "| ", r.label, " | ", absl::StrFormat("%.1f", RequestsPerSecond(r)), " | ",
        absl::StrFormat("%.0f / %.0f", r.lookup_latency.p50_us, r.lookup_latency.p99_us), " | ",
        absl::StrFormat("%.0f / %.0f", r.get_latency.p50_us, r.get_latency.p99_us), " | ",
        absl::StrFormat("%.0f / %.0f", r.put_latency.p50_us, r.put_latency.p99_us), " | ", c.puts,
        " | ", Mib(c.put_bytes), " | ", c.gets, " (", c.gets_verified, ") | ", Mib(c.get_bytes),
        " | ", c.puts_refused, " | ", absl::StrFormat("%.1f", r.wall_s), " |\n");
  }

  absl::StrAppend(&md,
                  "\n## Server memory after each run\n\n"
                  "| format | tier | capacity MiB | used MiB | checkpoints | evictions | spills |\n"
                  "|---|---|---:|---:|---:|---:|---:|\n");
  for (const FormatRun& r : report.runs) {
    for (const client::TierStats& t : r.server.after.tiers) {
      absl::StrAppend(&md, "| ", r.label, " | ", t.name, " | ", Mib(t.capacity_bytes), " | ",
                      Mib(t.used_bytes), " | ", t.checkpoints, " | ",
                      Delta(r.server.before.evictions, r.server.after.evictions), " | ",
                      Delta(r.server.before.spills, r.server.after.spills), " |\n");
    }
  }
  absl::StrAppend(&md, "\nPlots: `headline.png` (hit rates and resident checkpoints per format), "
                       "`latency.png` (call latency percentiles).\n");
  return md;
}

}  // namespace leapcache::load
