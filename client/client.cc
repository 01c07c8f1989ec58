#include "leapcache/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/channel.h"
#include "client/grpc_status_conversion.h"
#include "client/wire_convert.h"
#include "gpu/format/crc32c.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "leapcache/v1/state_cache.grpc.pb.h"

namespace leapcache::client {
namespace {

absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

// The server's answers for an id that does not name the caller's namespace (any more): unknown
// (NOT_FOUND, also for another tenant's), or another namespace's (FAILED_PRECONDITION naming the
// tag).
bool StaleNamespace(const absl::Status& s) {
  return (s.code() == absl::StatusCode::kNotFound &&
          absl::StartsWith(s.message(), "unknown namespace ")) ||
         (s.code() == absl::StatusCode::kFailedPrecondition &&
          absl::StrContains(s.message(), "namespace_tag"));
}

}  // namespace

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::StateCache::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;

  // Namespaces registered through this client, by the id the caller holds: the spec (to
  // register again after a server restart), the tag, and the id the server knows it by now.
  struct Registered {
    NamespaceSpec spec;
    uint64_t tag = 0;
    uint32_t server_id = 0;
  };
  mutable absl::Mutex mu;
  absl::flat_hash_map<uint32_t, Registered> registered ABSL_GUARDED_BY(mu);

  void Unary(grpc::ClientContext* context) const {
    context->set_deadline(DeadlineAfter(options.rpc_timeout));
  }
  void Transfer(grpc::ClientContext* context) const {
    context->set_deadline(DeadlineAfter(options.transfer_timeout));
  }

  absl::StatusOr<NamespaceInfo> Register(const NamespaceSpec& spec) const {
    v1::RegisterNamespaceRequest request;
    ToProto(spec, &request);
    v1::RegisterNamespaceResponse response;
    grpc::ClientContext context;
    Unary(&context);
    if (grpc::Status st = stub->RegisterNamespace(&context, request, &response); !st.ok()) {
      return FromGrpcStatus(st);
    }
    return NamespaceInfo{response.namespace_id(), response.namespace_tag(),
                         response.fingerprint(),  response.blob_bytes(),
                         response.format_label(), response.layout_fingerprint(),
                         response.side_bytes()};
  }

  // What to send for the caller's id: the server's id and the tag, or the id unchecked (tag 0)
  // for a namespace this client did not register.
  std::pair<uint32_t, uint64_t> Address(uint32_t id) const {
    absl::MutexLock lock(&mu);
    auto it = registered.find(id);
    if (it == registered.end()) return {id, 0};
    return {it->second.server_id, it->second.tag};
  }

  // Registers the namespace the caller holds as `id` again (after a server restart) and returns
  // the server's new id and tag for it.
  absl::StatusOr<std::pair<uint32_t, uint64_t>> RegisterAgain(uint32_t id) {
    NamespaceSpec spec;
    {
      absl::MutexLock lock(&mu);
      spec = registered.at(id).spec;
    }
    absl::StatusOr<NamespaceInfo> again = Register(spec);
    if (!again.ok()) return again.status();
    absl::MutexLock lock(&mu);
    registered.at(id).server_id = again->id;
    registered.try_emplace(again->id, Registered{spec, again->tag, again->id});
    return std::make_pair(again->id, again->tag);
  }

  // Runs `call(server_id, tag)`; if the server says the id no longer names the namespace this
  // client registered under it, registers the namespace again and runs `call` once more.
  template <typename Call>
  auto OnNamespace(uint32_t id, Call&& call) -> decltype(call(uint32_t{}, uint64_t{})) {
    auto [server_id, tag] = Address(id);
    auto result = call(server_id, tag);
    if (tag == 0 || !StaleNamespace(StatusOf(result))) return result;
    absl::StatusOr<std::pair<uint32_t, uint64_t>> again = RegisterAgain(id);
    if (!again.ok()) return result;
    return call(again->first, again->second);
  }

