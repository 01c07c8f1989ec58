#include "leapcache/data_plane.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/channel.h"
#include "client/grpc_status_conversion.h"
#include "client/wire_convert.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "service/transport/transport.h"

#ifdef LEAPCACHE_TRANSPORT_UCX
#include "service/transport/ucx_context.h"
#include "service/transport/ucx_target_worker.h"
#endif
#ifdef LEAPCACHE_TRANSPORT_CUDA
#include "service/transport/cuda_ipc.h"
#include "service/transport/cuda_staging.h"
#include "service/transport/device_crc32c.h"
#endif
#ifdef LEAPCACHE_TRANSPORT_NCCL
#include <cuda_runtime_api.h>

#include "service/transport/nccl_link.h"
#endif

namespace leapcache::client {
namespace {

// A buffer the engine registered: where its bytes are, and what the service reaches instead
// when the transport cannot touch device memory (the pinned staging buffer).
struct LocalBuffer {
  uint8_t* ptr = nullptr;
  size_t bytes = 0;
  MemoryKind memory = MemoryKind::kHost;
  uint64_t remote_id = 0;  // the service's buffer id; 0 on inline
#ifdef LEAPCACHE_TRANSPORT_CUDA
  std::unique_ptr<transport::PinnedHostBuffer> staging;  // declared first: outlives registration
#endif
  std::unique_ptr<transport::Registration> registration;

