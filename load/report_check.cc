#include "load/report_check.h"

#include "absl/strings/str_cat.h"

namespace leapcache::load {
namespace {

class Checker {
 public:
  explicit Checker(const FormatRun& r) : r_(r) {}
  // Adds a violation unless `ok`.
  void Expect(bool ok, const std::string& what) {
    if (!ok) out_.push_back(absl::StrCat(r_.label, ": ", what));
  }
  std::vector<std::string> Take() { return std::move(out_); }

 private:
  const FormatRun& r_;
  std::vector<std::string> out_;
};

}  // namespace

std::vector<std::string> CheckFormatRun(const FormatRun& r) {
  Checker ck(r);
  const ClientCounters& c = r.counters;
  ck.Expect(c.lookup_hits <= c.lookups,
            absl::StrCat("hits ", c.lookup_hits, " > lookups ", c.lookups));
  ck.Expect(c.lookups == c.requests_with_blocks,
            absl::StrCat("lookups ", c.lookups, " != requests with a full block ",
                         c.requests_with_blocks));
  ck.Expect(c.requests_with_blocks <= c.requests,
            absl::StrCat("requests with blocks ", c.requests_with_blocks, " > requests ", c.requests));
  ck.Expect(c.hit_tokens <= c.lookup_tokens,
            absl::StrCat("hit tokens ", c.hit_tokens, " > tokens looked up ", c.lookup_tokens));
  ck.Expect(c.lookup_tokens <= c.input_tokens,
            absl::StrCat("tokens looked up ", c.lookup_tokens, " > input tokens ", c.input_tokens));
  ck.Expect(c.gets + c.gets_missing + c.errors >= c.lookup_hits,
            absl::StrCat("hits ", c.lookup_hits, " not all fetched (gets ", c.gets, ", missing ",
                         c.gets_missing, ")"));
  ck.Expect(c.gets_verified == c.gets,
            absl::StrCat("gets verified byte-exact ", c.gets_verified, " != gets ", c.gets));
  ck.Expect(c.gets_mismatched == 0, absl::StrCat(c.gets_mismatched, " gets returned other bytes"));
  ck.Expect(c.errors == 0, absl::StrCat(c.errors, " calls failed (first: ", c.first_error, ")"));
  ck.Expect(c.put_bytes == c.puts * r.checkpoint_bytes,
            absl::StrCat("put bytes ", c.put_bytes, " != puts ", c.puts, " x ", r.checkpoint_bytes));
  ck.Expect(c.get_bytes == c.gets * r.checkpoint_bytes,
            absl::StrCat("get bytes ", c.get_bytes, " != gets ", c.gets, " x ", r.checkpoint_bytes));
  ck.Expect(c.gets_verified > 0 || c.hit_tokens == 0,
            absl::StrCat("hit tokens ", c.hit_tokens, " with no verified get"));

  const client::ServerStats& b = r.server.before;
  const client::ServerStats& a = r.server.after;
  ck.Expect(Delta(b.bytes_in, a.bytes_in) >= c.put_bytes,
            absl::StrCat("server received ", Delta(b.bytes_in, a.bytes_in), " bytes < put bytes ",
                         c.put_bytes));
  ck.Expect(Delta(b.bytes_out, a.bytes_out) >= c.get_bytes,
            absl::StrCat("server sent ", Delta(b.bytes_out, a.bytes_out), " bytes < get bytes ",
                         c.get_bytes));
  ck.Expect(Delta(b.lookups, a.lookups) >= c.lookups,
            absl::StrCat("server counted ", Delta(b.lookups, a.lookups), " lookups < client's ",
                         c.lookups));
  ck.Expect(Delta(b.lookup_hits, a.lookup_hits) >= c.lookup_hits,
            absl::StrCat("server counted ", Delta(b.lookup_hits, a.lookup_hits),
                         " hits < client's ", c.lookup_hits));
  ck.Expect(Delta(b.puts_committed, a.puts_committed) >= c.puts,
            absl::StrCat("server committed ", Delta(b.puts_committed, a.puts_committed),
                         " puts < client's ", c.puts));
  uint64_t capacity = 0;
  for (const client::TierStats& t : a.tiers) {
    capacity += t.capacity_bytes;
    ck.Expect(t.used_bytes <= t.capacity_bytes,
              absl::StrCat("tier ", t.name, " uses ", t.used_bytes, " bytes > capacity ",
                           t.capacity_bytes));
  }
  ck.Expect(!a.tiers.empty(), "server reported no memory tier");
  ck.Expect(r.resident_checkpoints * r.checkpoint_bytes <= capacity,
            absl::StrCat(r.resident_checkpoints, " resident checkpoints x ", r.checkpoint_bytes,
                         " bytes > memory ", capacity));
  ck.Expect(r.resident_checkpoints <= c.puts,
            absl::StrCat("resident checkpoints ", r.resident_checkpoints, " > puts ", c.puts));
  if (r.store_emptied) {
    ck.Expect(r.emptied_checkpoints == r.resident_checkpoints,
              absl::StrCat("deleted ", r.emptied_checkpoints, " checkpoints after the run, ",
                           r.resident_checkpoints, " were resident"));
  }
  return ck.Take();
}

std::vector<std::string> CheckReport(const LoadReport& report) {
  std::vector<std::string> out;
  if (report.runs.empty()) out.push_back("report has no runs");
  for (const FormatRun& r : report.runs) {
    for (std::string& v : CheckFormatRun(r)) out.push_back(std::move(v));
    if (r.counters.requests != report.workload_requests) {
      out.push_back(absl::StrCat(r.label, ": ran ", r.counters.requests, " requests of ",
                                 report.workload_requests));
    }
  }
  return out;
}

}  // namespace leapcache::load
