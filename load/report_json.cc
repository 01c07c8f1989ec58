#include "load/report_json.h"

#include "load/json_writer.h"

namespace leapcache::load {
namespace {

void WriteLatency(JsonWriter& w, const char* name, const LatencySummary& s) {
  w.Key(name).BeginObject();
  w.Key("count").Uint(s.count);
  w.Key("mean_us").Double(s.mean_us);
  w.Key("p50_us").Double(s.p50_us);
  w.Key("p90_us").Double(s.p90_us);
  w.Key("p99_us").Double(s.p99_us);
  w.Key("max_us").Double(s.max_us);
  w.EndObject();
}

void WriteServerStats(JsonWriter& w, const char* name, const client::ServerStats& s) {
  w.Key(name).BeginObject();
  w.Key("tiers").BeginArray();
  for (const client::TierStats& t : s.tiers) {
    w.BeginObject();
    w.Key("name").String(t.name);
    w.Key("page_bytes").Uint(t.page_bytes);
    w.Key("capacity_bytes").Uint(t.capacity_bytes);
    w.Key("used_bytes").Uint(t.used_bytes);
    w.Key("reserved_bytes").Uint(t.reserved_bytes);
    w.Key("checkpoints").Uint(t.checkpoints);
    w.EndObject();
  }
  w.EndArray();
  w.Key("memory").BeginArray();
  for (const client::FormatMemoryStats& m : s.memory) {
    w.BeginObject();
    w.Key("tier").String(m.tier);
    w.Key("format").String(m.format);
    w.Key("blobs").Uint(m.blobs);
    w.Key("physical_bytes").Uint(m.physical_bytes);
    w.Key("stored_bytes").Uint(m.stored_bytes);
    w.Key("fp32_equivalent_bytes").Uint(m.fp32_equivalent_bytes);
    w.EndObject();
  }
  w.EndArray();
  const std::pair<const char*, uint64_t> counters[] = {
      {"checkpoints", s.checkpoints},     {"lookups", s.lookups},
      {"lookup_hits", s.lookup_hits},     {"lookup_misses", s.lookup_misses},
      {"lookup_hit_tokens", s.lookup_hit_tokens}, {"lookup_miss_tokens", s.lookup_miss_tokens},
      {"puts_committed", s.puts_committed}, {"puts_refused", s.puts_refused},
      {"puts_rejected", s.puts_rejected}, {"gets", s.gets},
      {"get_hits", s.get_hits},           {"get_misses", s.get_misses},
      {"deletes", s.deletes},             {"evictions", s.evictions},
      {"spills", s.spills},               {"promotions", s.promotions},
      {"bytes_in", s.bytes_in},           {"bytes_out", s.bytes_out}};
  for (const auto& [k, v] : counters) w.Key(k).Uint(v);
  w.EndObject();
}

}  // namespace

std::string ReportToJson(const LoadReport& report, const std::vector<std::string>& violations) {
  JsonWriter w;
  w.BeginObject();
  w.Key("tool").String("leapcache-load");
  w.Key("command").String(report.command);
  w.Key("workload").String(report.workload);
  w.Key("workload_requests").Uint(report.workload_requests);
  w.Key("payloads").String(report.payloads);
  w.Key("method").String(report.method);
  w.Key("server").String(report.server_target);
  w.Key("model").BeginObject();
  w.Key("linear_layers").Int(report.model.linear_layers);
  w.Key("heads").Int(report.model.total_heads);
  w.Key("dk").Int(report.model.dk);
  w.Key("dv").Int(report.model.dv);
  w.Key("kind").String(report.model.kind == client::StateKind::kGdn ? "gdn" : "kda");
  w.EndObject();
  w.Key("block_tokens").Int(report.block_tokens);
  w.Key("admission").String(report.admission);
  w.Key("engines").Int(report.engines);
  w.Key("slots_per_engine").Int(report.slots_per_engine);
  w.Key("time_scale").Double(report.time_scale);
  w.Key("consistent").Bool(violations.empty());
  w.Key("violations").BeginArray();
  for (const std::string& v : violations) w.String(v);
  w.EndArray();
  w.Key("runs").BeginArray();
  for (const FormatRun& r : report.runs) {
    const ClientCounters& c = r.counters;
    w.BeginObject();
    w.Key("format").String(r.label);
    w.Key("server_format").String(r.format_label);
    w.Key("blob_bytes").Uint(r.blob_bytes);
    w.Key("checkpoint_bytes").Uint(r.checkpoint_bytes);
    w.Key("payload_relative_error").Double(r.payload_relative_error);
    w.Key("budget_bytes").Uint(r.budget_bytes);
    w.Key("headline").BeginObject();
    w.Key("request_hit_rate").Double(RequestHitRate(r));
    w.Key("token_hit_rate").Double(TokenHitRate(r));
    w.Key("resident_checkpoints").Uint(r.resident_checkpoints);
    w.Key("evictions").Uint(Delta(r.server.before.evictions, r.server.after.evictions));
    w.Key("requests_per_s").Double(RequestsPerSecond(r));
    w.Key("prefill_s").Double(c.prefill_s);
    w.Key("prefill_uncached_s").Double(c.prefill_uncached_s);
    w.EndObject();
    w.Key("wall_s").Double(r.wall_s);
    w.Key("client").BeginObject();
    const std::pair<const char*, uint64_t> counters[] = {
        {"requests", c.requests},       {"requests_with_blocks", c.requests_with_blocks},
        {"lookups", c.lookups},         {"lookup_hits", c.lookup_hits},
        {"input_tokens", c.input_tokens}, {"lookup_tokens", c.lookup_tokens},
        {"hit_tokens", c.hit_tokens},   {"gets", c.gets},
        {"get_bytes", c.get_bytes},     {"gets_verified", c.gets_verified},
        {"gets_mismatched", c.gets_mismatched}, {"gets_missing", c.gets_missing},
        {"puts", c.puts},               {"put_bytes", c.put_bytes},
        {"puts_refused", c.puts_refused}, {"puts_duplicate", c.puts_duplicate},
        {"errors", c.errors}};
    for (const auto& [k, v] : counters) w.Key(k).Uint(v);
    w.Key("first_error").String(c.first_error);
    w.Key("decode_s").Double(c.decode_s);
    w.Key("queue_delay_s_max").Double(c.queue_delay_s_max);
    w.EndObject();
    w.Key("latency").BeginObject();
    WriteLatency(w, "lookup", r.lookup_latency);
    WriteLatency(w, "get", r.get_latency);
    WriteLatency(w, "put", r.put_latency);
    WriteLatency(w, "request", r.request_latency);
    w.EndObject();
    WriteServerStats(w, "server_before", r.server.before);
    WriteServerStats(w, "server_after", r.server.after);
    w.Key("store_emptied").Bool(r.store_emptied);
    w.Key("emptied_checkpoints").Uint(r.emptied_checkpoints);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace leapcache::load
