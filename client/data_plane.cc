#include "leapcache/data_plane.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "client/channel.h"
#include "client/grpc_status_conversion.h"
#include "client/mailbox_channel.h"
#include "client/wire_convert.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "transport/backend.h"
#include "transport/device/device_crc32c.h"
#include "transport/device/device_memory.h"

namespace leapcache::client {
namespace {

// The most bytes one get's result takes in a batch's answer: the service's bound
// (kMaxBatchGetResultBytes, data_plane_service.h), by which it refuses a channel batch whose
// answer might not fit.
constexpr size_t kBatchGetResultBytes = 512;

// A buffer the engine registered: where its bytes are, and its registration with the session's
// backend (which says where the service's transfers land: the buffer, or its staging buffer).
struct LocalBuffer {
  uint8_t* ptr = nullptr;
  size_t bytes = 0;
  MemoryKind memory = MemoryKind::kHost;
  uint64_t remote_id = 0;  // the service's buffer id; 0 in band
  std::unique_ptr<transport::EngineBuffer> registered;

  // The memory the service's transfers touch.
  uint8_t* transfer_base() const { return registered->transfer_base(); }
  bool staged() const { return registered->staged(); }
};

absl::Status CheckRange(const LocalBuffer& b, uint64_t offset, uint64_t bytes, const char* what) {
  if (offset > b.bytes || bytes > b.bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat(what, " [", offset, ", ", offset + bytes,
                                              ") does not fit the ", b.bytes, "-byte buffer"));
  }
  return absl::OkStatus();
}

absl::Status CopyIntoBuffer(const LocalBuffer& b, uint64_t offset, const uint8_t* src, size_t n) {
  if (b.memory == MemoryKind::kHost) {
    std::memcpy(b.ptr + offset, src, n);
    return absl::OkStatus();
  }
  return transport::CopyHostToDevice(b.ptr + offset, src, n);
}

absl::StatusOr<TransferredCheckpoint> FromHeader(const v1::GetHeader& h) {
  TransferredCheckpoint out;
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
  out.total_bytes = h.total_bytes();
  if (h.has_dense()) {
    absl::StatusOr<DenseEncoding> dense = FromProto(h.dense());
    if (!dense.ok()) return dense.status();
    out.dense = *dense;
  }
  return out;
}

std::string ThisHost() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

struct AttachedEngine::Impl {
  ClientOptions options;
  std::unique_ptr<Client> client;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::DataPlane::Stub> stub;
  uint64_t session_id = 0;
  Transport transport = Transport::kInline;
  absl::Duration session_ttl;
  // The chosen backend's row and the engine's side of it. Declared before `buffers`: the
  // registrations go first, then the backend's link.
  const transport::Backend* backend = nullptr;
  std::unique_ptr<transport::EngineBackend> link;
  absl::Mutex mu;  // serializes calls (the service runs one per session)
  absl::flat_hash_map<BufferId, std::unique_ptr<LocalBuffer>> buffers ABSL_GUARDED_BY(mu);
  BufferId next_buffer ABSL_GUARDED_BY(mu) = 1;
  bool detached ABSL_GUARDED_BY(mu) = false;
  absl::Notification stop_keepalive;
  std::thread keepalive;
  // The transfer channel (data_plane.proto, OpenTransferChannel), from the first transfer that
  // got one until it breaks (the next transfer asks again). `no_channel`: kAuto found none to
  // be had (another host, a server that serves none), so transfers keep to the RPCs.
  TransferChannel channel_mode = TransferChannel::kAuto;
  absl::Duration channel_spin;
  std::unique_ptr<MailboxChannel> transfer_channel ABSL_GUARDED_BY(mu);
  bool no_channel ABSL_GUARDED_BY(mu) = false;
  bool last_through_channel ABSL_GUARDED_BY(mu) = false;
  std::string request_bytes ABSL_GUARDED_BY(mu);
  std::vector<uint8_t> reply_bytes ABSL_GUARDED_BY(mu);

