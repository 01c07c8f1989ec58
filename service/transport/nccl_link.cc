#include "service/transport/nccl_link.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/core/status_util.h"

namespace leapcache::transport {

struct NcclLink::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

namespace {

std::string NcclMessage(ncclComm_t comm, ncclResult_t r) {
  const char* last = ncclGetLastError(comm);
  return absl::StrCat(ncclGetErrorString(r), last != nullptr && *last != '\0' ? ": " : "",
                      last != nullptr ? last : "");
}

}  // namespace

absl::StatusOr<std::string> NcclLink::NewUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", NcclMessage(nullptr, r)));
  }
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclLink>> NcclLink::Start(const std::string& unique_id, int rank,
                                                          int device, pid_t peer_pid) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("the NCCL unique id is ", unique_id.size(),
                                                   " bytes, not ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  if (rank != kServiceRank && rank != kEngineRank) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " is not 0 or 1"));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || device < 0 || device >= devices) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist (", devices, " devices)"));
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cudaSetDevice(", device, "): ",
                                               cudaGetErrorString(e)));
  }
  auto state = std::make_unique<State>();
  if (cudaError_t e = cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cudaStreamCreate: ", cudaGetErrorString(e)));
  }
  // Non-blocking: the call returns while the ranks find each other, so the service can answer
  // the RPC that tells the engine the id.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(&state->comm, 2, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    const std::string message = NcclMessage(state->comm, r);
    if (state->comm != nullptr) ncclCommAbort(state->comm);
    cudaStreamDestroy(state->stream);
    return absl::UnavailableError(absl::StrCat("ncclCommInitRankConfig: ", message));
  }
  return std::unique_ptr<NcclLink>(new NcclLink(std::move(state), device, 1 - rank, peer_pid));
}

NcclLink::NcclLink(std::unique_ptr<State> state, int device, int peer_rank, pid_t peer_pid)
    : state_(std::move(state)), device_(device), peer_rank_(peer_rank), peer_pid_(peer_pid) {}

NcclLink::~NcclLink() {
  // Abort, never destroy: ncclCommDestroy can wait for operations the peer will never match.
  if (state_->comm != nullptr) {
    cudaSetDevice(device_);
    ncclCommAbort(state_->comm);
  }
  cudaStreamDestroy(state_->stream);
}

absl::Status NcclLink::PeerAlive() const {
  if (peer_pid_ > 0 && kill(peer_pid_, 0) != 0 && errno == ESRCH) {
    return absl::UnavailableError(absl::StrCat("the NCCL peer process ", peer_pid_, " is gone"));
  }
  return absl::OkStatus();
}

absl::Status NcclLink::health() const {
  LC_RETURN_IF_ERROR(dead_);
  return PeerAlive();
}

absl::Status NcclLink::Kill(absl::Status why) {
  if (dead_.ok()) {
    dead_ = absl::UnavailableError(absl::StrCat("the NCCL link was aborted: ", why.message()));
    if (state_->comm != nullptr) {
      cudaSetDevice(device_);
      ncclCommAbort(state_->comm);  // NCCL's kernels waiting on the peer give up
      state_->comm = nullptr;
    }
    pending_ = false;
  }
  return why;
}

template <typename Done>
absl::Status NcclLink::Poll(Done done, absl::Time deadline, const char* what) {
  for (int spins = 0;; ++spins) {
    absl::StatusOr<bool> complete = done();
    if (!complete.ok()) return Kill(complete.status());
    if (*complete) return absl::OkStatus();
    if (absl::Status alive = PeerAlive(); !alive.ok()) return Kill(alive);
    if (absl::Now() >= deadline) {
      return Kill(absl::DeadlineExceededError(absl::StrCat(what, " passed its deadline")));
    }
    // Spin briefly (transfers of a few MB finish in tens of microseconds), then yield.
    if (spins > 64) absl::SleepFor(absl::Microseconds(20));
  }
}

