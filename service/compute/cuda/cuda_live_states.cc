#include "service/compute/cuda/cuda_live_states.h"

#include <cuda_runtime.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpu/kernels/kernels.h"
#include "gpu/reference/codec.h"
#include "gpu/reference/window.h"
#include "base/cuda_status.h"
#include "base/format_status.h"
#include "base/status_macros.h"

namespace leapcache::compute {
namespace {

template <typename T>
absl::StatusOr<T> FromFormat(leapcache::StatusOr<T> v) {
  if (!v.ok()) return base::FromFormatStatus(v.status());
  return std::move(v).value();
}

// What the step kernels require of every vector they read or write.
bool KernelAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

size_t InputFloatsPerHead(const DecodeShape& s) {
  return 2 * static_cast<size_t>(s.spec.dk) + s.spec.dv + s.gate_size() + 1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaLiveStates>> CudaLiveStates::Create(
    const DecodeShape& shape, int device) {
  const BlobSpec& spec = shape.spec;
  LC_RETURN_IF_ERROR(base::FromFormatStatus(ValidateSpec(spec)));
  if (spec.dk != kernels::kKernelDim || spec.dv != kernels::kKernelDim) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA kernels are built for dk = dv = ", kernels::kKernelDim, " (got ",
                     spec.dk, "x", spec.dv, ")"));
  }
  if (!(spec.codec == Codec::kFp32 || kernels::WindowKernelsServe(spec))) {
    return absl::UnimplementedError(absl::StrCat("no CUDA decode kernels for ", spec.ToString()));
  }
  if (shape.slots <= 0 || shape.layers <= 0 || shape.heads <= 0) {
    return absl::InvalidArgumentError("slots, layers and heads must be positive");
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no CUDA device ", device, " (", count, " found)"));
  }
  std::unique_ptr<CudaLiveStates> b(new CudaLiveStates(shape));
  b->device_ = device;
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaSetDevice(device), "cudaSetDevice"));
  const int rows = shape.slots * shape.layers;
  if (spec.codec == Codec::kLeap) {
    LC_ASSIGN_OR_RETURN(b->layout_, FromFormat(MakePoolLayout(spec, rows, shape.heads)));
  }
  b->pool_bytes_ = b->row_bytes() * static_cast<size_t>(rows);
  if (cudaMalloc(&b->pool_, b->pool_bytes_) != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a ", b->pool_bytes_, "-byte decode pool on device ", device));
  }
  const size_t per_batch = static_cast<size_t>(shape.slots) * shape.heads;
  const size_t in_floats = per_batch * InputFloatsPerHead(shape) + 5 * 4;  // + alignment slack
  const size_t out_floats = per_batch * spec.dv;
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMalloc(&b->d_slot_, sizeof(int32_t) * shape.slots), "cudaMalloc"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMalloc(&b->d_in_, sizeof(float) * in_floats), "cudaMalloc"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMalloc(&b->d_out_, sizeof(float) * out_floats), "cudaMalloc"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMallocHost(&b->h_in_, sizeof(float) * in_floats), "cudaMallocHost"));
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(cudaMallocHost(&b->h_out_, sizeof(float) * out_floats), "cudaMallocHost"));
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(cudaMallocHost(&b->h_slot_, sizeof(int32_t) * shape.slots), "cudaMallocHost"));
  // The finiteness gate's scratch (zero at rest) and its answers, written by the kernel straight
  // into mapped pinned memory: the step's one wait covers them, with no copy queued.
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMalloc(&b->d_gate_, sizeof(uint64_t) * 6), "cudaMalloc"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMemset(b->d_gate_, 0, sizeof(uint64_t) * 6), "cudaMemset"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaHostAlloc(reinterpret_cast<void**>(&b->h_first_),
                                                  sizeof(uint64_t) * 5, cudaHostAllocMapped),
                                    "cudaHostAlloc"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&b->d_first_), b->h_first_, 0),
      "cudaHostGetDevicePointer"));
  for (int s = 0; s < shape.slots; ++s) LC_RETURN_IF_ERROR(b->Reset(s));
  return b;
}