  // One LookupBatch call: result i answers batch.lookups(i).
  absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> LookupBatch(
      const v1::LookupBatchRequest& batch) const {
    v1::LookupBatchResponse response;
    grpc::ClientContext context;
    Unary(&context);
    if (grpc::Status st = stub->LookupBatch(&context, batch, &response); !st.ok()) {
      return FromGrpcStatus(st);
    }
    return FromProto(response, batch.lookups_size());
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->options; }

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (absl::Status st = CheckOptions(options); !st.ok()) return st;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectChannel(options);
  if (!channel.ok()) return channel.status();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->channel = *std::move(channel);
  impl->stub = v1::StateCache::NewStub(impl->channel);
  impl->health = grpc::health::v1::Health::NewStub(impl->channel);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

absl::StatusOr<NamespaceInfo> Client::RegisterNamespace(const NamespaceSpec& spec) {
  absl::StatusOr<NamespaceInfo> info = impl_->Register(spec);
  if (info.ok()) {
    absl::MutexLock lock(&impl_->mu);
    impl_->registered.insert_or_assign(info->id, Impl::Registered{spec, info->tag, info->id});
  }
  return info;
}

std::optional<uint64_t> Client::RegisteredTag(uint32_t namespace_id) const {
  absl::MutexLock lock(&impl_->mu);
  auto it = impl_->registered.find(namespace_id);
  if (it == impl_->registered.end()) return std::nullopt;
  return it->second.tag;
}

absl::StatusOr<LookupResult> Client::Lookup(const LookupRequest& request) {
  v1::LookupRequest q;
  ToProto(request, &q);
  return impl_->OnNamespace(
      request.namespace_id, [&](uint32_t id, uint64_t tag) -> absl::StatusOr<LookupResult> {
        q.set_namespace_id(id);
        q.set_namespace_tag(tag);
        v1::LookupResponse response;
        grpc::ClientContext context;
        impl_->Unary(&context);
        if (grpc::Status st = impl_->stub->Lookup(&context, q, &response); !st.ok()) {
          return FromGrpcStatus(st);
        }
        return FromProto(response);
      });
}

absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> Client::LookupBatch(
    std::span<const LookupRequest> requests) {
  v1::LookupBatchRequest batch;
  std::vector<uint64_t> tags(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    v1::LookupRequest* q = batch.add_lookups();
    ToProto(requests[i], q);
    const auto [id, tag] = impl_->Address(requests[i].namespace_id);
    q->set_namespace_id(id);
    q->set_namespace_tag(tag);
    tags[i] = tag;
  }
  absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> results = impl_->LookupBatch(batch);
  if (!results.ok()) return results;
  // Lookups of namespaces the server no longer knows by their ids (it restarted): register each
  // such namespace again, once, and send its lookups once more, as Lookup does.
  absl::flat_hash_map<uint32_t, std::optional<std::pair<uint32_t, uint64_t>>> again;
  v1::LookupBatchRequest retry;
  std::vector<size_t> retried;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (tags[i] == 0 || !StaleNamespace((*results)[i].status())) continue;
    const uint32_t id = requests[i].namespace_id;
    auto [it, fresh] = again.try_emplace(id);
    if (fresh) {
      absl::StatusOr<std::pair<uint32_t, uint64_t>> address = impl_->RegisterAgain(id);
      if (address.ok()) it->second = *address;
    }
    if (!it->second.has_value()) continue;
    v1::LookupRequest* q = retry.add_lookups();
    *q = batch.lookups(static_cast<int>(i));
    q->set_namespace_id(it->second->first);
    q->set_namespace_tag(it->second->second);
    retried.push_back(i);
  }
  if (retried.empty()) return results;
  absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> second = impl_->LookupBatch(retry);
  if (!second.ok()) return results;
  for (size_t k = 0; k < retried.size(); ++k) (*results)[retried[k]] = std::move((*second)[k]);
  return results;
}