  // The memory the service's transfers touch.
  uint8_t* transfer_base() const {
#ifdef LEAPCACHE_TRANSPORT_CUDA
    if (staging != nullptr) return static_cast<uint8_t*>(staging->data());
#endif
    return ptr;
  }
  bool staged() const { return transfer_base() != ptr; }
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
#ifdef LEAPCACHE_TRANSPORT_CUDA
  return transport::CopyHostToDevice(b.ptr + offset, src, n);
#else
  return absl::FailedPreconditionError("built without CUDA");
#endif
}

absl::StatusOr<TransferredCheckpoint> FromHeader(const v1::GetHeader& h) {
  TransferredCheckpoint out;
  out.position = FromProto(h.position());
  out.heads = FromProto(h.heads());
  out.layers = static_cast<int>(h.layers());
  out.dk = static_cast<int>(h.dk());
  out.dv = static_cast<int>(h.dv());
  out.kind = static_cast<StateKind>(static_cast<int>(h.kind()));
  out.format = FromProto(h.format());
  out.blob_bytes = h.blob_bytes();
  out.state_bytes = h.state_bytes();
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
#ifdef LEAPCACHE_TRANSPORT_UCX
  // Declared before `buffers`: registrations go first, then the worker, then the context.
  std::unique_ptr<transport::UcxContext> ucx;
  std::unique_ptr<transport::UcxTargetWorker> ucx_worker;
#endif
#ifdef LEAPCACHE_TRANSPORT_NCCL
  // The engine's rank of the session's communicator (NCCL sessions), on `cuda_device`.
  std::unique_ptr<transport::NcclLink> nccl;
#endif
  int cuda_device = -1;
  absl::Mutex mu;  // serializes calls (the service runs one per session)
  absl::flat_hash_map<BufferId, std::unique_ptr<LocalBuffer>> buffers ABSL_GUARDED_BY(mu);
  BufferId next_buffer ABSL_GUARDED_BY(mu) = 1;
  bool detached ABSL_GUARDED_BY(mu) = false;
  absl::Notification stop_keepalive;
  std::thread keepalive;

  // Runs a transfer RPC with the UCX worker polling busily meanwhile (the service is moving
  // bytes through it).
  template <typename F>
  grpc::Status RunTransfer(F call) {
#ifdef LEAPCACHE_TRANSPORT_UCX
    if (ucx_worker != nullptr) {
      transport::UcxTargetWorker::Busy busy(ucx_worker.get());
      return call();
    }
#endif
    return call();
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
#ifdef LEAPCACHE_TRANSPORT_NCCL
    // An aborted link cannot match the service's transfers any more: the session is over.
    if (nccl != nullptr) return nccl->health();
#endif
    return absl::OkStatus();
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
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) return client.status();
  impl->client = std::move(client).value();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectChannel(options);
  if (!channel.ok()) return channel.status();
  impl->channel = std::move(channel).value();
  impl->stub = v1::DataPlane::NewStub(impl->channel);

  v1::AttachRequest q;
  v1::EngineIdentity* id = q.mutable_identity();
  id->set_name(identity.name);
  id->set_host(identity.host.empty() ? ThisHost() : identity.host);
  id->set_pid(identity.pid != 0 ? identity.pid : static_cast<uint32_t>(getpid()));
  id->set_gpu_uuid(identity.gpu_uuid);
  id->set_gpu_index(identity.gpu_index);
  const bool offers_nccl = std::find(attach.transports.begin(), attach.transports.end(),
                                     Transport::kNccl) != attach.transports.end();
  if (offers_nccl) {
#ifdef LEAPCACHE_TRANSPORT_NCCL
    // NCCL needs the engine's GPU, named by UUID so the service can tell it from its own.
    impl->cuda_device = identity.gpu_index;
    if (impl->cuda_device < 0 && cudaGetDevice(&impl->cuda_device) != cudaSuccess) {
      return absl::FailedPreconditionError("NCCL offered, but this process has no CUDA device");
    }
    absl::StatusOr<std::string> uuid = transport::CudaDeviceUuid(impl->cuda_device);
    if (!uuid.ok()) return uuid.status();
    if (!identity.gpu_uuid.empty() && identity.gpu_uuid != *uuid) {
      return absl::InvalidArgumentError(absl::StrCat("identity.gpu_uuid ", identity.gpu_uuid,
                                                     " is not CUDA device ", impl->cuda_device,
                                                     "'s (", *uuid, ")"));
    }
    id->set_gpu_uuid(*uuid);
    id->set_gpu_index(impl->cuda_device);
#else
    return absl::FailedPreconditionError("this client library was built without NCCL");
#endif
  }
  q.set_session_ttl_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(attach.session_ttl)));
  for (Transport t : attach.transports) {
    if (t == Transport::kInline) {
      q.add_offers()->set_kind(v1::TRANSPORT_KIND_INLINE);
    } else if (t == Transport::kUcx) {
#ifdef LEAPCACHE_TRANSPORT_UCX
      bool cuda = false;
#ifdef LEAPCACHE_TRANSPORT_CUDA
      cuda = transport::CudaDeviceAvailable();
#endif
      absl::StatusOr<std::unique_ptr<transport::UcxContext>> ucx =
          transport::UcxContext::Create({attach.ucx_transports, cuda});
      if (!ucx.ok()) return ucx.status();
      impl->ucx = std::move(ucx).value();
      absl::StatusOr<std::unique_ptr<transport::UcxTargetWorker>> worker =
          transport::UcxTargetWorker::Create(impl->ucx.get());
      if (!worker.ok()) return worker.status();
      impl->ucx_worker = std::move(worker).value();
      v1::TransportOffer* offer = q.add_offers();
      offer->set_kind(v1::TRANSPORT_KIND_UCX);
      offer->set_connection_info(impl->ucx_worker->address());
      offer->set_cuda_memory(impl->ucx->capabilities().cuda != transport::CudaAccess::kNone);
#else
      return absl::FailedPreconditionError("this client library was built without UCX");
#endif
    } else if (t == Transport::kCudaIpc) {
#ifdef LEAPCACHE_TRANSPORT_CUDA
      v1::TransportOffer* offer = q.add_offers();
      offer->set_kind(v1::TRANSPORT_KIND_CUDA_IPC);
      offer->set_cuda_memory(transport::CudaDeviceAvailable());
#else
      return absl::FailedPreconditionError("this client library was built without CUDA");
#endif
    } else if (t == Transport::kNccl) {
      v1::TransportOffer* offer = q.add_offers();  // built with NCCL: checked above
      offer->set_kind(v1::TRANSPORT_KIND_NCCL);
      offer->set_cuda_memory(true);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("transport ", static_cast<int>(t), " is unknown"));
    }
  }
  v1::AttachResponse r;
  grpc::ClientContext c;
  impl->Deadline(&c, options.rpc_timeout);
  if (grpc::Status st = impl->stub->Attach(&c, q, &r); !st.ok()) return FromGrpcStatus(st);
  impl->session_id = r.session_id();
  impl->transport = static_cast<Transport>(static_cast<int>(r.transport()));
  if (impl->transport != Transport::kUcx) {
#ifdef LEAPCACHE_TRANSPORT_UCX
    impl->ucx_worker.reset();  // not chosen: no worker to keep progressing
    impl->ucx.reset();
#endif
  }
