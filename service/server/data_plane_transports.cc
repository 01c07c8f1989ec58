#include "service/server/data_plane_transports.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"

#ifdef LEAPCACHE_TRANSPORT_CUDA
#include "service/transport/cuda_ipc.h"
#include "service/transport/cuda_staging.h"
#endif
#ifdef LEAPCACHE_TRANSPORT_NCCL
#include "service/transport/nccl_peer_connection.h"
#endif
#ifdef LEAPCACHE_TRANSPORT_UCX
#include "service/transport/ucx_context.h"
#include "service/transport/ucx_peer_connection.h"
#endif

namespace leapcache::server {

using transport::TransportKind;

struct DataPlaneTransports::Ucx {
#ifdef LEAPCACHE_TRANSPORT_UCX
  std::unique_ptr<transport::UcxContext> context;
#endif
};

DataPlaneTransports::DataPlaneTransports() = default;
DataPlaneTransports::~DataPlaneTransports() = default;

std::unique_ptr<DataPlaneTransports> DataPlaneTransports::Create(
    const std::string& ucx_transports, int cuda_device) {
  std::unique_ptr<DataPlaneTransports> t(new DataPlaneTransports());
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) t->host_ = host;
  t->cuda_device_ = cuda_device;
#ifdef LEAPCACHE_TRANSPORT_CUDA
  t->cuda_ipc_ = transport::CudaDeviceAvailable();
#endif
#ifdef LEAPCACHE_TRANSPORT_NCCL
  if (absl::StatusOr<std::string> uuid = transport::CudaDeviceUuid(cuda_device); uuid.ok()) {
    t->nccl_ = true;
    t->cuda_device_uuid_ = *std::move(uuid);
  }
#endif
#ifdef LEAPCACHE_TRANSPORT_UCX
  // The service's side never stages CUDA memory: it reaches the engine's host buffers, and
  // device buffers only when UCX itself reports CUDA support.
  absl::StatusOr<std::unique_ptr<transport::UcxContext>> context =
      transport::UcxContext::Create({ucx_transports, false});
  if (context.ok()) {
    t->ucx_ = std::make_unique<Ucx>();
    t->ucx_->context = std::move(context).value();
  } else {
    t->ucx_status_ = context.status();
  }
#else
  (void)ucx_transports;
  t->ucx_status_ = absl::UnimplementedError("this service was built without UCX");
#endif
  return t;
}

bool DataPlaneTransports::Available(TransportKind kind) const {
  switch (kind) {
    case TransportKind::kInline:
      return true;
    case TransportKind::kUcx:
      return ucx_ != nullptr;
    case TransportKind::kCudaIpc:
      return cuda_ipc_;
    case TransportKind::kNccl:
      return nccl_;
  }
  return false;
}

transport::Capabilities DataPlaneTransports::capabilities(TransportKind kind) const {
#ifdef LEAPCACHE_TRANSPORT_UCX
  if (kind == TransportKind::kUcx && ucx_ != nullptr) return ucx_->context->capabilities();
#endif
  if (kind == TransportKind::kInline) return {true, transport::CudaAccess::kNone};
  if (kind == TransportKind::kCudaIpc && cuda_ipc_) return {false, transport::CudaAccess::kDirect};
  if (kind == TransportKind::kNccl && nccl_) return {false, transport::CudaAccess::kDirect};
  return {};
}

absl::StatusOr<TransportOfferInfo> DataPlaneTransports::Choose(
    std::span<const TransportOfferInfo> offers, const std::string& engine_host,
    const std::string& engine_gpu_uuid) const {
  // The service's preference: same-host GPU memory first, then GPU-to-GPU collectives, then
  // RDMA/tcp/shared memory, then gRPC itself.
  for (TransportKind kind : {TransportKind::kCudaIpc, TransportKind::kNccl, TransportKind::kUcx,
                             TransportKind::kInline}) {
    if (!Available(kind)) continue;
    for (const TransportOfferInfo& offer : offers) {
      if (offer.kind != kind) continue;
      // CUDA IPC reaches only device memory of a process on this host.
      if (kind == TransportKind::kCudaIpc &&
          (engine_host.empty() || engine_host != host_ || !offer.cuda_memory)) {
        continue;
      }
      // NCCL moves device memory between two GPUs: never the service's own.
      if (kind == TransportKind::kNccl &&
          (!offer.cuda_memory || engine_gpu_uuid.empty() ||
           engine_gpu_uuid == cuda_device_uuid_)) {
        continue;
      }
      return offer;
    }
  }
  std::string offered;
  for (const TransportOfferInfo& offer : offers) {
    absl::StrAppend(&offered, offered.empty() ? "" : ", ", transport::TransportName(offer.kind));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no offered transport (", offered, ") is available in this service (ucx: ",
      ucx_status_.ok() ? "available" : ucx_status_.ToString(), ")"));
}

absl::StatusOr<std::unique_ptr<transport::PeerConnection>> DataPlaneTransports::Connect(
    const TransportOfferInfo& offer, pid_t engine_pid, const std::string& engine_host) const {
  (void)engine_pid;  // used by CUDA IPC and NCCL only
  (void)engine_host;
  switch (offer.kind) {
    case TransportKind::kInline:
      return std::unique_ptr<transport::PeerConnection>();
    case TransportKind::kCudaIpc:
#ifdef LEAPCACHE_TRANSPORT_CUDA
      if (cuda_ipc_) return transport::ConnectCudaIpc(engine_pid, cuda_device_);
#endif
      break;
    case TransportKind::kNccl:
#ifdef LEAPCACHE_TRANSPORT_NCCL
      if (nccl_) {
        // The engine's process is watched where it is visible: on this host.
        const pid_t local_pid = !engine_host.empty() && engine_host == host_ ? engine_pid : 0;
        absl::StatusOr<std::unique_ptr<transport::NcclPeerConnection>> c =
            transport::NcclPeerConnection::Create(cuda_device_, local_pid);
        if (!c.ok()) return c.status();
        return std::unique_ptr<transport::PeerConnection>(std::move(c).value());
      }
#endif
      break;
    case TransportKind::kUcx:
#ifdef LEAPCACHE_TRANSPORT_UCX
      if (ucx_ != nullptr) {
        if (offer.connection_info.empty()) {
          return absl::InvalidArgumentError(
              "offers[ucx].connection_info (worker address) is empty");
        }
        absl::StatusOr<std::unique_ptr<transport::UcxPeerConnection>> c =
            transport::UcxPeerConnection::Connect(ucx_->context.get(), offer.connection_info);
        if (!c.ok()) return c.status();
        return std::unique_ptr<transport::PeerConnection>(std::move(c).value());
      }
#endif
      break;
    default:
      break;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "transport ", transport::TransportName(offer.kind), " is not available in this service"));
}

}  // namespace leapcache::server
