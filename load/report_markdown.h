// The load report as Markdown: the headline table (at one memory budget, per format: resident
// checkpoints, hit rates, memory saved against FP32), then traffic, latency and server memory.
#pragma once

#include <string>
#include <vector>

#include "load/load_report.h"

namespace leapcache::load {

// The headline table alone (README and the report share it).
std::string HeadlineTable(const LoadReport& report);
std::string ReportToMarkdown(const LoadReport& report, const std::vector<std::string>& violations);

// FP32 bytes of one checkpoint's states (layers x heads x dk x dv x 4), the reference of "saved".
uint64_t Fp32StateBytes(const client::ModelShape& model);

}  // namespace leapcache::load
