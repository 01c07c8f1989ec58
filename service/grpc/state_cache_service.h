// StateCacheService: the gRPC handlers of leapcache.v1.StateCache (proto/leapcache/v1/
// state_cache.proto documents each RPC and its error codes).
//
// Every handler first asks the Authorizer (authorizer.h) who calls and whether it may, then
// decodes the request (proto_convert.h), calls the cache core (through PutPipeline for puts and
// CheckpointReader for gets) and encodes the result; every status leaves through ToGrpcStatus
// (grpc_status.h). No handler keeps state between calls (put ownership is the authorizer's).
//
#pragma once

#include <algorithm>
#include <cstdint>

#include "leapcache/v1/state_cache.grpc.pb.h"
#include "service/core/checkpoint_store.h"
#include "service/facade/put_pipeline.h"
#include "service/compute/compute.h"
#include "service/grpc/authorizer.h"
#include "service/grpc/stream_watchdog.h"

namespace leapcache::server {

struct ServiceLimits {
  // Data bytes per Get response message (the client may ask for less), and the upload chunk
  // advertised to clients.
  uint64_t chunk_bytes = 0;
  // Where tenants are authenticated: whether Stats gives every caller the store-wide numbers
  // (stats_scope: store) or only its own tenant's usage (tenant, the default).
  bool stats_store_wide = false;
};

// The largest UploadPut chunk accepted: chunk_bytes, or one dense state where a state is larger
// (ReservePut advertises whole states to dense puts; the largest is 256 x 256 fp32). Larger
// chunks end the stream with INVALID_ARGUMENT.
inline uint64_t MaxUploadChunkBytes(const ServiceLimits& limits) {
  return std::max<uint64_t>(limits.chunk_bytes, 256 * 256 * 4);
}

// The two lookups are callback methods: they do no I/O and hold the store's lock only briefly,
// so they run on the thread that read the request instead of being handed to the synchronous
// server's pool (a thread switch per call and, under load, new pool threads).
//
// The two streams are callback methods, so a stream holds no thread while it waits for its client
// (a few hundred idle or unread streams once took every thread of the pool), and both are watched
// by the StreamWatchdog, which ends a stream whose client stopped taking part and so releases its
// read lease. UploadPut is over raw messages: each chunk is parsed here, so a message that does
// not parse ends the stream with INVALID_ARGUMENT (the synchronous API reports it as the stream's
// end, which answered OK and dropped the rest).
class StateCacheService final
    : public v1::StateCache::WithCallbackMethod_Lookup<v1::StateCache::WithCallbackMethod_LookupBatch<
          v1::StateCache::WithCallbackMethod_Get<
              v1::StateCache::WithRawCallbackMethod_UploadPut<v1::StateCache::Service>>>> {
 public:
  // `store`, `puts`, `auth`, `watchdog` and `compute` (dense gets' codec; the CPU reference when
  // null) must outlive the service.
  StateCacheService(core::CheckpointStore* store, PutPipeline* puts, Authorizer* auth,
                    StreamWatchdog* watchdog, ServiceLimits limits,
                    compute::Compute* compute = nullptr)
      : store_(store),
        puts_(puts),
        auth_(auth),
        watchdog_(watchdog),
        limits_(limits),
        compute_(compute) {}

  grpc::Status RegisterNamespace(grpc::ServerContext* context,
                                 const v1::RegisterNamespaceRequest* request,
                                 v1::RegisterNamespaceResponse* response) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const v1::LookupRequest* request,
                                   v1::LookupResponse* response) override;
  grpc::ServerUnaryReactor* LookupBatch(grpc::CallbackServerContext* context,
                                        const v1::LookupBatchRequest* request,
                                        v1::LookupBatchResponse* response) override;

  // What Lookup and LookupBatch answer `context`'s caller (the handlers finish with it; the
  // fuzz target calls these without a call).
  grpc::Status AnswerLookup(const grpc::ServerContextBase& context,
                            const v1::LookupRequest& request, v1::LookupResponse* response) const;
  grpc::Status AnswerLookupBatch(const grpc::ServerContextBase& context,
                                 const v1::LookupBatchRequest& request,
                                 v1::LookupBatchResponse* response) const;
  grpc::Status ReservePut(grpc::ServerContext* context, const v1::ReservePutRequest* request,
                          v1::ReservePutResponse* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* UploadPut(grpc::CallbackServerContext* context,
                                                       grpc::ByteBuffer* response) override;
  grpc::Status CommitPut(grpc::ServerContext* context, const v1::CommitPutRequest* request,
                         v1::CommitPutResponse* response) override;
  grpc::Status AbortPut(grpc::ServerContext* context, const v1::AbortPutRequest* request,
                        v1::AbortPutResponse* response) override;
  grpc::ServerWriteReactor<v1::GetResponse>* Get(grpc::CallbackServerContext* context,
                                                 const v1::GetRequest* request) override;
  grpc::Status Delete(grpc::ServerContext* context, const v1::DeleteRequest* request,
                      v1::DeleteResponse* response) override;
  grpc::Status Pin(grpc::ServerContext* context, const v1::PinRequest* request,
                   v1::PinResponse* response) override;
  grpc::Status Unpin(grpc::ServerContext* context, const v1::UnpinRequest* request,
                     v1::UnpinResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

 private:
  core::CheckpointStore* const store_;
  PutPipeline* const puts_;
  Authorizer* const auth_;
  StreamWatchdog* const watchdog_;
  const ServiceLimits limits_;
  compute::Compute* const compute_;
};

}  // namespace leapcache::server