  // Runs a transfer call (an RPC, or a request through the channel) during which the service
  // moves bytes over the link.
  absl::Status RunTransfer(absl::FunctionRef<absl::Status()> call) {
    absl::Status called;
    link->During([&] {
          called = call();
          return absl::OkStatus();
        })
        .IgnoreError();
    return called;
  }
  // Whether this transfer goes through the channel, which is asked for on first use. An error
  // only where kSharedMemory cannot have one.
  absl::StatusOr<bool> UseChannel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (transfer_channel != nullptr && transfer_channel->open()) return true;
    transfer_channel.reset();
    if (no_channel || channel_mode == TransferChannel::kRpc) return false;
    absl::StatusOr<std::unique_ptr<MailboxChannel>> opened =
        MailboxChannel::Open<v1::TransferChannelEvent>([&](grpc::ClientContext* c) {
          v1::OpenTransferChannelRequest open;
          open.set_session_id(session_id);
          return stub->OpenTransferChannel(c, open);
        });
    if (!opened.ok()) {
      if (channel_mode == TransferChannel::kSharedMemory) {
        return absl::Status(opened.status().code(),
                            absl::StrCat("no transfer channel: ", opened.status().message()));
      }
      no_channel = true;
      return false;
    }
    transfer_channel = *std::move(opened);
    return true;
  }
  // One transfer through the channel: its reply in `reply`, the transfer's status.
  absl::Status ChannelTransfer(const v1::TransferChannelRequest& request,
                               v1::TransferChannelReply* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    request.SerializeToString(&request_bytes);
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(request_bytes.data()),
                                         request_bytes.size());
    // While the channel's call is up, its connection is READY; a service that died takes it down.
    const auto alive = [this] { return channel->GetState(false) == GRPC_CHANNEL_READY; };
    // The service answers by the request's own deadline; the wait gives it a little longer.
    LC_RETURN_IF_ERROR(
        transfer_channel->Call(bytes, &reply_bytes, channel_spin,
                               absl::Now() + options.transfer_timeout + absl::Seconds(2), alive));
    if (!reply->ParseFromArray(reply_bytes.data(), static_cast<int>(reply_bytes.size()))) {
      (void)transfer_channel->End();
      return absl::DataLossError("the transfer channel's reply does not parse");
    }
    std::optional<absl::Status> st = ReplyStatus(reply->code(), reply->message());
    if (!st.has_value()) {
      (void)transfer_channel->End();
      return absl::DataLossError(absl::StrCat("the transfer channel replied code ", reply->code()));
    }
    return *st;
  }
  // A get of an in-band backend: the checkpoint over the client's Get stream, copied into `b`.
  absl::StatusOr<TransferredCheckpoint> GetInBand(const GetRequest& request, const LocalBuffer& b,
                                                  uint64_t offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    LC_ASSIGN_OR_RETURN(Checkpoint got, client->Get(request));
    LC_RETURN_IF_ERROR(CheckRange(b, offset, got.bytes.size(), "the checkpoint at offset"));
    LC_RETURN_IF_ERROR(CopyIntoBuffer(b, offset, got.bytes.data(), got.bytes.size()));
    TransferredCheckpoint out;
    out.position = got.position;
    out.heads = got.heads;
    out.first_layer = got.first_layer;
    out.layers = got.layers;
    out.dk = got.dk;
    out.dv = got.dv;
    out.kind = got.kind;
    out.format = got.format;
    out.blob_bytes = got.blob_bytes;
    out.state_bytes = got.state_bytes;
    out.side_bytes = got.side_bytes;
    out.total_bytes = got.bytes.size();
    out.dense = got.dense;
    out.crc32c = Crc32c(got.bytes);
    return out;
  }
  // The rest of a get the service answered with `r`: the bytes received where the backend is
  // two-sided, checked against the service's CRC-32C where they landed, and copied out of the
  // staging buffer where the buffer has one.
  absl::StatusOr<TransferredCheckpoint> FinishGet(const v1::TransferGetResponse& r,
                                                  const LocalBuffer& b, uint64_t offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    LC_ASSIGN_OR_RETURN(TransferredCheckpoint out, FromHeader(r.header()));
    if (absl::Status st = CheckRange(b, offset, out.total_bytes, "the service's write"); !st.ok()) {
      return absl::DataLossError(st.message());
    }
    if (out.total_bytes > 0) {
      // A two-sided backend: the service posted the checkpoint as one send before answering,
      // so receive it now (one-sided backends have it already).
      const absl::Time deadline = absl::Now() + options.transfer_timeout;
      LC_RETURN_IF_ERROR(
          link->Post({}, std::span<uint8_t>(b.ptr + offset, out.total_bytes), deadline));
      LC_RETURN_IF_ERROR(link->Wait(deadline));
    }
    // The bytes as they landed: in host memory, or device memory the service wrote directly
    // (CUDA IPC, NCCL, UCX with CUDA support), checked where it is.
    const uint8_t* landed = b.transfer_base() + offset;
    if (r.crc32c_of_landed() && b.memory == MemoryKind::kCuda && !b.staged()) {
      // The service wrote them into this buffer on its GPU and checksummed them there.
      out.crc32c = r.crc32c();
      out.checked_by_service = true;
      return out;
    }
    if (b.memory == MemoryKind::kCuda && !b.staged()) {
      LC_ASSIGN_OR_RETURN(out.crc32c, transport::DeviceCrc32c(landed, out.total_bytes));
    } else {
      out.crc32c = Crc32c({landed, out.total_bytes});
    }
    if (out.crc32c != r.crc32c()) {
      return absl::DataLossError(absl::StrCat("the bytes that landed have CRC-32C ", out.crc32c,
                                              ", the service sent ", r.crc32c()));
    }
    if (b.staged()) LC_RETURN_IF_ERROR(CopyIntoBuffer(b, offset, landed, out.total_bytes));
    return out;
  }
  // Sends a registration's descriptor to the service; the service's buffer id.
  absl::StatusOr<uint64_t> RegisterRemote(const transport::BufferDescriptor& d) {
    v1::RegisterBufferRequest q;
    q.set_session_id(session_id);
    v1::BufferDescriptor* w = q.mutable_buffer();
    w->set_transport(static_cast<v1::TransportKind>(static_cast<int>(d.transport)));
    w->set_memory(d.memory == transport::MemoryKind::kCuda ? v1::MEMORY_KIND_CUDA
                                                           : v1::MEMORY_KIND_HOST);
    w->set_address(d.address);
    w->set_bytes(d.bytes);
    w->set_remote_key(d.key);
    v1::RegisterBufferResponse r;
    grpc::ClientContext c;
    Deadline(&c, options.rpc_timeout);
    if (grpc::Status st = stub->RegisterBuffer(&c, q, &r); !st.ok()) return FromGrpcStatus(st);
    return r.buffer_id();
  }
  void Deadline(grpc::ClientContext* c, absl::Duration d) const {
    c->set_deadline(DeadlineAfter(d));
  }
  // After a call the service may have failed before matching a two-sided post: wait briefly.
  absl::Time WaitDeadline(bool call_ok, absl::Time deadline) const {
    return call_ok ? deadline : std::min(deadline, absl::Now() + absl::Seconds(2));
  }
  // Ends the session at the service.
  grpc::Status DetachRemote() {
    v1::DetachRequest q;
    q.set_session_id(session_id);
    v1::DetachResponse r;
    grpc::ClientContext c;
    Deadline(&c, options.rpc_timeout);
    return stub->Detach(&c, q, &r);
  }
  void KeepaliveLoop() {
    while (!stop_keepalive.WaitForNotificationWithTimeout(session_ttl / 3)) {
      v1::KeepaliveRequest q;
      q.set_session_id(session_id);
      v1::KeepaliveResponse r;
      grpc::ClientContext c;
      Deadline(&c, options.rpc_timeout);
      // A failure here surfaces on the next transfer (NOT_FOUND: the session ended).
      stub->Keepalive(&c, q, &r);
    }
  }
  void StopKeepalive() {
    if (!stop_keepalive.HasBeenNotified()) stop_keepalive.Notify();
    if (keepalive.joinable()) keepalive.join();
  }
  absl::Status CheckAttached() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (detached) return absl::FailedPreconditionError("the engine has detached");
    // A broken link (an aborted NCCL communicator) cannot carry transfers: the session is over.
    return link->health();
  }
  absl::StatusOr<LocalBuffer*> Find(BufferId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = buffers.find(id);
    if (it == buffers.end()) {
      return absl::NotFoundError(absl::StrCat("buffer ", id, " is not registered"));
    }
    return it->second.get();
  }
};

