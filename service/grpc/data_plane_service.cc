#include "service/grpc/data_plane_service.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/shm_mailbox.h"
#include "base/status_macros.h"
#include "service/grpc/grpc_status.h"
#include "service/grpc/lookup_answer.h"
#include "service/grpc/proto_convert.h"

namespace leapcache::server {
namespace {

// At most `n` bytes of `message`, cut before a UTF-8 continuation byte (a proto3 string must
// stay valid UTF-8).
std::string CutMessage(absl::string_view message, size_t n) {
  if (message.size() <= n) return std::string(message);
  while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0) == 0x80) --n;
  return std::string(message.substr(0, n));
}

using transport::TransportKind;

absl::StatusOr<TransportKind> TransportFromProto(v1::TransportKind kind, const std::string& field) {
  switch (kind) {
    case v1::TRANSPORT_KIND_INLINE:
      return TransportKind::kInline;
    case v1::TRANSPORT_KIND_UCX:
      return TransportKind::kUcx;
    case v1::TRANSPORT_KIND_NCCL:
      return TransportKind::kNccl;
    case v1::TRANSPORT_KIND_CUDA_IPC:
      return TransportKind::kCudaIpc;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is unspecified or unknown (", static_cast<int>(kind), ")"));
  }
}

absl::StatusOr<transport::MemoryKind> MemoryFromProto(v1::MemoryKind kind) {
  switch (kind) {
    case v1::MEMORY_KIND_HOST:
      return transport::MemoryKind::kHost;
    case v1::MEMORY_KIND_CUDA:
      return transport::MemoryKind::kCuda;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("buffer.memory is unspecified or unknown (", static_cast<int>(kind), ")"));
  }
}

}  // namespace

DataPlaneCall DataPlaneCallOf(const grpc::ServerContext& context, std::string_view caller) {
  DataPlaneCall call;
  call.caller = caller;
  if (const auto deadline = context.deadline();
      deadline != std::chrono::system_clock::time_point::max()) {
    call.deadline = absl::FromChrono(deadline);
  }
  call.cancelled = [&context] { return context.IsCancelled(); };
  return call;
}

grpc::Status DataPlaneService::Attach(grpc::ServerContext* context,
                                      const v1::AttachRequest* request,
                                      v1::AttachResponse* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const v1::EngineIdentity& id = request->identity();
  AttachArgs args;
  args.identity = {id.name(), id.host(), id.pid(), id.gpu_uuid(), id.gpu_index()};
  for (int i = 0; i < request->offers_size(); ++i) {
    const v1::TransportOffer& o = request->offers(i);
    absl::StatusOr<TransportKind> kind =
        TransportFromProto(o.kind(), absl::StrCat("offers[", i, "].kind"));
    if (!kind.ok()) return ToGrpcStatus(kind.status());
    args.offers.push_back({*kind, o.connection_info(), o.cuda_memory()});
  }
  args.ttl = absl::Milliseconds(request->session_ttl_ms());
  absl::StatusOr<Attached> attached =
      plane_->Attach(DataPlaneCallOf(*context, *caller), std::move(args));
  if (!attached.ok()) return ToGrpcStatus(attached.status());
  if (!attached->connection_info.empty()) response->set_connection_info(attached->connection_info);
  response->set_session_id(attached->session_id);
  response->set_transport(static_cast<v1::TransportKind>(attached->transport));
  response->set_session_ttl_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(attached->ttl)));
  response->set_cuda_direct(attached->cuda_direct);
  return grpc::Status::OK;
}

grpc::Status DataPlaneService::Keepalive(grpc::ServerContext* context,
                                         const v1::KeepaliveRequest* request,
                                         v1::KeepaliveResponse*) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(plane_->Keepalive(DataPlaneCallOf(*context, *caller), request->session_id()));
}

grpc::Status DataPlaneService::Detach(grpc::ServerContext* context,
                                      const v1::DetachRequest* request, v1::DetachResponse*) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(plane_->Detach(DataPlaneCallOf(*context, *caller), request->session_id()));
}

