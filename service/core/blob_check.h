// Commit-time validation of a put's bytes: nothing becomes visible unless every unit holds a
// whole, intact v1 blob of the namespace's exact format and a finite conv state.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "service/core/memory_tier.h"
#include "service/core/namespace_registry.h"
#include "service/core/residency_table.h"
#include "service/core/types.h"

namespace leapcache::core {

// Checks, in order:
//  1. CRC-32C over the units in (layer, head) order (unit bytes only, no padding) equals
//     `expected_crc`, else DATA_LOSS (the transfer was damaged or incomplete);
//  2. each blob whose header is intact declares exactly the namespace's BlobSpec, else
//     INVALID_ARGUMENT naming the (layer, head) and both specs;
//  3. each blob passes ParseBlob (gpu/format/format.h): DATA_LOSS / INVALID_ARGUMENT naming the
//     (layer, head), e.g. for a truncated upload whose tail is stale or zero;
//  4. each blob's stored values are ones a reader accepts (CheckStoredValues: scales finite
//     and positive, compensators finite), else INVALID_ARGUMENT naming the (layer, head);
//  5. each conv state's elements are finite, else INVALID_ARGUMENT naming the (layer, head).
//     The extra bytes are the engine's and not looked at.
// Reads only; the caller owns the placement's pages. On success *unit_crcs holds each unit's
// CRC-32C in (layer, head) order, recorded with the checkpoint (ReadLease::UnitCrc).
absl::Status CheckPutUnits(const NamespaceInfo& ns, const MemoryTier& tier,
                           const Placement& placement, HeadRange heads, uint32_t expected_crc,
                           std::vector<uint32_t>* unit_crcs);

}  // namespace leapcache::core