CudaLiveStates::~CudaLiveStates() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  cudaFree(pool_);
  cudaFree(d_slot_);
  cudaFree(d_in_);
  cudaFree(d_out_);
  cudaFreeHost(h_in_);
  cudaFreeHost(h_out_);
  cudaFreeHost(h_slot_);
  cudaFree(d_gate_);
  cudaFreeHost(h_first_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

size_t CudaLiveStates::row_bytes() const {
  if (windowed()) return layout_.region_bytes() * static_cast<size_t>(shape_.heads);
  return static_cast<size_t>(shape_.heads) * shape_.spec.dk * shape_.spec.dv * sizeof(float);
}

absl::Status CudaLiveStates::Step(const LayerStep& step, const LayerOutput& out) {
  const DecodeShape& s = shape_;
  const int batch = static_cast<int>(step.slot.size());
  if (batch > s.slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", batch, " exceeds the session's ", s.slots, " slots"));
  }
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaSetDevice(device_), "cudaSetDevice"));
  // Pool rows of this layer: padding stays padding (-1 is outside the pool).
  for (int b = 0; b < batch; ++b) {
    h_slot_[b] = step.slot[b] < 0 ? -1 : step.slot[b] * s.layers + step.layer;
  }
  // Host inputs: one pinned staging copy and one upload for all five; device inputs are read in
  // place (or copied on the device where not aligned for the kernels). q, k, v stay in the step's
  // dtype (the kernels read bf16 directly).
  const bool device_in = step.memory == Memory::kDevice;
  uint8_t* h = reinterpret_cast<uint8_t*>(h_in_);
  uint8_t* d = reinterpret_cast<uint8_t*>(d_in_);
  const void* dev[5];
  auto bytes = [](std::span<const float> x) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(x.data()), x.size_bytes());
  };
  const std::span<const uint8_t> parts[] = {step.q, step.k, step.v, bytes(step.g),
                                            bytes(step.beta)};
  size_t offset = 0;
  for (int i = 0; i < 5; ++i) {
    if (device_in && KernelAligned(parts[i].data())) {
      dev[i] = parts[i].data();
      continue;
    }
    if (device_in) {
      LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMemcpyAsync(d + offset, parts[i].data(),
                                                        parts[i].size(),
                                                        cudaMemcpyDeviceToDevice, stream_),
                                        "cudaMemcpyAsync"));
    } else {
      std::memcpy(h + offset, parts[i].data(), parts[i].size());
    }
    dev[i] = d + offset;
    offset += (parts[i].size() + 15) / 16 * 16;  // keep every array 16-byte aligned
  }
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(
      cudaMemcpyAsync(d_slot_, h_slot_, sizeof(int32_t) * batch, cudaMemcpyHostToDevice, stream_),
      "cudaMemcpyAsync"));
  const bool gated = device_in && !step.known_finite;
  if (gated) LC_RETURN_IF_ERROR(QueueFiniteGate(step));
  if (!device_in) {
    LC_RETURN_IF_ERROR(LC_CUDA_STATUS(
        cudaMemcpyAsync(d_in_, h_in_, offset, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync"));
  }
  // The output, likewise: written in place into device memory aligned for the kernels.
  const bool out_in_place = out.memory == Memory::kDevice && KernelAligned(out.o.data());
  kernels::StepParams p;
  p.batch = batch;
  p.num_heads = s.heads;
  p.slot = d_slot_;
  p.q = dev[0];
  p.k = dev[1];
  p.v = dev[2];
  p.g = static_cast<const float*>(dev[3]);
  p.beta = static_cast<const float*>(dev[4]);
  p.in_dtype = step.dtype == DType::kBf16 ? DType::kBf16 : DType::kFp32;
  p.o = out_in_place ? static_cast<void*>(out.o.data()) : static_cast<void*>(d_out_);
  p.out_dtype = out.dtype == DType::kBf16 ? DType::kBf16 : DType::kFp32;
  p.l2norm_qk = s.l2norm_qk;
  p.scale = s.scale;
  if (windowed()) {
    LC_RETURN_IF_ERROR(
        base::FromFormatStatus(kernels::WindowDecodeStepAndRefit(layout_, p, pool_, stream_)));
  } else {
    LC_RETURN_IF_ERROR(base::FromFormatStatus(kernels::Fp32DecodeStep(
        s.spec.kind, p, reinterpret_cast<float*>(pool_), s.slots * s.layers, stream_)));
  }
  if (out.memory == Memory::kDevice) {
    if (!out_in_place) {
      LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMemcpyAsync(out.o.data(), d_out_, out.o.size(),
                                                        cudaMemcpyDeviceToDevice, stream_),
                                        "cudaMemcpyAsync"));
    }
    LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaStreamSynchronize(stream_), "decode step"));
    return gated ? FiniteVerdict() : absl::OkStatus();
  }
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(cudaMemcpyAsync(h_out_, d_out_, out.o.size(), cudaMemcpyDeviceToHost, stream_),
           "cudaMemcpyAsync"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaStreamSynchronize(stream_), "decode step"));
  if (gated) LC_RETURN_IF_ERROR(FiniteVerdict());
  std::memcpy(out.o.data(), h_out_, out.o.size());
  return absl::OkStatus();
}