AttachedEngine::AttachedEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AttachedEngine::~AttachedEngine() { Detach().IgnoreError(); }

Transport AttachedEngine::transport() const { return impl_->transport; }
uint64_t AttachedEngine::session_id() const { return impl_->session_id; }
Client& AttachedEngine::client() { return *impl_->client; }

absl::StatusOr<std::unique_ptr<AttachedEngine>> AttachedEngine::Attach(
    const ClientOptions& options, const EngineIdentity& identity, const AttachOptions& attach) {
  if (identity.name.empty()) return absl::InvalidArgumentError("identity.name is empty");
  if (attach.transports.empty()) return absl::InvalidArgumentError("no transport offered");
  if (attach.session_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("session_ttl must be at least 1 s");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->session_ttl = attach.session_ttl;
  impl->channel_mode = attach.transfer_channel;
  impl->channel_spin = attach.channel_spin;
  LC_ASSIGN_OR_RETURN(impl->client, Client::Create(options));
  LC_ASSIGN_OR_RETURN(impl->channel, ConnectChannel(options));
  impl->stub = v1::DataPlane::NewStub(impl->channel);

  v1::AttachRequest q;
  v1::EngineIdentity* id = q.mutable_identity();
  id->set_name(identity.name);
  id->set_host(identity.host.empty() ? ThisHost() : identity.host);
  id->set_pid(identity.pid != 0 ? identity.pid : static_cast<uint32_t>(getpid()));
  id->set_gpu_uuid(identity.gpu_uuid);
  id->set_gpu_index(identity.gpu_index);
  q.set_session_ttl_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(attach.session_ttl)));
  // The engine's side of every offered backend; the one the service chooses stays.
  const transport::EngineSettings settings{attach.ucx_transports, identity.gpu_index,
                                           identity.gpu_uuid};
  std::vector<std::unique_ptr<transport::EngineBackend>> offered;
  for (Transport t : attach.transports) {
    const auto kind = static_cast<transport::TransportKind>(static_cast<int>(t));
    const transport::Backend* b = transport::FindBackend(kind);
    if (b == nullptr && transport::TransportName(kind) == "unknown") {
      return absl::InvalidArgumentError(
          absl::StrCat("transport ", static_cast<int>(t), " is unknown"));
    }
    if (b == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("this client library was built without ", transport::TransportName(kind)));
    }
    LC_ASSIGN_OR_RETURN(std::unique_ptr<transport::EngineBackend> e, b->make_engine(settings));
    // A backend that needs the engine's GPU named (NCCL) names it in the identity.
    if (std::optional<std::string> uuid = e->gpu_uuid(); uuid.has_value()) {
      id->set_gpu_uuid(*uuid);
      id->set_gpu_index(e->gpu_index());
    }
    v1::TransportOffer* offer = q.add_offers();
    offer->set_kind(static_cast<v1::TransportKind>(static_cast<int>(kind)));
    if (std::string info = e->connection_info(); !info.empty()) offer->set_connection_info(info);
    offer->set_cuda_memory(e->cuda_memory());
    offered.push_back(std::move(e));
  }
  v1::AttachResponse r;
  grpc::ClientContext c;
  impl->Deadline(&c, options.rpc_timeout);
  if (grpc::Status st = impl->stub->Attach(&c, q, &r); !st.ok()) return FromGrpcStatus(st);
  impl->session_id = r.session_id();
  impl->transport = static_cast<Transport>(static_cast<int>(r.transport()));
  const auto chosen = static_cast<transport::TransportKind>(static_cast<int>(r.transport()));
  for (std::unique_ptr<transport::EngineBackend>& e : offered) {
    if (e->kind() == chosen && impl->link == nullptr) impl->link = std::move(e);
  }
  offered.clear();  // not chosen: nothing of theirs may keep running
  if (impl->link == nullptr) {
    impl->DetachRemote();
    return absl::InternalError(absl::StrCat("the service chose transport ",
                                            transport::TransportName(chosen),
                                            ", which was not offered"));
  }
  impl->backend = transport::FindBackend(chosen);
  // Complete the link the service started; a failure ends the session at once.
  if (absl::Status joined =
          impl->link->Join(r.connection_info(), absl::Now() + options.rpc_timeout);
      !joined.ok()) {
    impl->DetachRemote();
    return joined;
  }
  Impl* raw = impl.get();
  impl->keepalive = std::thread([raw] { raw->KeepaliveLoop(); });
  return std::unique_ptr<AttachedEngine>(new AttachedEngine(std::move(impl)));
}

