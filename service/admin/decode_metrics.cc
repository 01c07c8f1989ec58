#include "service/admin/decode_metrics.h"

namespace leapcache::server {

DecodeMetrics::DecodeMetrics(metrics::Registry* r, uint64_t memory_budget)
    : sessions_(r->AddGauge("leapcache_decode_sessions", "Open attached-decode sessions.").Add({})),
      state_bytes_(r->AddGauge("leapcache_decode_state_bytes",
                               "Live-state memory held by attached-decode sessions.")
                       .Add({})),
      step_channels_(r->AddGauge("leapcache_decode_step_channels",
                                 "Open decode step channels (same-host engines' shared memory).")
                         .Add({})) {
  r->AddGauge("leapcache_decode_memory_budget_bytes", "Live-state memory budget of decode.")
      .Add({})
      .Set(static_cast<double>(memory_budget));
  struct Field {
    const char* name;
    const char* help;
    uint64_t decode::TableStats::*field;
  };
  const Field fields[] = {
      {"leapcache_decode_sessions_opened_total", "Decode sessions opened.",
       &decode::TableStats::opened},
      {"leapcache_decode_sessions_closed_total", "Decode sessions closed by their engine.",
       &decode::TableStats::closed},
      {"leapcache_decode_sessions_reaped_total", "Decode sessions closed after the idle timeout.",
       &decode::TableStats::reaped},
      {"leapcache_decode_sessions_refused_total",
       "Decode sessions refused for memory, the session limit or the backend.",
       &decode::TableStats::refused},
      {"leapcache_decode_steps_total", "Layer steps run by attached decode.",
       &decode::TableStats::steps},
      {"leapcache_decode_request_steps_total",
       "Requests advanced by one layer-token by attached decode (padding excluded).",
       &decode::TableStats::request_steps},
  };
  absl::MutexLock lock(&mu_);
  for (const Field& f : fields)
    counters_.push_back({&r->AddCounter(f.name, f.help).Add({}), f.field});
}

void DecodeMetrics::Update(const decode::TableStats& s, int step_channels) {
  sessions_.Set(static_cast<double>(s.sessions));
  step_channels_.Set(static_cast<double>(step_channels));
  state_bytes_.Set(static_cast<double>(s.state_bytes));
  absl::MutexLock lock(&mu_);
  for (Mirror& m : counters_) {
    const uint64_t now = s.*(m.field);
    if (now > m.last) m.counter->Increment(static_cast<double>(now - m.last));
    m.last = std::max(m.last, now);
  }
}

}  // namespace leapcache::server