absl::StatusOr<Reservation> Client::ReservePut(const PutTarget& target,
                                               const std::optional<DenseEncoding>& dense) {
  v1::ReservePutRequest request;
  request.set_hash(HashBytes(target.hash));
  ToProto(target.position, request.mutable_position());
  bool has_heads = false;
  ToProto(target.heads, &has_heads, request.mutable_heads());
  if (!has_heads) request.clear_heads();
  request.set_ttl_ms(static_cast<uint32_t>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(target.ttl), 0, UINT32_MAX)));
  if (dense.has_value()) {
    ToProto(*dense, request.mutable_dense());
  } else {
    request.mutable_compact();
  }
  v1::ReservePutResponse response;
  absl::Status st = impl_->OnNamespace(target.namespace_id, [&](uint32_t id, uint64_t tag) {
    request.set_namespace_id(id);
    request.set_namespace_tag(tag);
    grpc::ClientContext context;
    impl_->Unary(&context);
    return FromGrpcStatus(impl_->stub->ReservePut(&context, request, &response));
  });
  if (!st.ok()) return st;
  Reservation r;
  r.put_id = response.put_id();
  r.expected_bytes = response.expected_bytes();
  r.blob_bytes = response.blob_bytes();
  r.state_bytes = response.state_bytes();
  r.side_bytes = response.side_bytes();
  r.ttl = absl::Milliseconds(response.ttl_ms());
  r.max_chunk_bytes = response.max_chunk_bytes();
  return r;
}

absl::Status Client::Upload(const Reservation& put, uint64_t offset,
                            std::span<const uint8_t> bytes) {
  // The server refuses chunks over the size it advertised (whole units for dense puts).
  size_t chunk = impl_->options.chunk_bytes;
  if (put.max_chunk_bytes > 0) chunk = std::min<size_t>(chunk, put.max_chunk_bytes);
  if (put.state_bytes > 0) {
    const size_t unit = put.state_bytes + put.side_bytes;
    chunk = std::max<size_t>(1, chunk / unit) * unit;
  }
  grpc::ClientContext context;
  impl_->Transfer(&context);
  v1::UploadPutResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadPutRequest>> writer =
      impl_->stub->UploadPut(&context, &response);
  v1::UploadPutRequest message;
  message.set_put_id(put.put_id);
  for (size_t done = 0; done < bytes.size();) {
    const size_t n = std::min(chunk, bytes.size() - done);
    message.set_offset(offset + done);
    message.set_data(reinterpret_cast<const char*>(bytes.data() + done), n);
    // A failed write means the stream is over; Finish says why.
    if (!writer->Write(message)) break;
    done += n;
  }
  writer->WritesDone();
  return FromGrpcStatus(writer->Finish());
}

absl::Status Client::CommitPut(uint64_t put_id, uint32_t crc32c) {
  v1::CommitPutRequest request;
  request.set_put_id(put_id);
  request.set_crc32c(crc32c);
  v1::CommitPutResponse response;
  grpc::ClientContext context;
  impl_->Unary(&context);
  return FromGrpcStatus(impl_->stub->CommitPut(&context, request, &response));
}

absl::Status Client::AbortPut(uint64_t put_id) {
  v1::AbortPutRequest request;
  request.set_put_id(put_id);
  v1::AbortPutResponse response;
  grpc::ClientContext context;
  impl_->Unary(&context);
  return FromGrpcStatus(impl_->stub->AbortPut(&context, request, &response));
}

namespace {

// Reserve, upload, commit; abort on any failure after the reservation.
absl::Status PutAll(Client& client, const PutTarget& target,
                    const std::optional<DenseEncoding>& dense, std::span<const uint8_t> bytes) {
  absl::StatusOr<Reservation> put = client.ReservePut(target, dense);
  if (!put.ok()) return put.status();
  absl::Status st;
  if (bytes.size() != put->expected_bytes) {
    st = absl::InvalidArgumentError(
        absl::StrCat("the put needs ", put->expected_bytes, " bytes, got ", bytes.size()));
  }
  if (st.ok()) st = client.Upload(*put, 0, bytes);
  if (st.ok()) st = client.CommitPut(put->put_id, Crc32c(bytes));
  if (!st.ok()) client.AbortPut(put->put_id).IgnoreError();  // best effort; the TTL backs it
  return st;
}

}  // namespace