grpc::Status DataPlaneService::RegisterBuffer(grpc::ServerContext* context,
                                              const v1::RegisterBufferRequest* request,
                                              v1::RegisterBufferResponse* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const v1::BufferDescriptor& b = request->buffer();
  absl::StatusOr<TransportKind> kind = TransportFromProto(b.transport(), "buffer.transport");
  if (!kind.ok()) return ToGrpcStatus(kind.status());
  absl::StatusOr<transport::MemoryKind> memory = MemoryFromProto(b.memory());
  if (!memory.ok()) return ToGrpcStatus(memory.status());
  const transport::BufferDescriptor d{*kind, *memory, b.address(), b.bytes(), b.remote_key()};
  absl::StatusOr<uint64_t> id =
      plane_->RegisterBuffer(DataPlaneCallOf(*context, *caller), request->session_id(), d);
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_buffer_id(*id);
  return grpc::Status::OK;
}

grpc::Status DataPlaneService::ReleaseBuffer(grpc::ServerContext* context,
                                             const v1::ReleaseBufferRequest* request,
                                             v1::ReleaseBufferResponse*) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(plane_->ReleaseBuffer(DataPlaneCallOf(*context, *caller),
                                            request->session_id(), request->buffer_id()));
}

absl::Status DataPlaneService::RunGet(const DataPlaneCall& call,
                                      const v1::TransferGetRequest& request,
                                      v1::TransferGetResponse* response) {
  auto read = [&]() -> absl::StatusOr<ReadRequest> {
    ReadRequest r;
    r.ns = request.namespace_id();
    LC_RETURN_IF_ERROR(auth_->Namespace(std::string(call.caller), r.ns));
    LC_RETURN_IF_ERROR(store_->CheckNamespaceTag(r.ns, request.namespace_tag()));
    LC_ASSIGN_OR_RETURN(r.hash, HashFromProto(request.hash(), "hash"));
    LC_ASSIGN_OR_RETURN(r.heads, ResolveHeads(*store_, r.ns, request.has_heads(), request.heads()));
    LC_ASSIGN_OR_RETURN(r.layers, LayersFromProto(request.has_layers(), request.layers()));
    if (request.has_dense()) {
      LC_ASSIGN_OR_RETURN(r.dense, DenseFromProto(request.dense()));
    }
    return r;
  };
  TransferTimes times;
  absl::StatusOr<GetResult> got =
      plane_->Get(call, request.session_id(), request.buffer_id(), request.offset(), read, &times);
  if (metrics_ != nullptr) metrics_->Record(TransferOp::kGet, got.status(), times);
  if (!got.ok()) return got.status();
  GetHeaderToProto(got->shape, response->mutable_header());
  response->set_crc32c(got->crc32c);
  response->set_crc32c_of_landed(got->crc32c_of_landed);
  return absl::OkStatus();
}

absl::Status DataPlaneService::RunGetBatch(const DataPlaneCall& call,
                                           const v1::TransferGetBatchRequest& request,
                                           v1::TransferGetBatchResponse* response) {
  if (request.gets_size() == 0 || request.gets_size() > kMaxGetBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("a get batch holds 1..", kMaxGetBatch, " gets, not ", request.gets_size()));
  }
  for (int i = 0; i < request.gets_size(); ++i) {
    if (request.gets(i).session_id() != request.session_id()) {
      return absl::InvalidArgumentError(absl::StrCat("gets[", i, "] names session ",
                                                     request.gets(i).session_id(), ", the batch ",
                                                     request.session_id()));
    }
  }
  LC_RETURN_IF_ERROR(plane_->CheckBatchable(call, request.session_id()));
  response->mutable_results()->Reserve(request.gets_size());
  for (const v1::TransferGetRequest& get : request.gets()) {
    v1::TransferGetBatchResult* result = response->add_results();
    const absl::Status st = RunGet(call, get, result->mutable_get());
    if (!st.ok()) {
      result->clear_get();
      result->set_code(static_cast<int32_t>(st.code()));
      result->set_message(CutMessage(st.message(), kMaxBatchResultMessage));
    }
  }
  return absl::OkStatus();
}