absl::Status CudaLiveStates::QueueFiniteGate(const LayerStep& step) {
  // The vectors as the engine handed them (staged copies hold the same bytes). If one holds an
  // infinity or a NaN, every request of the step turns to padding on the device before the
  // kernels run, so no state moves; the host reads which in h_first_ after the step's one wait.
  // (An engine that rewrites its buffer while the step runs can defeat the check, but only for
  // its own session's states.)
  const size_t e = DTypeBytes(step.dtype);
  const kernels::FiniteCheck checks[5] = {
      {step.q.data(), step.q.size() / e, step.dtype},
      {step.k.data(), step.k.size() / e, step.dtype},
      {step.v.data(), step.v.size() / e, step.dtype},
      {step.g.data(), step.g.size(), DType::kFp32},
      {step.beta.data(), step.beta.size(), DType::kFp32},
  };
  kernels::StepGate gate;
  gate.slot = d_slot_;
  gate.batch = static_cast<int>(step.slot.size());
  gate.answer = d_first_;
  gate.scratch = d_gate_;
  return base::FromFormatStatus(kernels::FindNonFiniteAndGate(checks, 5, gate, stream_));
}

absl::Status CudaLiveStates::FiniteVerdict() const {
  const char* names[5] = {"q", "k", "v", "g", "beta"};
  for (int i = 0; i < 5; ++i) {
    if (h_first_[i] != UINT64_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(names[i], "[", h_first_[i], "] is not finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaLiveStates::WriteRows(int slot, const std::vector<uint8_t>& host_rows) {
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaSetDevice(device_), "cudaSetDevice"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaMemcpyAsync(row(slot, 0), host_rows.data(), host_rows.size(),
                                          cudaMemcpyHostToDevice, stream_),
                          "cudaMemcpyAsync"));
  return LC_CUDA_STATUS(cudaStreamSynchronize(stream_), "slot upload");
}

absl::Status CudaLiveStates::Reset(int slot) {
  std::vector<uint8_t> rows(row_bytes() * shape_.layers, 0);
  if (windowed()) {
    reference::WindowOptions options;
    options.spec = shape_.spec;
    LC_ASSIGN_OR_RETURN(std::unique_ptr<reference::WindowState> zero,
                        FromFormat(reference::WindowState::Create(options, nullptr)));
    const reference::WindowSnapshot snapshot = zero->Snapshot();
    for (size_t r = 0; r < static_cast<size_t>(shape_.layers) * shape_.heads; ++r) {
      LC_RETURN_IF_ERROR(base::FromFormatStatus(
          WriteRegion(layout_, snapshot, rows.data() + r * layout_.region_bytes())));
    }
  }
  return WriteRows(slot, rows);
}

absl::Status CudaLiveStates::Load(int slot, std::span<const std::span<const uint8_t>> blobs) {
  const size_t per_slot = static_cast<size_t>(shape_.layers) * shape_.heads;
  if (blobs.size() != per_slot) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", per_slot, " blobs (layers x heads), got ", blobs.size()));
  }
  // Rows are built on the host first: a bad blob leaves the slot unchanged.
  std::vector<uint8_t> rows(row_bytes() * shape_.layers);
  const size_t elements = static_cast<size_t>(shape_.spec.dk) * shape_.spec.dv;
  for (size_t i = 0; i < per_slot; ++i) {
    if (windowed()) {
      reference::WindowOptions options;
      options.spec = shape_.spec;
      reference::WindowSnapshot snapshot;
      snapshot.blob.assign(blobs[i].begin(), blobs[i].end());
      snapshot.G.assign(static_cast<size_t>(shape_.gate_size()), 0.0f);
      // FromSnapshot checks the blob against the namespace's format.
      LC_RETURN_IF_ERROR(
          base::FromFormatStatus(reference::WindowState::FromSnapshot(options, snapshot).status()));
      LC_RETURN_IF_ERROR(base::FromFormatStatus(
          WriteRegion(layout_, snapshot, rows.data() + i * layout_.region_bytes())));
    } else {
      float* S_vk = reinterpret_cast<float*>(rows.data()) + i * elements;
      LC_RETURN_IF_ERROR(
          base::FromFormatStatus(reference::Decode(blobs[i], S_vk, Orientation::kVK)));
    }
  }
  return WriteRows(slot, rows);
}