bool AttachedEngine::transferring_through_channel() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->last_through_channel;
}

absl::Status AttachedEngine::Detach() {
  Impl& m = *impl_;
  m.StopKeepalive();
  absl::MutexLock lock(&m.mu);
  if (m.detached) return absl::OkStatus();
  m.detached = true;
  m.transfer_channel.reset();  // closes its mailbox and ends its call
  const grpc::Status st = m.DetachRemote();
  // The service no longer reaches the buffers: unregister them locally, then end the link.
  m.buffers.clear();
  m.link.reset();
  return FromGrpcStatus(st);
}

absl::StatusOr<BufferId> AttachedEngine::RegisterBuffer(void* ptr, size_t bytes,
                                                        MemoryKind memory) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  if (absl::Status st = m.CheckAttached(); !st.ok()) return st;
  if (ptr == nullptr) return absl::InvalidArgumentError("buffer pointer is null");
  if (bytes == 0) return absl::InvalidArgumentError("buffer bytes is 0");
  if (memory != MemoryKind::kHost && memory != MemoryKind::kCuda) {
    return absl::InvalidArgumentError("memory kind is unknown");
  }
  auto b = std::make_unique<LocalBuffer>();
  b->ptr = static_cast<uint8_t*>(ptr);
  b->bytes = bytes;
  b->memory = memory;
  if (memory == MemoryKind::kCuda) LC_RETURN_IF_ERROR(transport::CheckDevicePointer(ptr));
  LC_ASSIGN_OR_RETURN(b->registered,
                      m.link->Register(ptr, bytes,
                                       memory == MemoryKind::kCuda ? transport::MemoryKind::kCuda
                                                                   : transport::MemoryKind::kHost));
  if (std::optional<transport::BufferDescriptor> d = b->registered->descriptor(); d.has_value()) {
    LC_ASSIGN_OR_RETURN(b->remote_id, m.RegisterRemote(*d));
  }
  const BufferId id = m.next_buffer++;
  m.buffers[id] = std::move(b);
  return id;
}

