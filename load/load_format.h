// The storage formats a load test compares, by short label: fp32, bf16 (per-step baselines) and
// leap8, leap6, leap4 (the window format at 8, 6 and 4 bits, gpu/FORMAT.md presets).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/format/format.h"
#include "leapcache/client.h"

namespace leapcache::load {

struct LoadFormat {
  std::string label;
  client::StorageFormat format;
};

// A comma-separated list of labels; INVALID_ARGUMENT naming an unknown or repeated label.
absl::StatusOr<std::vector<LoadFormat>> ParseFormats(const std::string& list);

// The blob spec of `format` for the model shape.
BlobSpec ToBlobSpec(const client::ModelShape& model, const client::StorageFormat& format);

}  // namespace leapcache::load