absl::Status Client::PutCompact(const PutTarget& target, std::span<const uint8_t> blobs) {
  return PutAll(*this, target, std::nullopt, blobs);
}

absl::Status Client::PutDense(const PutTarget& target, const DenseEncoding& encoding,
                              std::span<const uint8_t> states) {
  return PutAll(*this, target, encoding, states);
}

namespace {

// One Get stream: the checkpoint's bytes, checked against the stream's length and CRC-32C, into
// `into` when given (it must be exactly the checkpoint's size: checked at the header, before a
// byte is written) or else into the returned Checkpoint's bytes.
absl::StatusOr<Checkpoint> ReadCheckpoint(v1::StateCache::Stub& stub, const ClientOptions& options,
                                          const v1::GetRequest& q,
                                          std::optional<std::span<uint8_t>> into) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options.transfer_timeout));
  std::unique_ptr<grpc::ClientReader<v1::GetResponse>> reader = stub.Get(&context, q);
  Checkpoint out;
  v1::GetResponse message;
  bool have_header = false;
  bool have_trailer = false;
  uint32_t crc = 0;
  uint32_t trailer_crc = 0;
  uint64_t total = 0;
  uint64_t received = 0;
  absl::Status protocol;  // the first violation of the stream's contract, if any
  absl::Status refused;   // the caller's buffer does not fit: the stream is cancelled
  while (reader->Read(&message)) {
    if (!protocol.ok()) continue;  // drain, then report
    if (message.has_header()) {
      if (have_header) {
        protocol = absl::DataLossError("get stream sent a second header");
        continue;
      }
      have_header = true;
      const v1::GetHeader& h = message.header();
      out.position = FromProto(h.position());
      out.heads = FromProto(h.heads());
      out.first_layer = static_cast<int>(h.first_layer());
      out.layers = static_cast<int>(h.layers());
      out.dk = static_cast<int>(h.dk());
      out.dv = static_cast<int>(h.dv());
      out.kind = static_cast<StateKind>(static_cast<int>(h.kind()));
      out.format = FromProto(h.format());
      out.blob_bytes = h.blob_bytes();
      out.state_bytes = h.state_bytes();
      out.side_bytes = h.side_bytes();
      if (h.has_dense()) {
        absl::StatusOr<DenseEncoding> dense = FromProto(h.dense());
        if (!dense.ok()) {
          protocol = dense.status();
          continue;
        }
        out.dense = *dense;
      }
      total = h.total_bytes();
      if (into.has_value() && total != into->size()) {
        refused = absl::OutOfRangeError(
            absl::StrCat("the checkpoint is ", total, " bytes, the buffer ", into->size()));
        protocol = refused;
        context.TryCancel();
        continue;
      }
      // Reserved up front to avoid regrowth, but never more than a sane bound on the word of
      // the server alone; larger checkpoints still arrive, growing as chunks come.
      if (!into.has_value()) out.bytes.reserve(std::min<uint64_t>(total, uint64_t{1} << 30));
    }
    if (!have_header || message.offset() != received || message.data().size() > total - received) {
      protocol = absl::DataLossError(absl::StrCat("get stream chunk at offset ", message.offset(),
                                                  " does not continue ", received, " of ", total,
                                                  " bytes"));
      continue;
    }
    const auto* data = reinterpret_cast<const uint8_t*>(message.data().data());
    const size_t n = message.data().size();
    if (into.has_value()) {
      if (n > 0) std::memcpy(into->data() + received, data, n);
    } else {
      out.bytes.insert(out.bytes.end(), data, data + n);
    }
    received += n;
    crc = Crc32cExtend(crc, data, n);
    if (message.has_trailer()) {
      have_trailer = true;
      trailer_crc = message.trailer().crc32c();
    }
  }
  const grpc::Status finished = reader->Finish();
  if (!refused.ok()) return refused;
  if (absl::Status st = FromGrpcStatus(finished); !st.ok()) return st;
  if (!protocol.ok()) return protocol;
  if (!have_header || !have_trailer || received != total) {
    return absl::DataLossError(
        absl::StrCat("get stream ended after ", received, " of ", total, " bytes"));
  }
  if (crc != trailer_crc) {
    return absl::DataLossError(absl::StrCat("get stream checksum mismatch: received ", crc,
                                            ", the server sent ", trailer_crc));
  }
  return out;
}

}  // namespace