absl::Status NcclLink::WaitReady(absl::Time deadline) {
  LC_RETURN_IF_ERROR(dead_);
  if (ready_) return absl::OkStatus();
  ncclComm_t comm = state_->comm;
  LC_RETURN_IF_ERROR(Poll(
      [comm]() -> absl::StatusOr<bool> {
        ncclResult_t r = ncclSuccess;
        ncclCommGetAsyncError(comm, &r);
        if (r == ncclInProgress) return false;
        if (r != ncclSuccess) {
          return absl::UnavailableError(absl::StrCat("NCCL: ", NcclMessage(comm, r)));
        }
        return true;
      },
      deadline, "joining the NCCL communicator"));
  ready_ = true;
  return absl::OkStatus();
}

absl::Status NcclLink::Post(bool send, void* device_ptr, size_t bytes, absl::Time deadline) {
  LC_RETURN_IF_ERROR(WaitReady(deadline));
  if (device_ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("an NCCL transfer needs a non-empty device buffer");
  }
  cudaSetDevice(device_);
  ncclComm_t comm = state_->comm;
  const ncclResult_t r =
      send ? ncclSend(device_ptr, bytes, ncclUint8, peer_rank_, comm, state_->stream)
           : ncclRecv(device_ptr, bytes, ncclUint8, peer_rank_, comm, state_->stream);
  if (r != ncclSuccess && r != ncclInProgress) {
    return Kill(absl::UnavailableError(
        absl::StrCat(send ? "ncclSend: " : "ncclRecv: ", NcclMessage(comm, r))));
  }
  pending_ = true;
  if (r == ncclInProgress) {
    // A non-blocking communicator may still be enqueueing (the first transfer connects the
    // ranks); the operation is posted once the communicator says so.
    LC_RETURN_IF_ERROR(Poll(
        [comm]() -> absl::StatusOr<bool> {
          ncclResult_t e = ncclSuccess;
          ncclCommGetAsyncError(comm, &e);
          if (e == ncclInProgress) return false;
          if (e != ncclSuccess) {
            return absl::UnavailableError(absl::StrCat("NCCL: ", NcclMessage(comm, e)));
          }
          return true;
        },
        deadline, "posting the NCCL transfer"));
  }
  return absl::OkStatus();
}

absl::Status NcclLink::PostSend(const void* device_ptr, size_t bytes, absl::Time deadline) {
  return Post(true, const_cast<void*>(device_ptr), bytes, deadline);
}

absl::Status NcclLink::PostRecv(void* device_ptr, size_t bytes, absl::Time deadline) {
  return Post(false, device_ptr, bytes, deadline);
}

absl::Status NcclLink::Copy(void* dst, const void* src, size_t bytes, bool to_device,
                            absl::Time deadline) {
  LC_RETURN_IF_ERROR(dead_);
  cudaSetDevice(device_);
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes,
                                      to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                      state_->stream);
      e != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat(to_device ? "copy to the device: " : "copy to the host: ",
                                            cudaGetErrorString(e)));
  }
  pending_ = true;
  return Wait(deadline);
}

absl::Status NcclLink::CopyToDevice(void* device_ptr, const void* host, size_t bytes,
                                    absl::Time deadline) {
  return Copy(device_ptr, host, bytes, true, deadline);
}

absl::Status NcclLink::CopyToHost(void* host, const void* device_ptr, size_t bytes,
                                  absl::Time deadline) {
  return Copy(host, device_ptr, bytes, false, deadline);
}

absl::Status NcclLink::Wait(absl::Time deadline) {
  LC_RETURN_IF_ERROR(dead_);
  if (!pending_) return absl::OkStatus();
  State* s = state_.get();
  LC_RETURN_IF_ERROR(Poll(
      [s]() -> absl::StatusOr<bool> {
        const cudaError_t e = cudaStreamQuery(s->stream);
        if (e == cudaSuccess) return true;
        if (e != cudaErrorNotReady) {
          return absl::UnavailableError(
              absl::StrCat("NCCL transfer stream: ", cudaGetErrorString(e)));
        }
        ncclResult_t r = ncclSuccess;
        ncclCommGetAsyncError(s->comm, &r);
        if (r != ncclSuccess && r != ncclInProgress) {
          return absl::UnavailableError(absl::StrCat("NCCL: ", NcclMessage(s->comm, r)));
        }
        return false;
      },
      deadline, "the NCCL transfer"));
  pending_ = false;
  return absl::OkStatus();
}

}  // namespace leapcache::transport
