// The answers of Lookup and LookupBatch for an authenticated caller: one implementation for the
// StateCache RPCs and the data plane's transfer channels, so a lookup means the same on both.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "leapcache/v1/checkpoint.pb.h"
#include "service/core/checkpoint_store.h"
#include "service/grpc/authorizer.h"

namespace leapcache::server {

// Lookups one LookupBatch may carry (state_cache.proto).
inline constexpr int kMaxLookupBatch = 4096;

// One lookup for `caller` (authenticated already): its namespace authorized and tag checked,
// then the store's answer into `response` (untouched on failure).
absl::Status AnswerLookup(const Authorizer& auth, core::CheckpointStore& store,
                          const std::string& caller, const v1::LookupRequest& request,
                          v1::LookupResponse* response);

// A batch: INVALID_ARGUMENT (and nothing looked up) for no lookups or more than kMaxLookupBatch;
// otherwise OK with one result per lookup, each AnswerLookup's status and answer.
absl::Status AnswerLookupBatch(const Authorizer& auth, core::CheckpointStore& store,
                               const std::string& caller, const v1::LookupBatchRequest& request,
                               v1::LookupBatchResponse* response);

}  // namespace leapcache::server
