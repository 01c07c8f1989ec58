#include "service/grpc/state_cache_service.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "gpu/format/format.h"
#include "service/facade/checkpoint_reader.h"
#include "service/facade/namespace_fingerprint.h"
#include "service/grpc/grpc_status.h"
#include "service/grpc/lookup_answer.h"
#include "service/grpc/proto_convert.h"

namespace leapcache::server {
namespace {

absl::StatusOr<PutTicket> DoReserve(core::CheckpointStore& store, PutPipeline& puts,
                                    const v1::ReservePutRequest& request) {
  LC_RETURN_IF_ERROR(store.CheckNamespaceTag(request.namespace_id(), request.namespace_tag()));
  core::PutRequest r;
  r.ns = request.namespace_id();
  LC_ASSIGN_OR_RETURN(r.hash, HashFromProto(request.hash(), "hash"));
  LC_ASSIGN_OR_RETURN(r.position, PositionFromProto(request.position()));
  LC_ASSIGN_OR_RETURN(r.heads, ResolveHeads(store, r.ns, request.has_heads(), request.heads()));
  r.ttl = absl::Milliseconds(request.ttl_ms());
  std::optional<compute::DenseFormat> dense;
  if (request.has_dense()) {
    LC_ASSIGN_OR_RETURN(dense, DenseFromProto(request.dense()));
  }
  return puts.Reserve(r, dense);
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenReader(core::CheckpointStore& store,
                                                             const v1::GetRequest& request,
                                                             compute::Compute* compute) {
  LC_RETURN_IF_ERROR(store.CheckNamespaceTag(request.namespace_id(), request.namespace_tag()));
  ReadRequest r;
  r.ns = request.namespace_id();
  LC_ASSIGN_OR_RETURN(r.hash, HashFromProto(request.hash(), "hash"));
  LC_ASSIGN_OR_RETURN(r.heads, ResolveHeads(store, r.ns, request.has_heads(), request.heads()));
  LC_ASSIGN_OR_RETURN(r.layers, LayersFromProto(request.has_layers(), request.layers()));
  if (request.has_dense()) {
    LC_ASSIGN_OR_RETURN(r.dense, DenseFromProto(request.dense()));
  }
  return CheckpointReader::Open(store, r, compute);
}

// Delete, Pin and Unpin: `op` on one checkpoint by key, once the caller may reach the namespace,
// the hash parses and the namespace tag is current.
template <typename Request>
absl::Status OnKey(const Authorizer& auth, core::CheckpointStore& store,
                   const grpc::ServerContext& context, const Request& request,
                   absl::FunctionRef<absl::Status(core::NamespaceId, const core::BlockHash&)> op) {
  LC_RETURN_IF_ERROR(auth.CallerFor(context, request.namespace_id()).status());
  LC_ASSIGN_OR_RETURN(const core::BlockHash hash, HashFromProto(request.hash(), "hash"));
  LC_RETURN_IF_ERROR(store.CheckNamespaceTag(request.namespace_id(), request.namespace_tag()));
  return op(request.namespace_id(), hash);
}

}  // namespace

grpc::Status StateCacheService::RegisterNamespace(grpc::ServerContext* context,
                                                  const v1::RegisterNamespaceRequest* request,
                                                  v1::RegisterNamespaceResponse* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status st = auth_->Register(*caller, request->tenant()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  absl::StatusOr<core::NamespaceSpec> spec = NamespaceSpecFromProto(*request);
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  absl::StatusOr<core::NamespaceId> id = store_->RegisterNamespace(*spec);
  if (!id.ok()) return ToGrpcStatus(id.status());
  absl::StatusOr<core::NamespaceInfo> info = store_->GetNamespace(*id);
  if (!info.ok()) return ToGrpcStatus(info.status());
  response->set_namespace_id(*id);
  response->set_fingerprint(NamespaceFingerprint(info->spec));
  response->set_blob_bytes(info->blob_bytes);
  response->set_side_bytes(info->side_bytes);
  response->set_format_label(info->format_label);
  response->set_layout_fingerprint(LayoutFingerprint(info->spec.format));
  response->set_namespace_tag(info->tag);
  return grpc::Status::OK;
}

grpc::Status StateCacheService::AnswerLookup(const grpc::ServerContextBase& context,
                                             const v1::LookupRequest& request,
                                             v1::LookupResponse* response) const {
  absl::StatusOr<std::string> caller = auth_->Caller(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(server::AnswerLookup(*auth_, *store_, *caller, request, response));
}

grpc::Status StateCacheService::AnswerLookupBatch(const grpc::ServerContextBase& context,
                                                  const v1::LookupBatchRequest& request,
                                                  v1::LookupBatchResponse* response) const {
  absl::StatusOr<std::string> caller = auth_->Caller(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(server::AnswerLookupBatch(*auth_, *store_, *caller, request, response));
}

grpc::ServerUnaryReactor* StateCacheService::Lookup(grpc::CallbackServerContext* context,
                                                    const v1::LookupRequest* request,
                                                    v1::LookupResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(AnswerLookup(*context, *request, response));
  return reactor;
}

grpc::ServerUnaryReactor* StateCacheService::LookupBatch(grpc::CallbackServerContext* context,
                                                         const v1::LookupBatchRequest* request,
                                                         v1::LookupBatchResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(AnswerLookupBatch(*context, *request, response));
  return reactor;
}

grpc::Status StateCacheService::ReservePut(grpc::ServerContext* context,
                                           const v1::ReservePutRequest* request,
                                           v1::ReservePutResponse* response) {
  absl::StatusOr<std::string> caller = auth_->CallerFor(*context, request->namespace_id());
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  absl::StatusOr<PutTicket> ticket = DoReserve(*store_, *puts_, *request);
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  auth_->RecordPut(*caller, ticket->id, std::max(absl::ZeroDuration(), ticket->ttl));
  response->set_put_id(ticket->id);
  response->set_expected_bytes(ticket->expected_bytes);
  response->set_blob_bytes(ticket->blob_bytes);
  response->set_state_bytes(ticket->state_bytes);
  response->set_side_bytes(ticket->side_bytes);
  response->set_ttl_ms(
      static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Milliseconds(ticket->ttl))));
  uint64_t chunk = limits_.chunk_bytes;
  if (ticket->state_bytes > 0) {
    chunk = std::max<uint64_t>(1, chunk / ticket->unit_bytes) * ticket->unit_bytes;
  }
  response->set_max_chunk_bytes(chunk);
  return grpc::Status::OK;
}

namespace {

// The status of a stream the watchdog ended (the client sees CANCELLED: the call is cancelled).
grpc::Status Expired(StreamExpiry why, const StreamLimits& limits) {
  return ToGrpcStatus(absl::DeadlineExceededError(
      why == StreamExpiry::kIdle
          ? absl::StrCat("no message moved for stream_idle_timeout (",
                         absl::FormatDuration(limits.idle), ")")
          : absl::StrCat("the stream was open for stream_max_age (",
                         absl::FormatDuration(limits.max_age), ")")));
}

// One UploadPut stream: reads a chunk, checks it, stores it, reads the next; at the client's
// half-close answers with the bytes received. The first failing chunk ends the stream with its
// status; chunks stored before it stay (the put stays open for a retry or AbortPut). A stream
// that receives no chunk for the watchdog's idle limit is cancelled.
class UploadReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  UploadReactor(grpc::CallbackServerContext* context, PutPipeline* puts, const Authorizer* auth,
                StreamWatchdog* watchdog, uint64_t max_chunk, std::string caller,
                grpc::ByteBuffer* response)
      : context_(context),
        puts_(puts),
        auth_(auth),
        watchdog_(watchdog),
        max_chunk_(max_chunk),
        caller_(std::move(caller)),
        response_(response) {
    watch_ = watchdog_->Watch("StateCache/UploadPut", [this](StreamExpiry why) {
      expired_.store(static_cast<int>(why) + 1);
      context_->TryCancel();  // last: the stream may end inside it, and `this` with it
    });
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (const int why = expired_.load(); why != 0) {
        Finish(Expired(static_cast<StreamExpiry>(why - 1), watchdog_->limits()));
        return;
      }
      // The client's half-close (a broken call never sees this Finish).
      v1::UploadPutResponse r;
      r.set_bytes_received(received_);
      grpc::Slice bytes(r.SerializeAsString());
      *response_ = grpc::ByteBuffer(&bytes, 1);
      Finish(grpc::Status::OK);
      return;
    }
    watch_->Progress();
    v1::UploadPutRequest chunk;
    grpc::ProtoBufferReader in(&message_);
    if (!chunk.ParseFromZeroCopyStream(&in)) {
      Finish(ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "UploadPut message ", chunks_ + 1, " does not parse as an UploadPutRequest"))));
      return;
    }
    ++chunks_;
    // Each chunk's put is checked before it is stored: a stream may name several puts.
    if (absl::Status st = auth_->Put(caller_, chunk.put_id()); !st.ok()) {
      Finish(ToGrpcStatus(st));
      return;
    }
    const std::string& data = chunk.data();
    if (data.size() > max_chunk_) {
      Finish(ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("UploadPut chunk ", chunks_, " holds ", data.size(),
                       " bytes, more than the server's chunk limit of ", max_chunk_,
                       " (ReservePut's max_chunk_bytes)"))));
      return;
    }
    if (absl::Status st = puts_->Upload(
            chunk.put_id(), chunk.offset(),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
        !st.ok()) {
      Finish(ToGrpcStatus(st));
      return;
    }
    received_ += data.size();
    StartRead(&message_);
  }

  void OnDone() override {
    watchdog_->Unwatch(watch_);
    delete this;
  }

 private:
  grpc::CallbackServerContext* const context_;
  PutPipeline* const puts_;
  const Authorizer* const auth_;
  StreamWatchdog* const watchdog_;
  const uint64_t max_chunk_;
  const std::string caller_;
  grpc::ByteBuffer* const response_;
  StreamWatchdog::Entry* watch_ = nullptr;
  std::atomic<int> expired_{0};  // 0, or 1 + the StreamExpiry
  grpc::ByteBuffer message_;
  uint64_t received_ = 0;
  uint64_t chunks_ = 0;
};

