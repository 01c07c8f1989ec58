#include "transport/nccl/nccl_link.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <span>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

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

// Aborts `comm` on a thread of its own. ncclCommAbort makes NCCL's kernels and connection
// setup give up, but it may itself wait for them, and a service thread must never hang on an
// engine that broke the protocol: at worst that thread stays blocked, not the caller.
void AbortInBackground(ncclComm_t comm, int device) {
  std::thread([comm, device] {
    cudaSetDevice(device);
    ncclCommAbort(comm);
  }).detach();
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
    return absl::UnavailableError(
        absl::StrCat("cudaSetDevice(", device, "): ", cudaGetErrorString(e)));
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
  // Nothing here may wait on the device (see Scratch).
  cudaSetDevice(device_);
  if (state_->comm != nullptr) AbortInBackground(state_->comm, device_);
  if (scratch_ != nullptr) cudaFreeAsync(scratch_, state_->stream);
  if (copy_list_ != nullptr) cudaFreeAsync(copy_list_, state_->stream);
  cudaStreamDestroy(state_->stream);
}

absl::StatusOr<void*> NcclLink::Scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  cudaSetDevice(device_);
  if (scratch_ != nullptr) cudaFreeAsync(scratch_, state_->stream);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  if (cudaError_t e = cudaMallocAsync(&scratch_, bytes, state_->stream); e != cudaSuccess) {
    cudaGetLastError();
    scratch_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat(
        "NCCL staging of ", bytes, " bytes on CUDA device ", device_, ": ", cudaGetErrorString(e)));
  }
  scratch_bytes_ = bytes;
  return scratch_;
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
      AbortInBackground(state_->comm, device_);  // NCCL's kernels waiting on the peer give up
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
    if (cancelled_.load(std::memory_order_relaxed)) {
      return Kill(absl::CancelledError(absl::StrCat(what, " was cancelled")));
    }
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
  // The same query says when the non-blocking init has finished.
  LC_RETURN_IF_ERROR(
      Poll([this] { return Enqueued(); }, deadline, "joining the NCCL communicator"));
  // The handshake: one byte each way, posted together, so that a link that returns ready has
  // moved bytes both ways (both ranks alive and connected) before any transfer relies on it.
  ready_ = true;
  LC_ASSIGN_OR_RETURN(void* const bytes, Scratch(2));
  LC_RETURN_IF_ERROR(PostSendRecv(bytes, 1, static_cast<uint8_t*>(bytes) + 1, 1, deadline));
  return Wait(deadline);
}

absl::StatusOr<bool> NcclLink::Enqueued() const {
  ncclResult_t r = ncclSuccess;
  ncclCommGetAsyncError(state_->comm, &r);
  if (r == ncclInProgress) return false;
  if (r != ncclSuccess) {
    return absl::UnavailableError(absl::StrCat("NCCL: ", NcclMessage(state_->comm, r)));
  }
  return true;
}

absl::Status NcclLink::WaitEnqueued(absl::Time deadline) {
  LC_RETURN_IF_ERROR(dead_);
  if (!pending_) return absl::OkStatus();
  return Poll([this] { return Enqueued(); }, deadline, "enqueueing the NCCL transfer");
}

absl::Status NcclLink::Post(std::span<const Op> ops, absl::Time deadline) {
  LC_RETURN_IF_ERROR(WaitReady(deadline));
  // A non-blocking communicator takes no call while one is still being enqueued.
  LC_RETURN_IF_ERROR(WaitEnqueued(deadline));
  for (const Op& op : ops) {
    if (op.device_ptr == nullptr || op.bytes == 0) {
      return absl::InvalidArgumentError("an NCCL transfer needs a non-empty device buffer");
    }
  }
  cudaSetDevice(device_);
  ncclComm_t comm = state_->comm;
  ncclGroupStart();
  for (const Op& op : ops) {
    if (op.send) {
      ncclSend(op.device_ptr, op.bytes, ncclUint8, peer_rank_, comm, state_->stream);
    } else {
      ncclRecv(op.device_ptr, op.bytes, ncclUint8, peer_rank_, comm, state_->stream);
    }
  }
  const ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) {
    return Kill(
        absl::UnavailableError(absl::StrCat("posting an NCCL transfer: ", NcclMessage(comm, r))));
  }
  // Not waited for here: enqueueing a transfer over a pair of channels not yet connected needs
  // the peer inside NCCL too, and the peer may post its side only after hearing from this one
  // (a put's send is posted before the call that makes the service receive it). Wait and the
  // copies wait for the enqueue first.
  pending_ = true;
  return absl::OkStatus();
}