absl::Status AttachedEngine::ReleaseBuffer(BufferId buffer) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  absl::StatusOr<LocalBuffer*> b = m.Find(buffer);
  if (!b.ok()) return b.status();
  absl::Status remote = absl::OkStatus();
  if ((*b)->remote_id != 0 && !m.detached) {
    v1::ReleaseBufferRequest q;
    q.set_session_id(m.session_id);
    q.set_buffer_id((*b)->remote_id);
    v1::ReleaseBufferResponse r;
    grpc::ClientContext c;
    m.Deadline(&c, m.options.rpc_timeout);
    remote = FromGrpcStatus(m.stub->ReleaseBuffer(&c, q, &r));
  }
  // Unregistered here whatever the service said: it can no longer be reached through us.
  m.buffers.erase(buffer);
  return remote;
}

absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> AttachedEngine::LookupBatch(
    std::span<const LookupRequest> requests) {
  Impl& m = *impl_;
  {
    absl::MutexLock lock(&m.mu);
    m.last_through_channel = false;
    if (!m.detached && !requests.empty()) {
      v1::TransferChannelRequest through;
      v1::LookupBatchRequest& batch = *through.mutable_lookups();
      for (const LookupRequest& r : requests) {
        v1::LookupRequest* q = batch.add_lookups();
        ToProto(r, q);
        q->set_namespace_id(r.namespace_id);
        q->set_namespace_tag(m.client->RegisteredTag(r.namespace_id).value_or(0));
      }
      through.set_timeout_us(
          static_cast<uint64_t>(absl::ToInt64Microseconds(m.options.rpc_timeout)));
      LC_ASSIGN_OR_RETURN(const bool use, m.UseChannel());
      if (use && through.ByteSizeLong() <= m.transfer_channel->capacity()) {
        v1::TransferChannelReply reply;
        const absl::Status st = m.ChannelTransfer(through, &reply);
        // RESOURCE_EXHAUSTED: the answers did not fit the mailbox; ask over the RPC.
        if (st.code() != absl::StatusCode::kResourceExhausted) {
          if (!st.ok()) return st;
          m.last_through_channel = true;
          return FromProto(reply.lookups(), batch.lookups_size());
        }
      }
    }
  }
  return m.client->LookupBatch(requests);
}

absl::StatusOr<LookupResult> AttachedEngine::Lookup(const LookupRequest& request) {
  absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> one =
      LookupBatch(std::span<const LookupRequest>(&request, 1));
  if (!one.ok()) return one.status();
  return std::move(one->front());
}