#ifdef LEAPCACHE_TRANSPORT_NCCL
  if (impl->transport == Transport::kNccl) {
    // Join the communicator the service started; a failure ends the session at once.
    absl::StatusOr<std::unique_ptr<transport::NcclLink>> link = transport::NcclLink::Start(
        r.connection_info(), transport::NcclLink::kEngineRank, impl->cuda_device, 0);
    absl::Status joined = link.status();
    if (joined.ok()) joined = (*link)->WaitReady(absl::Now() + options.rpc_timeout);
    if (!joined.ok()) {
      v1::DetachRequest dq;
      dq.set_session_id(impl->session_id);
      v1::DetachResponse dr;
      grpc::ClientContext dc;
      impl->Deadline(&dc, options.rpc_timeout);
      impl->stub->Detach(&dc, dq, &dr);
      return absl::UnavailableError(
          absl::StrCat("joining the service's NCCL communicator: ", joined.message()));
    }
    impl->nccl = std::move(link).value();
  }
#endif
  Impl* raw = impl.get();
  impl->keepalive = std::thread([raw] { raw->KeepaliveLoop(); });
  return std::unique_ptr<AttachedEngine>(new AttachedEngine(std::move(impl)));
}

absl::Status AttachedEngine::Detach() {
  Impl& m = *impl_;
  m.StopKeepalive();
  absl::MutexLock lock(&m.mu);
  if (m.detached) return absl::OkStatus();
  m.detached = true;
  v1::DetachRequest q;
  q.set_session_id(m.session_id);
  v1::DetachResponse r;
  grpc::ClientContext c;
  m.Deadline(&c, m.options.rpc_timeout);
  const grpc::Status st = m.stub->Detach(&c, q, &r);
  // The service no longer reaches the buffers: unregister them locally.
  m.buffers.clear();
#ifdef LEAPCACHE_TRANSPORT_NCCL
  m.nccl.reset();
#endif
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
  if (memory == MemoryKind::kCuda) {
#ifdef LEAPCACHE_TRANSPORT_CUDA
    if (absl::Status st = transport::CheckDevicePointer(ptr); !st.ok()) return st;
#else
    return absl::FailedPreconditionError("this client library was built without CUDA");
#endif
  }
  if (m.transport == Transport::kUcx) {
#ifdef LEAPCACHE_TRANSPORT_UCX
    void* target = ptr;
    transport::MemoryKind target_kind =
        memory == MemoryKind::kCuda ? transport::MemoryKind::kCuda : transport::MemoryKind::kHost;
#ifdef LEAPCACHE_TRANSPORT_CUDA
    if (memory == MemoryKind::kCuda && !m.ucx->cuda_direct()) {
      absl::StatusOr<std::unique_ptr<transport::PinnedHostBuffer>> staging =
          transport::PinnedHostBuffer::Allocate(bytes);
      if (!staging.ok()) return staging.status();
      b->staging = std::move(staging).value();
      target = b->staging->data();
      target_kind = transport::MemoryKind::kHost;
    }
#endif
    absl::StatusOr<std::unique_ptr<transport::Registration>> reg =
        m.ucx->Register(target, bytes, target_kind);
    if (!reg.ok()) return reg.status();
    b->registration = std::move(reg).value();
    absl::StatusOr<uint64_t> remote = m.RegisterRemote(b->registration->descriptor());
    if (!remote.ok()) return remote.status();
    b->remote_id = *remote;
#endif
  }
  if (m.transport == Transport::kNccl) {
#ifdef LEAPCACHE_TRANSPORT_NCCL
    if (memory != MemoryKind::kCuda) {
      return absl::FailedPreconditionError(
          "an nccl session moves device memory only; attach with ucx for host buffers");
    }
    absl::StatusOr<int> device = transport::DeviceOfPointer(ptr);
    if (!device.ok()) return device.status();
    if (*device != m.cuda_device) {
      return absl::InvalidArgumentError(absl::StrCat("buffer is on CUDA device ", *device,
                                                     ", the session's NCCL link on ",
                                                     m.cuda_device));
    }
    transport::BufferDescriptor d;
    d.transport = transport::TransportKind::kNccl;
    d.memory = transport::MemoryKind::kCuda;
    d.address = reinterpret_cast<uint64_t>(ptr);
    d.bytes = bytes;
    absl::StatusOr<uint64_t> remote = m.RegisterRemote(d);
    if (!remote.ok()) return remote.status();
    b->remote_id = *remote;
#endif
  }
  if (m.transport == Transport::kCudaIpc) {
#ifdef LEAPCACHE_TRANSPORT_CUDA
    if (memory != MemoryKind::kCuda) {
      return absl::FailedPreconditionError(
          "a cuda_ipc session moves device memory only; attach with ucx for host buffers");
    }
    absl::StatusOr<std::unique_ptr<transport::Registration>> reg =
        transport::ExportCudaIpc(ptr, bytes);
    if (!reg.ok()) return reg.status();
    b->registration = std::move(reg).value();
    if (absl::StatusOr<uint64_t> remote = m.RegisterRemote(b->registration->descriptor());
        remote.ok()) {
      b->remote_id = *remote;
    } else {
      return remote.status();
    }
#endif
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

absl::StatusOr<TransferredCheckpoint> AttachedEngine::GetInto(const GetRequest& request,
                                                              BufferId buffer, uint64_t offset) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  if (absl::Status st = m.CheckAttached(); !st.ok()) return st;
  absl::StatusOr<LocalBuffer*> found = m.Find(buffer);
  if (!found.ok()) return found.status();
  const LocalBuffer& b = **found;

  if (m.transport == Transport::kInline) {
    absl::StatusOr<Checkpoint> got = m.client->Get(request);
    if (!got.ok()) return got.status();
    if (absl::Status st = CheckRange(b, offset, got->bytes.size(), "the checkpoint at offset");
        !st.ok()) {
      return st;
    }
    if (absl::Status st = CopyIntoBuffer(b, offset, got->bytes.data(), got->bytes.size());
        !st.ok()) {
      return st;
    }
    TransferredCheckpoint out;
    out.position = got->position;
    out.heads = got->heads;
    out.layers = got->layers;
    out.dk = got->dk;
    out.dv = got->dv;
    out.kind = got->kind;
    out.format = got->format;
    out.blob_bytes = got->blob_bytes;
    out.state_bytes = got->state_bytes;
    out.total_bytes = got->bytes.size();
    out.dense = got->dense;
    out.crc32c = Crc32c(got->bytes);
    return out;
  }

  v1::TransferGetRequest q;
  q.set_session_id(m.session_id);
  q.set_namespace_id(request.namespace_id);
  q.set_namespace_tag(m.client->RegisteredTag(request.namespace_id).value_or(0));
  q.set_hash(HashBytes(request.hash));
  bool present = false;
  ToProto(request.heads, &present, q.mutable_heads());
  if (!present) q.clear_heads();
  if (request.dense.has_value()) {
    ToProto(*request.dense, q.mutable_dense());
  } else {
    q.mutable_compact();
  }
  q.set_buffer_id(b.remote_id);
  q.set_offset(offset);
  v1::TransferGetResponse r;
  grpc::ClientContext c;
  m.Deadline(&c, m.options.transfer_timeout);
  if (grpc::Status st = m.RunTransfer([&] { return m.stub->TransferGet(&c, q, &r); }); !st.ok()) {
    return FromGrpcStatus(st);
  }
  absl::StatusOr<TransferredCheckpoint> out = FromHeader(r.header());
  if (!out.ok()) return out.status();
  if (absl::Status st = CheckRange(b, offset, out->total_bytes, "the service's write"); !st.ok()) {
    return absl::DataLossError(st.message());
  }
#ifdef LEAPCACHE_TRANSPORT_NCCL
  if (m.nccl != nullptr && out->total_bytes > 0) {
    // The service posted the checkpoint as one send before answering: receive it now.
    const absl::Time deadline = absl::Now() + m.options.transfer_timeout;
    absl::Status st = m.nccl->PostRecv(b.ptr + offset, out->total_bytes, deadline);
    if (st.ok()) st = m.nccl->Wait(deadline);
    if (!st.ok()) return st;
  }
#endif
  // The bytes as they landed: in host memory, or device memory the service wrote directly (CUDA
  // IPC, NCCL, UCX with CUDA support), checked where it is.
  const uint8_t* landed = b.transfer_base() + offset;
  bool on_device = false;
#ifdef LEAPCACHE_TRANSPORT_CUDA
  if (b.memory == MemoryKind::kCuda && !b.staged()) {
    absl::StatusOr<uint32_t> crc = transport::DeviceCrc32c(landed, out->total_bytes);
    if (!crc.ok()) return crc.status();
    out->crc32c = *crc;
    on_device = true;
  }
#endif
  if (!on_device) out->crc32c = Crc32c({landed, out->total_bytes});
  if (out->crc32c != r.crc32c()) {
    return absl::DataLossError(absl::StrCat("the bytes that landed have CRC-32C ", out->crc32c,
                                            ", the service sent ", r.crc32c()));
  }
  if (b.staged()) {
    if (absl::Status st = CopyIntoBuffer(b, offset, landed, out->total_bytes); !st.ok()) return st;
  }
  return out;
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

  // The bytes as host memory: the buffer itself, its staging buffer, or (inline, CUDA) a copy.
  std::vector<uint8_t> host_copy;
  const uint8_t* bytes = b.transfer_base() + offset;
  if (b.memory == MemoryKind::kCuda) {
#ifdef LEAPCACHE_TRANSPORT_CUDA
    uint8_t* dst = b.staged() ? b.transfer_base() + offset : nullptr;
    if (dst == nullptr) {
      host_copy.resize(length);
      dst = host_copy.data();
    }
    if (absl::Status st = transport::CopyDeviceToHost(dst, b.ptr + offset, length); !st.ok()) {
      return st;
    }
    bytes = dst;
#else
    return absl::FailedPreconditionError("this client library was built without CUDA");
#endif
  }
  const std::span<const uint8_t> data(bytes, length);

  if (m.transport == Transport::kInline) {
    return dense.has_value() ? m.client->PutDense(target, *dense, data)
                             : m.client->PutCompact(target, data);
  }
  v1::TransferPutRequest q;
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
  q.set_crc32c(Crc32c(data));
  v1::TransferPutResponse r;
  grpc::ClientContext c;
  m.Deadline(&c, m.options.transfer_timeout);
#ifdef LEAPCACHE_TRANSPORT_NCCL
  if (m.nccl != nullptr) {
    // Posted before the call: the service receives the bytes first, whatever it then decides.
    const absl::Time deadline = absl::Now() + m.options.transfer_timeout;
    if (absl::Status st = m.nccl->PostSend(b.ptr + offset, length, deadline); !st.ok()) return st;
    const grpc::Status put = m.stub->TransferPut(&c, q, &r);
    // The service answers only after its receive completed, so the send completes at once; if it
    // failed before receiving (an ended session), the link cannot be matched any more and the
    // wait aborts it.
    const absl::Status sent =
        m.nccl->Wait(put.ok() ? deadline : std::min(deadline, absl::Now() + absl::Seconds(2)));
    if (!put.ok()) return FromGrpcStatus(put);
    return sent;
  }
#endif
  return FromGrpcStatus(m.RunTransfer([&] { return m.stub->TransferPut(&c, q, &r); }));
}

absl::Status AttachedEngine::RunStepTransfer(
    BufferId buffer, uint64_t in_offset, uint64_t in_bytes, uint64_t out_offset,
    uint64_t out_bytes,
    const std::function<absl::Status(uint64_t session, uint64_t remote_buffer)>& call) {
  Impl& m = *impl_;
  absl::MutexLock lock(&m.mu);
  if (absl::Status st = m.CheckAttached(); !st.ok()) return st;
  absl::StatusOr<LocalBuffer*> found = m.Find(buffer);
  if (!found.ok()) return found.status();
  const LocalBuffer& b = **found;
  if (m.transport == Transport::kInline) {
    return absl::FailedPreconditionError(
        "the engine's data plane is inline: step with DecodeSession::Step");
  }
  if (absl::Status st = CheckRange(b, in_offset, in_bytes, "the step's inputs"); !st.ok()) {
    return st;
  }
  if (absl::Status st = CheckRange(b, out_offset, out_bytes, "the step's o"); !st.ok()) return st;
#ifdef LEAPCACHE_TRANSPORT_NCCL
  if (m.nccl != nullptr) {
    // Both posted before the call, in the order the service takes them.
    const absl::Time deadline = absl::Now() + m.options.transfer_timeout;
    if (absl::Status st = m.nccl->PostSendRecv(b.ptr + in_offset, in_bytes, b.ptr + out_offset,
                                               out_bytes, deadline);
        !st.ok()) {
      return st;
    }
    const absl::Status stepped = call(m.session_id, b.remote_id);
    // The service writes o whenever it read the inputs; if it failed before, nothing matches
    // and the wait aborts the link (as for a put).
    const absl::Status moved =
        m.nccl->Wait(stepped.ok() ? deadline : std::min(deadline, absl::Now() + absl::Seconds(2)));
    if (!stepped.ok()) return stepped;
    return moved;
  }
#endif
  if (b.staged()) {
#ifdef LEAPCACHE_TRANSPORT_CUDA
    if (absl::Status st = transport::CopyDeviceToHost(b.transfer_base() + in_offset,
                                                      b.ptr + in_offset, in_bytes);
        !st.ok()) {
      return st;
    }
#endif
  }
  absl::Status stepped;
  m.RunTransfer([&] {
    stepped = call(m.session_id, b.remote_id);
    return grpc::Status::OK;
  });
  if (!stepped.ok()) return stepped;
  if (b.staged()) {
    return CopyIntoBuffer(b, out_offset, b.transfer_base() + out_offset, out_bytes);
  }
  return absl::OkStatus();
}

}  // namespace leapcache::client