// One Get stream: a message of at most `chunk` data bytes at a time, the next made once the
// client took the previous one. The read lease is held only while bytes remain to be copied out
// of the store: it goes with the last bytes, when the stream fails, or when the watchdog expires
// the stream (no message taken for the idle limit, or open for the maximum age).
class GetReactor final : public grpc::ServerWriteReactor<v1::GetResponse> {
 public:
  GetReactor(grpc::CallbackServerContext* context, std::unique_ptr<CheckpointReader> reader,
             uint64_t chunk, StreamWatchdog* watchdog)
      : context_(context), watchdog_(watchdog), chunk_(chunk), reader_(std::move(reader)) {
    GetHeaderToProto(reader_->shape(), response_.mutable_header());
    watch_ = watchdog_->Watch("StateCache/Get", [this](StreamExpiry why) {
      {
        absl::MutexLock lock(&mu_);
        expired_ = why;
        reader_.reset();  // the lease goes now, whatever the transport still holds
      }
      context_->TryCancel();  // last: the stream may end inside it, and `this` with it
    });
    Next();
  }

  void OnWriteDone(bool ok) override {
    watch_->Progress();
    if (!ok) {  // the client went away, the deadline passed, or the watchdog cancelled
      grpc::Status status(grpc::StatusCode::CANCELLED, "the client stopped reading");
      {
        absl::MutexLock lock(&mu_);
        reader_.reset();
        if (expired_.has_value()) status = Expired(*expired_, watchdog_->limits());
      }
      Finish(status);
      return;
    }
    if (last_sent_) {
      Finish(grpc::Status::OK);
      return;
    }
    response_.clear_header();
    Next();
  }