namespace {

// The data-plane request of a get into `b` at `offset`.
void BuildGet(const GetRequest& request, uint64_t session_id, uint64_t tag, const LocalBuffer& b,
              uint64_t offset, v1::TransferGetRequest* q) {
  q->set_session_id(session_id);
  q->set_namespace_id(request.namespace_id);
  q->set_namespace_tag(tag);
  q->set_hash(HashBytes(request.hash));
  bool present = false;
  ToProto(request.heads, &present, q->mutable_heads());
  if (!present) q->clear_heads();
  ToProto(request.layers, &present, q->mutable_layers());
  if (!present) q->clear_layers();
  if (request.dense.has_value()) {
    ToProto(*request.dense, q->mutable_dense());
  } else {
    q->mutable_compact();
  }
  q->set_buffer_id(b.remote_id);
  q->set_offset(offset);
}

}  // namespace

absl::StatusOr<TransferredCheckpoint> AttachedEngine::GetInto(const GetRequest& request,
                                                              BufferId buffer, uint64_t offset) {
  Impl& m = *impl_;
  if (absl::Status st = CheckLayers(request.layers); !st.ok()) return st;
  absl::MutexLock lock(&m.mu);
  if (absl::Status st = m.CheckAttached(); !st.ok()) return st;
  absl::StatusOr<LocalBuffer*> found = m.Find(buffer);
  if (!found.ok()) return found.status();
  const LocalBuffer& b = **found;
  if (m.backend->in_band) return m.GetInBand(request, b, offset);

  v1::TransferChannelRequest through;
  v1::TransferGetRequest& q = *through.mutable_get();
  BuildGet(request, m.session_id, m.client->RegisteredTag(request.namespace_id).value_or(0), b,
           offset, &q);
  LC_ASSIGN_OR_RETURN(m.last_through_channel, m.UseChannel());
  v1::TransferChannelReply reply;  // through the channel: the answer is reply.get()
  v1::TransferGetResponse answer;  // as the RPC's response
  if (m.last_through_channel) {
    through.set_timeout_us(
        static_cast<uint64_t>(absl::ToInt64Microseconds(m.options.transfer_timeout)));
    LC_RETURN_IF_ERROR(m.RunTransfer([&] { return m.ChannelTransfer(through, &reply); }));
  } else {
    grpc::ClientContext c;
    m.Deadline(&c, m.options.transfer_timeout);
    LC_RETURN_IF_ERROR(
        m.RunTransfer([&] { return FromGrpcStatus(m.stub->TransferGet(&c, q, &answer)); }));
  }
  // Taken only now: parsing the channel's reply replaces its submessages.
  return m.FinishGet(m.last_through_channel ? reply.get() : answer, b, offset);
}