absl::StatusOr<std::vector<std::vector<uint8_t>>> CudaLiveStates::Export(int slot) {
  std::vector<uint8_t> rows(row_bytes() * shape_.layers);
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaSetDevice(device_), "cudaSetDevice"));
  LC_RETURN_IF_ERROR(
      LC_CUDA_STATUS(cudaMemcpyAsync(rows.data(), row(slot, 0), rows.size(), cudaMemcpyDeviceToHost, stream_),
           "cudaMemcpyAsync"));
  LC_RETURN_IF_ERROR(LC_CUDA_STATUS(cudaStreamSynchronize(stream_), "slot download"));
  const size_t per_slot = static_cast<size_t>(shape_.layers) * shape_.heads;
  const int dk = shape_.spec.dk, dv = shape_.spec.dv;
  std::vector<float> S_kv(static_cast<size_t>(dk) * dv);
  std::vector<std::vector<uint8_t>> blobs;
  blobs.reserve(per_slot);
  for (size_t i = 0; i < per_slot; ++i) {
    if (windowed()) {
      LC_ASSIGN_OR_RETURN(
          reference::WindowSnapshot snapshot,
          FromFormat(ReadRegion(layout_, rows.data() + i * layout_.region_bytes())));
      if (snapshot.k.empty()) {
        blobs.push_back(std::move(snapshot.blob));
        continue;
      }
      reference::WindowOptions options;
      options.spec = shape_.spec;
      LC_ASSIGN_OR_RETURN(std::unique_ptr<reference::WindowState> w,
                          FromFormat(reference::WindowState::FromSnapshot(options, snapshot)));
      w->State(S_kv.data());
    } else {
      const float* S_vk = reinterpret_cast<const float*>(rows.data()) + i * S_kv.size();
      for (int a = 0; a < dk; ++a) {
        for (int c = 0; c < dv; ++c)
          S_kv[static_cast<size_t>(a) * dv + c] = S_vk[static_cast<size_t>(c) * dk + a];
      }
    }
    LC_ASSIGN_OR_RETURN(std::vector<uint8_t> blob,
                        FromFormat(reference::Encode(shape_.spec, S_kv.data(), Orientation::kKV)));
    blobs.push_back(std::move(blob));
  }
  return blobs;
}

}  // namespace leapcache::compute