absl::StatusOr<Checkpoint> Client::Get(const GetRequest& request) {
  return GetTo(request, std::nullopt);
}

absl::StatusOr<Checkpoint> Client::GetInto(const GetRequest& request, std::span<uint8_t> out) {
  return GetTo(request, out);
}

absl::StatusOr<Checkpoint> Client::GetTo(const GetRequest& request,
                                         std::optional<std::span<uint8_t>> into) {
  if (absl::Status st = CheckLayers(request.layers); !st.ok()) return st;
  v1::GetRequest q;
  q.set_hash(HashBytes(request.hash));
  bool has_heads = false;
  ToProto(request.heads, &has_heads, q.mutable_heads());
  if (!has_heads) q.clear_heads();
  bool has_layers = false;
  ToProto(request.layers, &has_layers, q.mutable_layers());
  if (!has_layers) q.clear_layers();
  if (request.dense.has_value()) {
    ToProto(*request.dense, q.mutable_dense());
  } else {
    q.mutable_compact();
  }
  q.set_max_chunk_bytes(impl_->options.chunk_bytes);
  return impl_->OnNamespace(request.namespace_id, [&](uint32_t id, uint64_t tag) {
    q.set_namespace_id(id);
    q.set_namespace_tag(tag);
    return ReadCheckpoint(*impl_->stub, impl_->options, q, into);
  });
}

absl::Status Client::Delete(uint32_t namespace_id, const BlockHash& hash) {
  v1::DeleteRequest request;
  request.set_hash(HashBytes(hash));
  return impl_->OnNamespace(namespace_id, [&](uint32_t id, uint64_t tag) {
    request.set_namespace_id(id);
    request.set_namespace_tag(tag);
    v1::DeleteResponse response;
    grpc::ClientContext context;
    impl_->Unary(&context);
    return FromGrpcStatus(impl_->stub->Delete(&context, request, &response));
  });
}

absl::Status Client::Pin(uint32_t namespace_id, const BlockHash& hash) {
  v1::PinRequest request;
  request.set_hash(HashBytes(hash));
  return impl_->OnNamespace(namespace_id, [&](uint32_t id, uint64_t tag) {
    request.set_namespace_id(id);
    request.set_namespace_tag(tag);
    v1::PinResponse response;
    grpc::ClientContext context;
    impl_->Unary(&context);
    return FromGrpcStatus(impl_->stub->Pin(&context, request, &response));
  });
}

absl::Status Client::Unpin(uint32_t namespace_id, const BlockHash& hash) {
  v1::UnpinRequest request;
  request.set_hash(HashBytes(hash));
  return impl_->OnNamespace(namespace_id, [&](uint32_t id, uint64_t tag) {
    request.set_namespace_id(id);
    request.set_namespace_tag(tag);
    v1::UnpinResponse response;
    grpc::ClientContext context;
    impl_->Unary(&context);
    return FromGrpcStatus(impl_->stub->Unpin(&context, request, &response));
  });
}

absl::StatusOr<ServerStats> Client::Stats() {
  v1::StatsRequest request;
  v1::StatsResponse response;
  grpc::ClientContext context;
  impl_->Unary(&context);
  if (grpc::Status st = impl_->stub->Stats(&context, request, &response); !st.ok()) {
    return FromGrpcStatus(st);
  }
  return FromProto(response);
}

absl::StatusOr<bool> Client::CheckHealth(const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  impl_->Unary(&context);
  if (grpc::Status st = impl_->health->Check(&context, request, &response); !st.ok()) {
    return FromGrpcStatus(st);
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace leapcache::client