absl::StatusOr<std::vector<absl::StatusOr<TransferredCheckpoint>>> AttachedEngine::GetBatch(
    std::span<const GetItem> items) {
  Impl& m = *impl_;
  if (items.empty() || items.size() > kMaxGetBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("a get batch holds 1..", kMaxGetBatch, " gets, not ", items.size()));
  }
  std::vector<absl::StatusOr<TransferredCheckpoint>> results(items.size(),
                                                             absl::UnknownError("not answered"));
  {
    absl::MutexLock lock(&m.mu);
    if (absl::Status st = m.CheckAttached(); !st.ok()) return st;
  }
  // In band or two-sided: each get is its own call.
  if (m.backend->in_band || m.link->two_sided()) {
    for (size_t i = 0; i < items.size(); ++i) {
      results[i] = GetInto(items[i].request, items[i].buffer, items[i].offset);
    }
    return results;
  }
  absl::MutexLock lock(&m.mu);
  // The gets to send (their index), each checked here first: a bad one fails alone.
  std::vector<size_t> sent;
  std::vector<const LocalBuffer*> into(items.size(), nullptr);
  for (size_t i = 0; i < items.size(); ++i) {
    if (absl::Status st = CheckLayers(items[i].request.layers); !st.ok()) {
      results[i] = st;
      continue;
    }
    absl::StatusOr<LocalBuffer*> found = m.Find(items[i].buffer);
    if (!found.ok()) {
      results[i] = found.status();
      continue;
    }
    into[i] = *found;
    sent.push_back(i);
  }
  LC_ASSIGN_OR_RETURN(m.last_through_channel, m.UseChannel());
  // A channel answers as many gets as its mailbox holds answers for (data_plane_service.h).
  const size_t per_call =
      m.last_through_channel
          ? std::max<size_t>(1, (m.transfer_channel->capacity() - 64) / kBatchGetResultBytes)
          : kMaxGetBatch;
  for (size_t first = 0; first < sent.size(); first += per_call) {
    const size_t n = std::min(per_call, sent.size() - first);
    v1::TransferChannelRequest through;
    v1::TransferGetBatchRequest& q = *through.mutable_gets();
    q.set_session_id(m.session_id);
    for (size_t k = 0; k < n; ++k) {
      const size_t i = sent[first + k];
      const GetRequest& request = items[i].request;
      BuildGet(request, m.session_id, m.client->RegisteredTag(request.namespace_id).value_or(0),
               *into[i], items[i].offset, q.add_gets());
    }
    v1::TransferChannelReply reply;
    v1::TransferGetBatchResponse answer;
    absl::Status called;
    if (m.last_through_channel) {
      through.set_timeout_us(
          static_cast<uint64_t>(absl::ToInt64Microseconds(m.options.transfer_timeout)));
      called = m.RunTransfer([&] { return m.ChannelTransfer(through, &reply); });
    } else {
      grpc::ClientContext c;
      m.Deadline(&c, m.options.transfer_timeout);
      called =
          m.RunTransfer([&] { return FromGrpcStatus(m.stub->TransferGetBatch(&c, q, &answer)); });
    }
    const v1::TransferGetBatchResponse& r = m.last_through_channel ? reply.gets() : answer;
    if (called.ok() && r.results_size() != static_cast<int>(n)) {
      called = absl::DataLossError(
          absl::StrCat("the service answered ", r.results_size(), " of a batch of ", n, " gets"));
    }
    for (size_t k = 0; k < n; ++k) {
      const size_t i = sent[first + k];
      if (!called.ok()) {
        results[i] = called;
        continue;
      }
      const v1::TransferGetBatchResult& one = r.results(static_cast<int>(k));
      std::optional<absl::Status> st = ReplyStatus(one.code(), one.message());
      if (!st.has_value()) {
        results[i] = absl::DataLossError(absl::StrCat("the service answered code ", one.code()));
      } else if (!st->ok()) {
        results[i] = *st;
      } else {
        results[i] = m.FinishGet(one.get(), *into[i], items[i].offset);
      }
    }
  }
  return results;
}

