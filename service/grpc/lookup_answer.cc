#include "service/grpc/lookup_answer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "service/grpc/proto_convert.h"

namespace leapcache::server {

absl::Status AnswerLookup(const Authorizer& auth, core::CheckpointStore& store,
                          const std::string& caller, const v1::LookupRequest& request,
                          v1::LookupResponse* response) {
  LC_RETURN_IF_ERROR(auth.Namespace(caller, request.namespace_id()));
  LC_RETURN_IF_ERROR(store.CheckNamespaceTag(request.namespace_id(), request.namespace_tag()));
  LC_ASSIGN_OR_RETURN(const std::vector<core::BlockHash> chain, ChainFromProto(request.chain()));
  core::LookupRequest q;
  q.ns = request.namespace_id();
  q.chain = chain;
  LC_ASSIGN_OR_RETURN(q.heads, ResolveHeads(store, q.ns, request.has_heads(), request.heads()));
  // Larger than any chain: "no cap" in effect, and the core reports a bad chain itself.
  q.max_depth = static_cast<int>(std::min<uint32_t>(request.max_depth(), core::kMaxChainBlocks));
  q.block_tokens = request.block_tokens();
  LC_ASSIGN_OR_RETURN(const core::LookupResult result, store.Lookup(q));
  response->set_hit(result.hit);
  if (result.hit) {
    response->set_index(static_cast<uint32_t>(result.index));
    PositionToProto(result.position, response->mutable_position());
  }
  return absl::OkStatus();
}

absl::Status AnswerLookupBatch(const Authorizer& auth, core::CheckpointStore& store,
                               const std::string& caller, const v1::LookupBatchRequest& request,
                               v1::LookupBatchResponse* response) {
  const int n = request.lookups_size();
  if (n < 1 || n > kMaxLookupBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookups: ", n, " lookups; a batch holds 1..", kMaxLookupBatch));
  }
  response->mutable_results()->Reserve(n);
  for (const v1::LookupRequest& lookup : request.lookups()) {
    v1::LookupBatchResult* result = response->add_results();
    const absl::Status st = AnswerLookup(auth, store, caller, lookup, result->mutable_lookup());
    if (!st.ok()) {
      result->clear_lookup();
      result->set_code(static_cast<int32_t>(st.code()));
      result->set_message(std::string(st.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace leapcache::server