absl::Status NcclLink::PostSend(const void* device_ptr, size_t bytes, absl::Time deadline) {
  const Op op{true, const_cast<void*>(device_ptr), bytes};
  return Post({&op, 1}, deadline);
}

absl::Status NcclLink::PostRecv(void* device_ptr, size_t bytes, absl::Time deadline) {
  const Op op{false, device_ptr, bytes};
  return Post({&op, 1}, deadline);
}

absl::Status NcclLink::PostSendRecv(const void* send_ptr, size_t send_bytes, void* recv_ptr,
                                    size_t recv_bytes, absl::Time deadline) {
  const Op ops[2] = {{true, const_cast<void*>(send_ptr), send_bytes},
                     {false, recv_ptr, recv_bytes}};
  return Post(ops, deadline);
}

absl::Status NcclLink::Copy(void* dst, const void* src, size_t bytes, bool to_device,
                            absl::Time deadline) {
  // Only once the transfers posted before have finished, within the deadline: a copy of
  // pageable host memory blocks the calling thread until the work ahead of it on the stream is
  // done, and a receive the engine never sends to would then block it for ever.
  LC_RETURN_IF_ERROR(Wait(deadline));
  cudaSetDevice(device_);
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes,
                                      to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                      state_->stream);
      e != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat(
        to_device ? "copy to the device: " : "copy to the host: ", cudaGetErrorString(e)));
  }
  pending_ = true;
  return Wait(deadline);
}

absl::Status NcclLink::CopyOnDevice(std::span<const DeviceCopy> copies, absl::Time deadline) {
  LC_RETURN_IF_ERROR(Wait(deadline));  // as Copy: never queue behind a transfer that may hang
  if (copies.empty()) return absl::OkStatus();
  cudaSetDevice(device_);
  const size_t bytes = copies.size() * sizeof(DeviceCopy);
  if (bytes > copy_list_bytes_) {
    if (copy_list_ != nullptr) cudaFreeAsync(copy_list_, state_->stream);
    copy_list_ = nullptr;
    copy_list_bytes_ = 0;
    if (cudaError_t e =
            cudaMallocAsync(reinterpret_cast<void**>(&copy_list_), bytes, state_->stream);
        e != cudaSuccess) {
      cudaGetLastError();
      copy_list_ = nullptr;
      return absl::ResourceExhaustedError(
          absl::StrCat("a device copy list on CUDA device ", device_, ": ", cudaGetErrorString(e)));
    }
    copy_list_bytes_ = bytes;
  }
  cudaError_t e =
      cudaMemcpyAsync(copy_list_, copies.data(), bytes, cudaMemcpyHostToDevice, state_->stream);
  if (e == cudaSuccess) e = LaunchCopyBatch(copy_list_, copies.size(), state_->stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("device copies: ", cudaGetErrorString(e)));
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
  LC_RETURN_IF_ERROR(Poll(
      [this]() -> absl::StatusOr<bool> {
        // Enqueued first (an empty stream says nothing before that), then run.
        LC_ASSIGN_OR_RETURN(const bool enqueued, Enqueued());
        if (!enqueued) return false;
        const cudaError_t e = cudaStreamQuery(state_->stream);
        if (e == cudaSuccess) return true;
        if (e != cudaErrorNotReady) {
          return absl::UnavailableError(
              absl::StrCat("NCCL transfer stream: ", cudaGetErrorString(e)));
        }
        return false;
      },
      deadline, "the NCCL transfer"));
  pending_ = false;
  return absl::OkStatus();
}

}  // namespace leapcache::transport