absl::Status DataPlaneService::RunPut(const DataPlaneCall& call,
                                      const v1::TransferPutRequest& request,
                                      v1::TransferPutResponse* response) {
  auto target = [&]() -> absl::StatusOr<PutArgs> {
    PutArgs put;
    core::PutRequest& p = put.request;
    p.ns = request.namespace_id();
    LC_RETURN_IF_ERROR(auth_->Namespace(std::string(call.caller), p.ns));
    LC_RETURN_IF_ERROR(store_->CheckNamespaceTag(p.ns, request.namespace_tag()));
    LC_ASSIGN_OR_RETURN(p.hash, HashFromProto(request.hash(), "hash"));
    LC_ASSIGN_OR_RETURN(p.position, PositionFromProto(request.position()));
    LC_ASSIGN_OR_RETURN(p.heads, ResolveHeads(*store_, p.ns, request.has_heads(), request.heads()));
    p.ttl = absl::Milliseconds(request.ttl_ms());
    if (request.has_dense()) {
      LC_ASSIGN_OR_RETURN(put.dense, DenseFromProto(request.dense()));
    }
    return put;
  };
  TransferTimes times;
  const absl::Status put =
      plane_->Put(call, request.session_id(), request.buffer_id(), request.offset(),
                  request.length(), request.crc32c(), target, &times);
  if (metrics_ != nullptr) metrics_->Record(TransferOp::kPut, put, times);
  if (!put.ok()) return put;
  response->set_bytes(request.length());
  return absl::OkStatus();
}

grpc::Status DataPlaneService::TransferGet(grpc::ServerContext* context,
                                           const v1::TransferGetRequest* request,
                                           v1::TransferGetResponse* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(RunGet(DataPlaneCallOf(*context, *caller), *request, response));
}

grpc::Status DataPlaneService::TransferGetBatch(grpc::ServerContext* context,
                                                const v1::TransferGetBatchRequest* request,
                                                v1::TransferGetBatchResponse* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(RunGetBatch(DataPlaneCallOf(*context, *caller), *request, response));
}

grpc::Status DataPlaneService::TransferPut(grpc::ServerContext* context,
                                           const v1::TransferPutRequest* request,
                                           v1::TransferPutResponse* response) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  return ToGrpcStatus(RunPut(DataPlaneCallOf(*context, *caller), *request, response));
}

void DataPlaneService::AnswerChannelRequest(const DataPlaneCall& open, uint64_t session_id,
                                            std::span<const uint8_t> bytes, std::string* reply) {
  const absl::Time start = absl::Now();
  v1::TransferChannelRequest q;
  v1::TransferChannelReply r;
  absl::Status st;
  std::optional<TransferOp> op;
  if (!q.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    st = absl::InvalidArgumentError(
        "a transfer channel request does not parse as a TransferChannelRequest");
  } else {
    DataPlaneCall call = open;
    // The request's own deadline, as a unary call's; none: the data plane's longest.
    if (q.timeout_us() > 0) {
      call.deadline = start + absl::Microseconds(std::min<uint64_t>(q.timeout_us(), INT64_MAX));
    }
    const auto misdirected = [&](uint64_t named) {
      return absl::InvalidArgumentError(
          absl::StrCat("the request names session ", named, "; this channel serves ", session_id));
    };
    switch (q.call_case()) {
      case v1::TransferChannelRequest::kGet:
        op = TransferOp::kGet;
        st = q.get().session_id() != session_id ? misdirected(q.get().session_id())
                                                : RunGet(call, q.get(), r.mutable_get());
        break;
      case v1::TransferChannelRequest::kPut:
        op = TransferOp::kPut;
        st = q.put().session_id() != session_id ? misdirected(q.put().session_id())
                                                : RunPut(call, q.put(), r.mutable_put());
        break;
      case v1::TransferChannelRequest::kGets:
        op = TransferOp::kGet;
        if (q.gets().session_id() != session_id) {
          st = misdirected(q.gets().session_id());
        } else if (q.gets().gets_size() * kMaxBatchGetResultBytes + 64 >
                   channels_.mailbox.capacity) {
          st = absl::ResourceExhaustedError(absl::StrCat(
              "a batch of ", q.gets().gets_size(), " gets may take more than the channel's ",
              channels_.mailbox.capacity, " bytes to answer: send at most ",
              (channels_.mailbox.capacity - 64) / kMaxBatchGetResultBytes,
              " through it, or the batch over TransferGetBatch"));
        } else {
          st = RunGetBatch(call, q.gets(), r.mutable_gets());
        }
        break;
      case v1::TransferChannelRequest::kLookups:
        op = TransferOp::kLookup;
        st = AnswerLookupBatch(*auth_, *store_, std::string(open.caller), q.lookups(),
                               r.mutable_lookups());
        break;
      default:
        st = absl::InvalidArgumentError(
            "a transfer channel request names no get, gets, put or lookups");
    }
  }
  const size_t capacity = channels_.mailbox.capacity;
  if (st.ok() && r.ByteSizeLong() > capacity) {
    // Only lookups' answers grow with the request (many refused lookups, each with its message).
    st = absl::ResourceExhaustedError(
        absl::StrCat("the answer takes ", r.ByteSizeLong(), " bytes; the channel holds ", capacity,
                     ": send fewer lookups, or send them over LookupBatch"));
  }
  if (!st.ok()) {
    r.clear_get();
    r.clear_gets();
    r.clear_put();
    r.clear_lookups();
  }
  r.set_code(static_cast<int32_t>(st.code()));
  r.set_message(std::string(st.message().substr(0, 4096)));  // fits any capacity
  r.SerializeToString(reply);
  if (metrics_ != nullptr && op.has_value()) metrics_->RecordChannel(*op, absl::Now() - start);
}