  void OnDone() override {
    watchdog_->Unwatch(watch_);
    delete this;
  }

 private:
  // Makes the next message and starts writing it, or finishes the stream. No lock is held while
  // a stream operation starts.
  void Next() {
    absl::Status failed;
    {
      absl::MutexLock lock(&mu_);
      if (reader_ == nullptr) {
        failed = absl::DeadlineExceededError("expired");  // replaced below by Expired()
      } else {
        CheckpointReader& r = *reader_;
        response_.set_offset(r.offset());
        std::string* data = response_.mutable_data();
        data->resize(std::min<uint64_t>(chunk_, r.shape().total_bytes - r.offset()));
        absl::StatusOr<size_t> n =
            r.Read(std::span<uint8_t>(reinterpret_cast<uint8_t*>(data->data()), data->size()));
        if (!n.ok()) {
          failed = n.status();
          reader_.reset();
        } else {
          data->resize(*n);
          if (r.done()) {
            response_.mutable_trailer()->set_crc32c(r.crc32c());
            last_sent_ = true;
            reader_.reset();  // every byte is in the message: the lease is no longer needed
          }
        }
      }
      if (!failed.ok() && expired_.has_value()) {
        const grpc::Status status = Expired(*expired_, watchdog_->limits());
        failed = absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                              status.error_message());
      }
    }
    if (!failed.ok()) {
      Finish(ToGrpcStatus(failed));
      return;
    }
    StartWrite(&response_);
  }

  grpc::CallbackServerContext* const context_;
  StreamWatchdog* const watchdog_;
  const uint64_t chunk_;
  StreamWatchdog::Entry* watch_ = nullptr;
  v1::GetResponse response_;  // the message in flight; only the stream's own callbacks touch it
  bool last_sent_ = false;
  absl::Mutex mu_;
  std::unique_ptr<CheckpointReader> reader_ ABSL_GUARDED_BY(mu_);
  std::optional<StreamExpiry> expired_ ABSL_GUARDED_BY(mu_);
};

