#include "service/core/stats.h"

namespace leapcache::core {

void CopyCounters(const StoreCounters& c, StoreStats* out) {
  out->lookups = c.lookups.value();
  out->lookup_hits = c.lookup_hits.value();
  out->lookup_misses = c.lookup_misses.value();
  out->lookup_hit_tokens = c.lookup_hit_tokens.value();
  out->lookup_miss_tokens = c.lookup_miss_tokens.value();
  out->puts_reserved = c.puts_reserved.value();
  out->puts_refused = c.puts_refused.value();
  out->puts_committed = c.puts_committed.value();
  out->puts_rejected = c.puts_rejected.value();
  out->puts_aborted = c.puts_aborted.value();
  out->puts_expired = c.puts_expired.value();
  out->gets = c.gets.value();
  out->get_hits = c.get_hits.value();
  out->get_misses = c.get_misses.value();
  out->deletes = c.deletes.value();
  out->evictions = c.evictions.value();
  out->spills = c.spills.value();
  out->promotions = c.promotions.value();
  out->bytes_in = c.bytes_in.value();
  out->bytes_out = c.bytes_out.value();
}

}  // namespace leapcache::core
