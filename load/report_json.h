// The load report as JSON: settings, then one object per format with the client's counters,
// latency summaries, the server's Stats before and after, and the derived headline numbers.
#pragma once

#include <string>
#include <vector>

#include "load/load_report.h"

namespace leapcache::load {

// `violations`: the consistency check's findings, recorded in the report ("consistent": true
// when empty).
std::string ReportToJson(const LoadReport& report, const std::vector<std::string>& violations);

}  // namespace leapcache::load
