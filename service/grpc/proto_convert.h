// Decoding of leapcache.v1 request fields into the cache core's types, and encoding of core
// results into responses. Decoding checks what only the wire can get wrong (a hash that is not
// 32 bytes, a chain not a multiple of 32 bytes, an unknown or unspecified enum value, a number
// too large for the core's type) with INVALID_ARGUMENT naming the field; everything else (ranges,
// shapes, formats) is the core's to check, so each rule lives in one place.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "leapcache/v1/checkpoint.pb.h"
#include "leapcache/v1/namespace.pb.h"
#include "leapcache/v1/stats.pb.h"
#include "leapcache/v1/types.pb.h"
#include "service/core/checkpoint_store.h"
#include "service/core/namespace_registry.h"
#include "service/core/stats.h"
#include "service/core/types.h"
#include "service/facade/checkpoint_reader.h"
#include "service/compute/dense_state.h"

namespace leapcache::server {

absl::StatusOr<core::BlockHash> HashFromProto(const std::string& bytes, absl::string_view field);
// Concatenated 32-byte hashes. The core checks the count (1..65536).
absl::StatusOr<std::vector<core::BlockHash>> ChainFromProto(const std::string& bytes);
absl::StatusOr<core::NamespaceSpec> NamespaceSpecFromProto(
    const v1::RegisterNamespaceRequest& request);
// `present` false: all `total_heads` heads.
absl::StatusOr<core::HeadRange> HeadsFromProto(bool present, const v1::HeadRange& heads,
                                               int total_heads);
// `present` false: nullopt (every layer). The reader checks the range against the namespace.
absl::StatusOr<std::optional<LayerRange>> LayersFromProto(bool present,
                                                          const v1::LayerRange& layers);
absl::StatusOr<core::Position> PositionFromProto(const v1::Position& position);
absl::StatusOr<compute::DenseFormat> DenseFromProto(const v1::DenseEncoding& dense);

void PositionToProto(const core::Position& position, v1::Position* out);
void HeadsToProto(const core::HeadRange& heads, v1::HeadRange* out);
void FormatToProto(const BlobSpec& format, v1::StorageFormat* out);
v1::StateKind KindToProto(StateKind kind);
void DenseToProto(const compute::DenseFormat& dense, v1::DenseEncoding* out);
void StatsToProto(const core::StoreStats& stats, v1::StatsResponse* out);

// The head range of a request: as given, or all heads of the namespace when absent (NOT_FOUND
// for an unknown namespace). Shared by StateCache and DataPlane.
absl::StatusOr<core::HeadRange> ResolveHeads(const core::CheckpointStore& store,
                                             core::NamespaceId ns, bool present,
                                             const v1::HeadRange& heads);
// The header of a checkpoint read: what a Get stream or a data-plane transfer carries.
void GetHeaderToProto(const ReadShape& shape, v1::GetHeader* out);

}  // namespace leapcache::server
