#include "transport/cuda_ipc/cuda_ipc.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_status.h"
#include "base/status_macros.h"
#include "transport/cuda_ipc/cuda_ipc_key.h"
#include "transport/device/copy_batch_kernel.h"

namespace leapcache::transport {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes);

// The allocation that holds `ptr` (its base and size), by the driver's cuMemGetAddressRange,
// reached through the runtime so that nothing links libcuda itself (binaries must load on
// machines without a driver).
struct Allocation {
  CUdeviceptr base = 0;
  size_t bytes = 0;
};
absl::StatusOr<Allocation> AllocationOf(const void* ptr) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    return absl::FailedPreconditionError("the CUDA driver has no cuMemGetAddressRange");
  }
  Allocation a;
  if (reinterpret_cast<GetAddressRange>(fn)(&a.base, &a.bytes,
                                            reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return absl::InvalidArgumentError("buffer is not device memory of this process");
  }
  return a;
}

class CudaIpcRegistration final : public Registration {
 public:
  explicit CudaIpcRegistration(BufferDescriptor d) : descriptor_(std::move(d)) {}
  const BufferDescriptor& descriptor() const override { return descriptor_; }

 private:
  BufferDescriptor descriptor_;
};

class CudaIpcRegion final : public RemoteRegion {
 public:
  CudaIpcRegion(void* base, uint8_t* buffer, int device, BufferDescriptor d)
      : base_(base), buffer_(buffer), device_(device), descriptor_(std::move(d)) {}
  ~CudaIpcRegion() override { cudaIpcCloseMemHandle(base_); }
  const BufferDescriptor& descriptor() const override { return descriptor_; }
  Mapping mapping() const override { return {buffer_, device_}; }
  uint8_t* buffer() const { return buffer_; }

 private:
  void* base_;
  uint8_t* buffer_;
  int device_;  // where it is mapped: the service's device
  BufferDescriptor descriptor_;
};

class CudaIpcConnection final : public PeerConnection {
 public:
  CudaIpcConnection(pid_t pid, int device) : pid_(pid), device_(device) {}
  ~CudaIpcConnection() override {
    if (list_ != nullptr) cudaFreeAsync(list_, stream_);
    if (host_list_ != nullptr) cudaFreeHost(host_list_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  TransportKind kind() const override { return TransportKind::kCudaIpc; }
  bool takes_device_memory() const override { return true; }

  absl::StatusOr<std::unique_ptr<RemoteRegion>> Import(const BufferDescriptor& d) override {
    LC_RETURN_IF_ERROR(
        ValidateDescriptor(d, TransportKind::kCudaIpc, {false, CudaAccess::kDirect}));
    LC_ASSIGN_OR_RETURN(const CudaIpcKey key, ParseCudaIpcKey(d.key));
    // Before mapping too: a range no allocation could hold costs no driver call.
    LC_RETURN_IF_ERROR(CheckCudaIpcRange(key.offset, d.bytes, UINT64_MAX));
    LC_RETURN_IF_ERROR(health());
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, key.handle.data(), sizeof(handle));
    // Mapped in the service's device's context, where its device-memory ops run.
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
      return LC_CUDA_STATUS(e, "cudaSetDevice");
    }
    void* base = nullptr;
    if (cudaError_t e = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
        e != cudaSuccess) {
      cudaGetLastError();
      return absl::InvalidArgumentError(
          absl::StrCat("buffer.remote_key: cudaIpcOpenMemHandle: ", cudaGetErrorString(e)));
    }
    // The handle maps the engine's whole allocation at `base`; the offset and the byte count
    // are the engine's word, and the copies run in this process's context: a range past the
    // mapping would reach the service's own device memory.
    absl::StatusOr<Allocation> mapped = AllocationOf(base);
    absl::Status inside = mapped.status();
    if (inside.ok() && mapped->base != reinterpret_cast<CUdeviceptr>(base)) {
      inside = absl::InternalError("cudaIpcOpenMemHandle mapped no allocation's start");
    }
    if (inside.ok()) inside = CheckCudaIpcRange(key.offset, d.bytes, mapped->bytes);
    if (!inside.ok()) {
      cudaIpcCloseMemHandle(base);
      return inside;
    }
    return std::unique_ptr<RemoteRegion>(
        new CudaIpcRegion(base, static_cast<uint8_t*>(base) + key.offset, device_, d));
  }

