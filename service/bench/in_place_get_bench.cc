// leapcache-in-place-get-bench: where the device time of a dense get decoded in place goes
// (Compute::DecodeInPlace: the decode kernel reading stored blobs where they lie, writing
// states into the destination; then the CRC-32C of what it wrote), against cudaMemcpy device to
// device of the dense bytes, on one GPU, in process (numbers printed, not asserted).
//
//   leapcache-in-place-get-bench [--reps=N]
//
// For 32, 1,024 and 4,096 GDN states of 128 x 128 in the 8-bit window format (one layer's
// heads, a 32 x 32 checkpoint, four of them), bf16 [V,K] out: the payload decode kernel alone,
// the pool decode kernel of the same states (the staged path's), the CRC-32C kernel over the
// dense bytes and over the compact ones, the device copy of the dense bytes (CUDA events,
// median of N), and the whole KernelDecoder::DecodeInPlace call as the service makes it (host
// clock: list upload, the kernels, the CRC back, one wait; median and worst of N).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "gpu/format/format.h"
#include "gpu/format/pool_layout.h"
#include "gpu/kernels/kernels.h"
#include "service/compute/cuda/kernel_decoder.h"
#include "transport/device/crc32c_kernel.h"

namespace leapcache {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

// Median device time of `f` on `stream` over `reps` runs after one warm-up, in microseconds.
template <typename F>
double DeviceMicros(F f, int reps, cudaStream_t stream) {
  cudaEvent_t a, b;
  Check(cudaEventCreate(&a), "cudaEventCreate");
  Check(cudaEventCreate(&b), "cudaEventCreate");
  f();
  Check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    Check(cudaEventRecord(a, stream), "cudaEventRecord");
    f();
    Check(cudaEventRecord(b, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(1000 * ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void Run(int n, int reps) {
  const BlobSpec spec = BlobSpec::Leap(StateKind::kGdn, 8);
  const StatusOr<PoolLayout> layout = MakePoolLayout(spec, n, 1);
  const StatusOr<PoolLayout> one = MakePoolLayout(spec, 1, 1);
  Check(layout.status(), "MakePoolLayout");
  // n random states encoded into a pool as fresh boundaries: each region's payload is what a
  // stored blob holds past its header.
  std::vector<float> states(size_t(n) * 128 * 128);
  std::mt19937 rng(n);
  std::normal_distribution<float> normal;
  for (float& x : states) x = normal(rng);
  std::vector<int32_t> slots(n);
  std::iota(slots.begin(), slots.end(), 0);
  uint8_t *pool, *dense, *copy;
  float* d_states;
  int32_t* d_slots;
  const uint8_t** d_payloads;
  uint32_t* d_crc;
  const size_t dense_bytes = size_t(n) * 128 * 128 * 2;
  // Units as the GPU tier lays them out: blobs of blob_bytes back to back, 16-byte aligned.
  const size_t blob_bytes = kHeaderBytes + layout->payload().payload_bytes;
  uint8_t* units;
  Check(cudaMalloc(&pool, layout->pool_bytes()), "cudaMalloc");
  Check(cudaMalloc(&units, size_t(n) * blob_bytes), "cudaMalloc");
  Check(cudaMalloc(&dense, dense_bytes), "cudaMalloc");
  Check(cudaMalloc(&copy, dense_bytes), "cudaMalloc");
  Check(cudaMalloc(&d_states, states.size() * 4), "cudaMalloc");
  Check(cudaMalloc(&d_slots, n * 4), "cudaMalloc");
  Check(cudaMalloc(&d_payloads, n * sizeof(void*)), "cudaMalloc");
  Check(cudaMalloc(&d_crc, 4), "cudaMalloc");
  Check(cudaMemcpy(d_states, states.data(), states.size() * 4, cudaMemcpyHostToDevice), "upload");
  Check(cudaMemcpy(d_slots, slots.data(), n * 4, cudaMemcpyHostToDevice), "upload");
  Check(kernels::WindowEncode(*layout, {n, d_slots, d_states, DType::kFp32, Orientation::kKV}, pool,
                              nullptr),
        "WindowEncode");
  std::vector<const uint8_t*> at(n), payloads(n);
  for (int i = 0; i < n; ++i) {
    at[i] = units + i * blob_bytes;
    payloads[i] = at[i] + kHeaderBytes;
    Check(cudaMemcpy(const_cast<uint8_t*>(payloads[i]), pool + layout->region_offset(i, 0),
                     blob_bytes - kHeaderBytes, cudaMemcpyDeviceToDevice),
          "place");
  }
  Check(cudaMemcpy(d_payloads, payloads.data(), n * sizeof(void*), cudaMemcpyHostToDevice),
        "upload");
  Check(transport::PrepareCrc32c(0), "PrepareCrc32c");
  cudaStream_t s;
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");

  kernels::PayloadDecodeParams p;
  p.batch = n;
  p.payloads = d_payloads;
  p.states = dense;
  p.stride_bytes = 128 * 128 * 2;
  p.dtype = DType::kBf16;
  p.layout = Orientation::kVK;
  const double payload_decode = DeviceMicros(
      [&] { Check(kernels::WindowDecodePayloads(*one, p, s), "WindowDecodePayloads"); }, reps, s);
  const kernels::DenseParams dp{n, d_slots, dense, DType::kBf16, Orientation::kVK};
  const double pool_decode = DeviceMicros(
      [&] { Check(kernels::WindowDecode(*layout, dp, pool, s), "WindowDecode"); }, reps, s);
  auto crc_of = [&](const void* data, size_t bytes) {
    return DeviceMicros(
        [&] {
          Check(cudaMemsetAsync(d_crc, 0, 4, s), "cudaMemsetAsync");
          Check(transport::LaunchCrc32c(data, bytes, d_crc, s), "LaunchCrc32c");
        },
        reps, s);
  };
  const double crc_dense = crc_of(dense, dense_bytes);
  const double crc_compact = crc_of(units, size_t(n) * blob_bytes);
  const double d2d = DeviceMicros(
      [&] {
        Check(cudaMemcpyAsync(copy, dense, dense_bytes, cudaMemcpyDeviceToDevice, s), "copy");
      },
      reps, s);

  absl::StatusOr<std::unique_ptr<compute::KernelDecoder>> decoder =
      compute::KernelDecoder::Create(0, 64);
  if (!decoder.ok()) {
    std::fprintf(stderr, "KernelDecoder: %s\n", decoder.status().ToString().c_str());
    std::exit(1);
  }
  const compute::DeviceUnits du{at, blob_bytes, 0};
  std::vector<double> call;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<uint32_t> crc =
        (*decoder)->DecodeInPlace(spec, DType::kBf16, Orientation::kVK, du, {dense, dense_bytes});
    const auto t1 = std::chrono::steady_clock::now();
    if (!crc.ok()) {
      std::fprintf(stderr, "DecodeInPlace: %s\n", crc.status().ToString().c_str());
      std::exit(1);
    }
    if (r > 0) call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(call.begin(), call.end());
  std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f (%.1f) | %.2f |\n", n,
              dense_bytes / 1e6, payload_decode, pool_decode, crc_dense, crc_compact, d2d,
              call[call.size() / 2], call.back(), d2d / call[call.size() / 2]);
  for (void* q :
       {static_cast<void*>(pool), static_cast<void*>(units), static_cast<void*>(dense),
        static_cast<void*>(copy), static_cast<void*>(d_states), static_cast<void*>(d_slots),
        static_cast<void*>(d_payloads), static_cast<void*>(d_crc)}) {
    cudaFree(q);
  }
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace leapcache

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--reps=", 0) == 0 && absl::SimpleAtoi(arg.substr(7), &reps) && reps > 0) {
      continue;
    }
    std::fprintf(stderr, "usage: %s [--reps=N]\n", argv[0]);
    return 2;
  }
  cudaDeviceProp prop{};
  leapcache::Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("%s; dense bf16 [V,K] out of 8-bit GDN blobs; device us, median of %d\n\n", prop.name,
              reps);
  std::printf(
      "| states | dense MB | payload decode | pool decode | CRC dense | CRC compact | D2D copy "
      "of dense | DecodeInPlace call (worst) | copy / call |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int n : {32, 1024, 4096}) leapcache::Run(n, reps);
  return 0;
}
