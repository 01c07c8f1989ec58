// Conversion between the client's public types (include/leapcache/client.h) and the
// leapcache.v1 messages. Internal to the client library.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "leapcache/client.h"
#include "leapcache/v1/checkpoint.pb.h"
#include "leapcache/v1/namespace.pb.h"
#include "leapcache/v1/stats.pb.h"
#include "leapcache/v1/types.pb.h"

namespace leapcache::client {

std::string HashBytes(const BlockHash& hash);
void ToProto(const NamespaceSpec& spec, v1::RegisterNamespaceRequest* out);
// Sets `out` unless heads is the default (all heads).
void ToProto(const HeadRange& heads, bool* present, v1::HeadRange* out);
// Sets `out` (and *present) unless `layers` is all layers. REQUIRES: CheckLayers(layers).
void ToProto(const LayerRange& layers, bool* present, v1::LayerRange* out);
// INVALID_ARGUMENT for a layer range with a negative bound (the wire's are unsigned); the
// server checks the rest against the namespace.
absl::Status CheckLayers(const LayerRange& layers);
void ToProto(const Position& position, v1::Position* out);
void ToProto(const DenseEncoding& dense, v1::DenseEncoding* out);
// The lookup's chain, heads, depth and block size (the caller sets namespace id and tag).
void ToProto(const LookupRequest& request, v1::LookupRequest* out);

Position FromProto(const v1::Position& position);
HeadRange FromProto(const v1::HeadRange& heads);
StorageFormat FromProto(const v1::StorageFormat& format);
// INVALID_ARGUMENT for enum values this client does not know.
absl::StatusOr<DenseEncoding> FromProto(const v1::DenseEncoding& dense);
ServerStats FromProto(const v1::StatsResponse& stats);
LookupResult FromProto(const v1::LookupResponse& response);
// A LookupBatch answer of `lookups` lookups: each result or the status it carries. INTERNAL if
// the answer holds another number of results.
absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> FromProto(
    const v1::LookupBatchResponse& response, int lookups);

}  // namespace leapcache::client