  absl::Status Execute(RemoteRegion& region, std::span<const TransferOp> ops,
                       absl::Time deadline) override {
    auto& r = static_cast<CudaIpcRegion&>(region);
    LC_RETURN_IF_ERROR(ValidateTransfers(r.descriptor(), ops, /*takes_device_memory=*/true));
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
      return LC_CUDA_STATUS(e, "cudaSetDevice");
    }
    LC_RETURN_IF_ERROR(CopyDeviceOps(r, ops, deadline));
    bool host_ops = false;
    for (const TransferOp& op : ops) {
      if (op.local_memory == MemoryKind::kCuda) continue;
      host_ops = true;
      LC_RETURN_IF_ERROR(health());
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError("CUDA IPC transfer passed its deadline");
      }
      uint8_t* remote = r.buffer() + op.remote_offset;
      const cudaError_t e =
          op.direction == Direction::kWrite
              ? cudaMemcpy(remote, op.local.data(), op.local.size(), cudaMemcpyHostToDevice)
              : cudaMemcpy(op.local.data(), remote, op.local.size(), cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) {
        failed_ = true;
        return absl::UnavailableError(
            absl::StrCat("CUDA IPC copy to the engine's buffer: ", cudaGetErrorString(e)));
      }
    }
    // cudaMemcpy from pageable host memory may return once the source is staged, before the DMA
    // into the engine's buffer has landed; the engine reads as soon as the call returns, from
    // another process (and, across GPUs, through another copy engine), so wait for it here.
    if (const cudaError_t e = host_ops ? cudaStreamSynchronize(nullptr) : cudaSuccess;
        e != cudaSuccess) {
      failed_ = true;
      return absl::UnavailableError(
          absl::StrCat("CUDA IPC copy to the engine's buffer: ", cudaGetErrorString(e)));
    }
    return health();
  }

  // The connection's stream and copy list, made at attach time so that a get does not pay for
  // them (pinning host memory and a first stream-ordered allocation take milliseconds).
  absl::Status Prepare() {
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
      return LC_CUDA_STATUS(e, "cudaSetDevice");
    }
    cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = ReserveList(kPreparedOps * sizeof(DeviceCopy));
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    return e == cudaSuccess ? absl::OkStatus() : LC_CUDA_STATUS(e, "preparing the copy list");
  }

  absl::Status health() const override {
    if (failed_) return absl::UnavailableError("a CUDA IPC copy to the engine failed");
    if (kill(pid_, 0) != 0 && errno == ESRCH) {
      return absl::UnavailableError(absl::StrCat("the engine process ", pid_, " is gone"));
    }
    return absl::OkStatus();
  }

 private:
  // The ops whose local memory is on the service's device, as one kernel launch of
  // device-to-device copies (copy_batch_kernel.h: a checkpoint's thousand blobs as one launch,
  // not a thousand copy-engine operations) on the connection's stream, waited for here: the
  // engine reads as soon as the call returns.
  absl::Status CopyDeviceOps(CudaIpcRegion& r, std::span<const TransferOp> ops,
                             absl::Time deadline) {
    copies_.clear();
    for (const TransferOp& op : ops) {
      if (op.local_memory != MemoryKind::kCuda) continue;
      uint8_t* remote = r.buffer() + op.remote_offset;
      if (op.direction == Direction::kWrite) {
        copies_.push_back({op.local.data(), remote, op.local.size()});
      } else {
        copies_.push_back({remote, op.local.data(), op.local.size()});
      }
    }
    if (copies_.empty()) return absl::OkStatus();
    LC_RETURN_IF_ERROR(health());
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("CUDA IPC transfer passed its deadline");
    }
    const size_t list_bytes = copies_.size() * sizeof(DeviceCopy);
    cudaError_t e = ReserveList(list_bytes);
    if (e == cudaSuccess) {
      std::memcpy(host_list_, copies_.data(), list_bytes);
      e = cudaMemcpyAsync(list_, host_list_, list_bytes, cudaMemcpyHostToDevice, stream_);
    }
    if (e == cudaSuccess) e = LaunchCopyBatch(list_, copies_.size(), stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) {
      failed_ = true;
      return absl::UnavailableError(
          absl::StrCat("CUDA IPC device copies with the engine's buffer: ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  }

  // Room for at least `bytes` of copy list, kept for the connection: the list goes up from
  // pinned memory in one asynchronous copy.
  cudaError_t ReserveList(size_t bytes) {
    if (bytes <= list_capacity_) return cudaSuccess;
    if (list_ != nullptr) cudaFreeAsync(list_, stream_);
    if (host_list_ != nullptr) cudaFreeHost(host_list_);
    list_ = nullptr;
    host_list_ = nullptr;
    list_capacity_ = 0;
    cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&list_), bytes, stream_);
    if (e == cudaSuccess) e = cudaMallocHost(reinterpret_cast<void**>(&host_list_), bytes);
    if (e == cudaSuccess) list_capacity_ = bytes;
    return e;
  }

  // Copies a prepared connection takes without growing its list: 128 layers x 32 heads.
  static constexpr size_t kPreparedOps = 4096;

  const pid_t pid_;
  const int device_;
  cudaStream_t stream_ = nullptr;    // the device ops' stream, on device_
  std::vector<DeviceCopy> copies_;   // the copy list as built on the host
  DeviceCopy* host_list_ = nullptr;  // ... in pinned memory, for the copy up
  DeviceCopy* list_ = nullptr;       // ... and on the device
  size_t list_capacity_ = 0;         // of host_list_ and list_
  bool failed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Registration>> ExportCudaIpc(void* ptr, size_t bytes) {
  if (ptr == nullptr) return absl::InvalidArgumentError("buffer pointer is null");
  if (bytes == 0) return absl::InvalidArgumentError("buffer bytes is 0");
  LC_ASSIGN_OR_RETURN(const Allocation a, AllocationOf(ptr));
  CudaIpcKey key;
  key.offset = reinterpret_cast<CUdeviceptr>(ptr) - a.base;
  LC_RETURN_IF_ERROR(CheckCudaIpcRange(key.offset, bytes, a.bytes));
  cudaIpcMemHandle_t handle;
  if (cudaError_t e = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(a.base));
      e != cudaSuccess) {
    return LC_CUDA_STATUS(e, "cudaIpcGetMemHandle");
  }
  std::memcpy(key.handle.data(), &handle, sizeof(handle));
  BufferDescriptor d;
  d.transport = TransportKind::kCudaIpc;
  d.memory = MemoryKind::kCuda;
  d.address = reinterpret_cast<uint64_t>(ptr);
  d.bytes = bytes;
  d.key = SerializeCudaIpcKey(key);
  return std::unique_ptr<Registration>(new CudaIpcRegistration(std::move(d)));
}

absl::StatusOr<std::unique_ptr<PeerConnection>> ConnectCudaIpc(pid_t pid, int device) {
  if (pid <= 0) return absl::InvalidArgumentError("identity.pid is needed for CUDA IPC");
  if (kill(pid, 0) != 0 && errno == ESRCH) {
    return absl::UnavailableError(absl::StrCat("engine process ", pid, " is not on this host"));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError("no CUDA device in the service");
  }
  if (device < 0 || device >= devices) {
    return absl::FailedPreconditionError(
        absl::StrCat("the service's CUDA device ", device, " does not exist (", devices, ")"));
  }
  auto connection = std::make_unique<CudaIpcConnection>(pid, device);
  LC_RETURN_IF_ERROR(connection->Prepare());
  return std::unique_ptr<PeerConnection>(std::move(connection));
}

}  // namespace leapcache::transport