// A stream refused before its first message.
template <typename Reactor>
class Refused final : public Reactor {
 public:
  explicit Refused(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* StateCacheService::UploadPut(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) {
    return new Refused<grpc::ServerReadReactor<grpc::ByteBuffer>>(ToGrpcStatus(caller.status()));
  }
  return new UploadReactor(context, puts_, auth_, watchdog_, MaxUploadChunkBytes(limits_),
                           *std::move(caller), response);
}

grpc::Status StateCacheService::CommitPut(grpc::ServerContext* context,
                                          const v1::CommitPutRequest* request,
                                          v1::CommitPutResponse*) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status st = auth_->Put(*caller, request->put_id()); !st.ok()) return ToGrpcStatus(st);
  const absl::Status committed = puts_->Commit(request->put_id(), request->crc32c());
  // A failed commit may leave the put open (DATA_LOSS: upload again), so only success forgets.
  if (committed.ok()) auth_->ForgetPut(request->put_id());
  return ToGrpcStatus(committed);
}

grpc::Status StateCacheService::AbortPut(grpc::ServerContext* context,
                                         const v1::AbortPutRequest* request,
                                         v1::AbortPutResponse*) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status st = auth_->Put(*caller, request->put_id()); !st.ok()) return ToGrpcStatus(st);
  const absl::Status aborted = puts_->Abort(request->put_id());
  if (aborted.ok()) auth_->ForgetPut(request->put_id());
  return ToGrpcStatus(aborted);
}

grpc::ServerWriteReactor<v1::GetResponse>* StateCacheService::Get(
    grpc::CallbackServerContext* context, const v1::GetRequest* request) {
  using RefusedGet = Refused<grpc::ServerWriteReactor<v1::GetResponse>>;
  if (absl::StatusOr<std::string> caller = auth_->CallerFor(*context, request->namespace_id());
      !caller.ok()) {
    return new RefusedGet(ToGrpcStatus(caller.status()));
  }
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      OpenReader(*store_, *request, compute_);
  if (!reader.ok()) return new RefusedGet(ToGrpcStatus(reader.status()));
  const uint64_t chunk = request->max_chunk_bytes() == 0
                             ? limits_.chunk_bytes
                             : std::min(request->max_chunk_bytes(), limits_.chunk_bytes);
  return new GetReactor(context, *std::move(reader), chunk, watchdog_);
}

grpc::Status StateCacheService::Delete(grpc::ServerContext* context,
                                       const v1::DeleteRequest* request, v1::DeleteResponse*) {
  return ToGrpcStatus(
      OnKey(*auth_, *store_, *context, *request,
            [&](core::NamespaceId ns, const core::BlockHash& h) { return store_->Delete(ns, h); }));
}

grpc::Status StateCacheService::Pin(grpc::ServerContext* context, const v1::PinRequest* request,
                                    v1::PinResponse*) {
  return ToGrpcStatus(
      OnKey(*auth_, *store_, *context, *request,
            [&](core::NamespaceId ns, const core::BlockHash& h) { return store_->Pin(ns, h); }));
}

grpc::Status StateCacheService::Unpin(grpc::ServerContext* context, const v1::UnpinRequest* request,
                                      v1::UnpinResponse*) {
  return ToGrpcStatus(
      OnKey(*auth_, *store_, *context, *request,
            [&](core::NamespaceId ns, const core::BlockHash& h) { return store_->Unpin(ns, h); }));
}

grpc::Status StateCacheService::Stats(grpc::ServerContext* context, const v1::StatsRequest*,
                                      v1::StatsResponse* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const core::StoreStats stats = store_->Stats();
  if (!auth_->enabled() || limits_.stats_store_wide) {
    StatsToProto(stats, response);
  } else {
    // A tenant's view: the tiers' shapes, not their use (stats.proto).
    for (const core::TierStats& t : stats.tiers) {
      v1::TierStats* out = response->add_tiers();
      out->set_name(t.name);
      out->set_page_bytes(t.page_bytes);
      out->set_capacity_bytes(t.capacity_bytes);
    }
  }
  if (auth_->enabled()) {
    v1::TenantUsage* usage = response->mutable_tenant();
    usage->set_tenant(*caller);
    for (const core::TenantStats& t : stats.tenants) {
      if (t.tenant != *caller) continue;
      usage->set_namespaces(t.namespaces);
      usage->set_bytes(t.bytes);
      usage->set_pinned_bytes(t.pinned_bytes);
      usage->set_pending_puts(t.pending_puts);
    }
    const core::TenantQuota& quota = store_->tenant_quota();
    usage->set_quota_bytes(quota.bytes);
    usage->set_quota_pinned_bytes(quota.pinned_bytes);
    usage->set_quota_pending_puts(quota.pending_puts);
    usage->set_quota_namespaces(quota.namespaces);
  }
  return grpc::Status::OK;
}

}  // namespace leapcache::server