absl::Status AttachedEngine::PutFrom(const PutTarget& target,
                                     const std::optional<DenseEncoding>& dense, BufferId buffer,
                                     uint64_t offset, uint64_t length) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  if (absl::Status st = m.CheckAttached(); !st.ok()) return st;
  absl::StatusOr<LocalBuffer*> found = m.Find(buffer);
  if (!found.ok()) return found.status();
  const LocalBuffer& b = **found;
  if (absl::Status st = CheckRange(b, offset, length, "offset + length"); !st.ok()) return st;

  // Device memory the transport reaches itself is checksummed where it is (DeviceCrc32c) and
  // never copied; otherwise the bytes as host memory: the buffer itself, its staging buffer, or
  // (in band) a copy.
  const bool on_device = b.memory == MemoryKind::kCuda && !b.staged() && !m.backend->in_band;
  std::vector<uint8_t> host_copy;
  const uint8_t* bytes = b.transfer_base() + offset;
  uint32_t crc = 0;
  if (on_device) {
    LC_ASSIGN_OR_RETURN(crc, transport::DeviceCrc32c(b.ptr + offset, length));
  } else {
    if (b.memory == MemoryKind::kCuda) {
      uint8_t* dst = b.staged() ? b.transfer_base() + offset : nullptr;
      if (dst == nullptr) {
        host_copy.resize(length);
        dst = host_copy.data();
      }
      if (absl::Status st = transport::CopyDeviceToHost(dst, b.ptr + offset, length); !st.ok()) {
        return st;
      }
      bytes = dst;
    }
    crc = Crc32c({bytes, length});
  }

  if (m.backend->in_band) {
    const std::span<const uint8_t> data(bytes, length);
    return dense.has_value() ? m.client->PutDense(target, *dense, data)
                             : m.client->PutCompact(target, data);
  }
  v1::TransferChannelRequest through;
  v1::TransferPutRequest& q = *through.mutable_put();
  q.set_session_id(m.session_id);
  q.set_namespace_id(target.namespace_id);
  q.set_namespace_tag(m.client->RegisteredTag(target.namespace_id).value_or(0));
  q.set_hash(HashBytes(target.hash));
  ToProto(target.position, q.mutable_position());
  bool present = false;
  ToProto(target.heads, &present, q.mutable_heads());
  if (!present) q.clear_heads();
  q.set_ttl_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(target.ttl)));
  if (dense.has_value()) {
    ToProto(*dense, q.mutable_dense());
  } else {
    q.mutable_compact();
  }
  q.set_buffer_id(b.remote_id);
  q.set_offset(offset);
  q.set_length(length);
  q.set_crc32c(crc);
  absl::StatusOr<bool> use_channel = m.UseChannel();
  if (!use_channel.ok()) return use_channel.status();
  m.last_through_channel = *use_channel;
  // A two-sided backend posts its send before the call: the service receives the bytes first,
  // whatever it then decides.
  const absl::Time deadline = absl::Now() + m.options.transfer_timeout;
  LC_RETURN_IF_ERROR(m.link->Post({b.ptr + offset, length}, {}, deadline));
  absl::Status put;
  if (m.last_through_channel) {
    through.set_timeout_us(
        static_cast<uint64_t>(absl::ToInt64Microseconds(m.options.transfer_timeout)));
    v1::TransferChannelReply reply;
    put = m.RunTransfer([&] { return m.ChannelTransfer(through, &reply); });
  } else {
    v1::TransferPutResponse r;
    grpc::ClientContext c;
    m.Deadline(&c, m.options.transfer_timeout);
    put = m.RunTransfer([&] { return FromGrpcStatus(m.stub->TransferPut(&c, q, &r)); });
  }
  // The service answers only after its receive completed, so the send completes at once; if it
  // failed before receiving (an ended session), the post cannot be matched any more and the
  // wait aborts the link.
  const absl::Status sent = m.link->Wait(m.WaitDeadline(put.ok(), deadline));
  if (!put.ok()) return put;
  return sent;
}

absl::Status AttachedEngine::RunStepTransfer(
    BufferId buffer, uint64_t in_offset, uint64_t in_bytes, uint64_t out_offset, uint64_t out_bytes,
    const std::function<absl::Status(uint64_t session, uint64_t remote_buffer)>& call) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  if (absl::Status st = m.CheckAttached(); !st.ok()) return st;
  absl::StatusOr<LocalBuffer*> found = m.Find(buffer);
  if (!found.ok()) return found.status();
  const LocalBuffer& b = **found;
  if (m.backend->in_band) {
    return absl::FailedPreconditionError(
        "the engine's data plane is inline: step with DecodeSession::Step");
  }
  if (absl::Status st = CheckRange(b, in_offset, in_bytes, "the step's inputs"); !st.ok()) {
    return st;
  }
  if (absl::Status st = CheckRange(b, out_offset, out_bytes, "the step's o"); !st.ok()) return st;
  if (b.staged()) {
    LC_RETURN_IF_ERROR(
        transport::CopyDeviceToHost(b.transfer_base() + in_offset, b.ptr + in_offset, in_bytes));
  }
  // A two-sided backend posts both before the call, in the order the service takes them.
  const absl::Time deadline = absl::Now() + m.options.transfer_timeout;
  LC_RETURN_IF_ERROR(
      m.link->Post({b.ptr + in_offset, in_bytes}, {b.ptr + out_offset, out_bytes}, deadline));
  absl::Status stepped;
  m.RunTransfer([&] {
     stepped = call(m.session_id, b.remote_id);
     return absl::OkStatus();
   }).IgnoreError();
  // The service writes o whenever it read the inputs; if it failed before, nothing matches and
  // the wait aborts the link (as for a put).
  const absl::Status moved = m.link->Wait(m.WaitDeadline(stepped.ok(), deadline));
  if (!stepped.ok()) return stepped;
  LC_RETURN_IF_ERROR(moved);
  if (b.staged()) {
    return CopyIntoBuffer(b, out_offset, b.transfer_base() + out_offset, out_bytes);
  }
  return absl::OkStatus();
}

}  // namespace leapcache::client
