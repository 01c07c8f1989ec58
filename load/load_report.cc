#include "load/load_report.h"

namespace leapcache::load {

double RequestHitRate(const FormatRun& r) {
  return r.counters.requests == 0
             ? 0
             : static_cast<double>(r.counters.lookup_hits) / r.counters.requests;
}

double TokenHitRate(const FormatRun& r) {
  return r.counters.input_tokens == 0
             ? 0
             : static_cast<double>(r.counters.hit_tokens) / r.counters.input_tokens;
}

double RequestsPerSecond(const FormatRun& r) {
  return r.wall_s <= 0 ? 0 : static_cast<double>(r.counters.requests) / r.wall_s;
}

uint64_t Delta(uint64_t before, uint64_t after) { return after >= before ? after - before : 0; }

uint64_t TierUsedBytes(const client::ServerStats& s, const std::string& name) {
  for (const client::TierStats& t : s.tiers) {
    if (t.name == name) return t.used_bytes;
  }
  return 0;
}

}  // namespace leapcache::load
