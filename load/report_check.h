// The self-consistency check of a load report: what must hold whatever the workload, the
// format or the server's eviction did. Each violation is one sentence naming the run and the
// numbers; an empty list means the report is consistent.
//
//  - counts: hits <= lookups <= requests; hit tokens <= tokens looked up <= input tokens; every
//    hit fetched (a get, or an eviction between lookup and get) and every get verified
//    byte-exact, none mismatched; no failed calls;
//  - bytes: put bytes = puts x checkpoint size, get bytes = gets x checkpoint size; the server
//    received at least the put bytes and sent at least the get bytes;
//  - server: its lookup and hit counters moved by exactly the client's (when it served no one
//    else), every tier's used bytes <= its capacity, resident checkpoints x checkpoint size <=
//    the primary budget plus the spill budget;
//  - the store was emptied after the run (all resident checkpoints deleted).
#pragma once

#include <string>
#include <vector>

#include "load/load_report.h"

namespace leapcache::load {

std::vector<std::string> CheckFormatRun(const FormatRun& run);
std::vector<std::string> CheckReport(const LoadReport& report);

}  // namespace leapcache::load
