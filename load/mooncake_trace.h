// Reader of the Mooncake trace format (kvcache-ai/Mooncake, FAST'25 trace release): one JSON
// object per line,
//   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}
// with the arrival time in milliseconds, prompt and output lengths in tokens, and one id per
// prompt block of `block_tokens` (512 in the release), the last block possibly partial.
//
// The reader is strict: a line that is not such an object, lacks a field, has a negative or
// non-integer length, or whose hash_ids do not cover its input_length is an INVALID_ARGUMENT
// naming the line and the field, and nothing is returned. Unknown fields are ignored (later
// releases add some). Blank lines are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "load/workload.h"

namespace leapcache::load {

struct MooncakeTraceOptions {
  int64_t block_tokens = 512;
  // Read at most this many requests (0: all).
  int64_t max_requests = 0;
};

// One line; `line_number` (1-based) only names the line in errors.
absl::StatusOr<WorkloadRequest> ParseMooncakeLine(std::string_view line, int64_t line_number,
                                                  const MooncakeTraceOptions& options);

// Every request of the text (lines separated by '\n'), in file order; arrival times must not
// decrease. `source` names the text in errors.
absl::StatusOr<std::vector<WorkloadRequest>> ParseMooncakeTrace(std::string_view text,
                                                                const std::string& source,
                                                                const MooncakeTraceOptions& options);

// The same from a file (NOT_FOUND if it cannot be read).
absl::StatusOr<std::vector<WorkloadRequest>> LoadMooncakeTrace(const std::string& path,
                                                               const MooncakeTraceOptions& options);

}  // namespace leapcache::load