grpc::Status DataPlaneService::OpenTransferChannel(
    grpc::ServerContext* context, const v1::OpenTransferChannelRequest* request,
    grpc::ServerWriter<v1::TransferChannelEvent>* writer) {
  absl::StatusOr<std::string> caller = auth_->Caller(*context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  const uint64_t session_id = request->session_id();
  const DataPlaneCall open = DataPlaneCallOf(*context, *caller);
  if (absl::Status st = plane_->Keepalive(open, session_id); !st.ok()) return ToGrpcStatus(st);
  if (!channels_.enabled) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "this server serves no transfer channels (data_plane_transfer_channels is off): use "
        "TransferGet and TransferPut"));
  }
  absl::StatusOr<OpenChannels::Claim> claim = open_channels_.Open(session_id, "transfer channel");
  if (!claim.ok()) return ToGrpcStatus(claim.status());
  absl::StatusOr<std::unique_ptr<base::ShmMailbox>> box =
      base::ShmMailbox::Create(channels_.mailbox.capacity);
  if (!box.ok()) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat("cannot create the transfer channel's mailbox: ", box.status().message())));
  }
  base::ShmMailbox& mailbox = **box;
  if (metrics_ != nullptr) metrics_->ChannelOpened();
  const absl::Cleanup counted = [this] {
    if (metrics_ != nullptr) metrics_->ChannelClosed();
  };
  v1::TransferChannelEvent event;
  event.set_name(mailbox.name());
  event.set_capacity(mailbox.capacity());
  if (!writer->Write(event)) return grpc::Status::OK;  // the engine went away

  const auto serve = [&](std::span<const uint8_t> bytes, std::string* reply) {
    AnswerChannelRequest(open, session_id, bytes, reply);
  };
  // Between requests: the caller's token still admits it (a reload may have revoked it), and
  // the session is still there (which also keeps it alive, as Keepalive).
  const auto still_valid = [&]() -> absl::Status {
    absl::StatusOr<std::string> now = auth_->Caller(*context);
    if (!now.ok()) return now.status();
    if (*now != *caller) {
      return absl::PermissionDeniedError("the channel's token now names another tenant");
    }
    return plane_->Keepalive(open, session_id);
  };
  return ToGrpcStatus(ServeMailbox(mailbox, *context, channels_.mailbox, still_valid, serve));
}

}  // namespace leapcache::server
