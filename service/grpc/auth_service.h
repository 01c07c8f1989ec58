// AuthenticatedStateCacheService: leapcache.v1.StateCache behind bearer-token authentication and
// per-tenant authorization, in front of StateCacheService (which it calls for the work).
//
// Every call must carry `authorization: Bearer TOKEN` metadata with a token of the TokenTable
// (UNAUTHENTICATED otherwise, before the request is looked at). The token's tenant is the
// caller's identity; a tenant named in a request body counts only if it is the caller's:
//  - RegisterNamespace: request.tenant must be the caller's tenant.
//  - Lookup, ReservePut, Get, Delete, Pin, Unpin: the namespace must belong to the caller's
//    tenant (NOT_FOUND for an unknown namespace, as without authentication).
//  - UploadPut, CommitPut, AbortPut: the put must have been reserved by the caller's tenant. Put
//    ids are sequential, so ownership is recorded here at ReservePut and forgotten at commit,
//    abort or the put's deadline; an id this table does not know is NOT_FOUND.
//  - Stats: any authenticated caller (store-wide totals; no per-tenant numbers in it).
// A refusal (PERMISSION_DENIED naming the field) happens before the store is touched, so it
// changes nothing. The standard health service is registered separately and stays open.
//
// Why a wrapping service instead of grpc::AuthMetadataProcessor: the processor runs only on
// secure listeners, but a loopback deployment may use tokens without TLS; and authorization needs
// the request body (namespace ids, put ids), which only a handler sees.
#pragma once

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "leapcache/v1/state_cache.grpc.pb.h"
#include "service/core/checkpoint_store.h"
#include "service/core/clock.h"
#include "service/config/auth_tokens.h"
#include "service/facade/put_pipeline.h"
#include "service/grpc/state_cache_service.h"

namespace leapcache::server {

// The tenant a call acts for, from its `authorization` metadata; UNAUTHENTICATED for a missing,
// repeated or malformed header or an unknown token (the message never repeats the token).
absl::StatusOr<std::string> AuthenticateCall(const grpc::ServerContext& context,
                                             const TokenTable& tokens);

class AuthenticatedStateCacheService final : public v1::StateCache::Service {
 public:
  // Every pointer must outlive the service; `clock` is the store's.
  AuthenticatedStateCacheService(TokenTable tokens, StateCacheService* inner,
                                 core::CheckpointStore* store, PutPipeline* puts,
                                 const core::Clock& clock)
      : tokens_(std::move(tokens)), inner_(inner), store_(store), puts_(puts), clock_(clock) {}

  grpc::Status RegisterNamespace(grpc::ServerContext* context,
                                 const v1::RegisterNamespaceRequest* request,
                                 v1::RegisterNamespaceResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext* context, const v1::LookupRequest* request,
                      v1::LookupResponse* response) override;
  grpc::Status ReservePut(grpc::ServerContext* context, const v1::ReservePutRequest* request,
                          v1::ReservePutResponse* response) override;
  grpc::Status UploadPut(grpc::ServerContext* context,
                         grpc::ServerReader<v1::UploadPutRequest>* reader,
                         v1::UploadPutResponse* response) override;
  grpc::Status CommitPut(grpc::ServerContext* context, const v1::CommitPutRequest* request,
                         v1::CommitPutResponse* response) override;
  grpc::Status AbortPut(grpc::ServerContext* context, const v1::AbortPutRequest* request,
                        v1::AbortPutResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const v1::GetRequest* request,
                   grpc::ServerWriter<v1::GetResponse>* writer) override;
  grpc::Status Delete(grpc::ServerContext* context, const v1::DeleteRequest* request,
                      v1::DeleteResponse* response) override;
  grpc::Status Pin(grpc::ServerContext* context, const v1::PinRequest* request,
                   v1::PinResponse* response) override;
  grpc::Status Unpin(grpc::ServerContext* context, const v1::UnpinRequest* request,
                     v1::UnpinResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

 private:
  struct PutOwner {
    std::string tenant;
    absl::Time deadline;
  };

  // OK if namespace `ns` belongs to the calling tenant.
  absl::Status AuthorizeNamespace(const std::string& tenant, uint32_t ns) const;
  // OK if the caller's tenant reserved put `id`.
  absl::Status AuthorizePut(const std::string& tenant, uint64_t id);
  void ForgetPut(uint64_t id);

  const TokenTable tokens_;
  StateCacheService* const inner_;
  core::CheckpointStore* const store_;
  PutPipeline* const puts_;
  const core::Clock& clock_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, PutOwner> put_owners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::server
