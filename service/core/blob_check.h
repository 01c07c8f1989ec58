// Commit-time validation of a put's bytes: nothing becomes visible unless every blob is a whole,
// intact v1 blob of the namespace's exact format.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "service/core/memory_tier.h"
#include "service/core/namespace_registry.h"
#include "service/core/residency_table.h"
#include "service/core/types.h"

namespace leapcache::core {

// Checks, in order:
//  1. CRC-32C over the blobs in (layer, head) order (blob bytes only, no padding) equals
//     `expected_crc`, else DATA_LOSS (the transfer was damaged or incomplete);
//  2. each blob whose header is intact declares exactly the namespace's BlobSpec, else
//     INVALID_ARGUMENT naming the (layer, head) and both specs;
//  3. each blob passes ParseBlob (gpu/format.h): DATA_LOSS / INVALID_ARGUMENT naming the
//     (layer, head), e.g. for a truncated upload whose tail is stale or zero;
//  4. each blob's stored values are ones a reader accepts (CheckStoredValues: scales finite
//     and positive, compensators finite), else INVALID_ARGUMENT naming the (layer, head).
// Reads only; the caller owns the placement's pages. On success *blob_crcs holds each blob's
// CRC-32C in (layer, head) order, recorded with the checkpoint (ReadLease::BlobCrc).
absl::Status CheckPutBlobs(const NamespaceInfo& ns, const MemoryTier& tier,
                           const Placement& placement, HeadRange heads, uint32_t expected_crc,
                           std::vector<uint32_t>* blob_crcs);

}  // namespace leapcache::core
