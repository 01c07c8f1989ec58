// leapcache-kernel-bench: times every kernel at H = 32, dk = dv = 128, BF16 inputs, cold L2
// (state buffers rotated well beyond the L2 size), and reports us/step, bandwidth against the
// byte model, and the window format's speedup over the FP32 kernel timed in the same run.
//
// The window format is timed over whole p-cycles (one WindowDecodeStepAndRefit per token: at
// batches whose heads fit two waves of it, one kernel that steps and refits; past that, a step
// and a refit launch; the refit amortised), with window boundaries staggered across requests
// (request i starts i mod p records into its window), at random phases (each request at a
// random point of its window, as under continuous batching, where which requests fall due
// together is arbitrary) and in lockstep (all refit together); staggered also as a step and a
// refit launch at every batch (the one-kernel token's baseline), and with each token's refit on
// a second stream, overlapped with the other requests' steps, to decide by measurement whether
// the refit belongs beside the step, after it, or in its kernel.
// Encode, decode, the step alone and the lockstep cycle are also timed at 6 and 4 bits (packed
// codes, r = 6 and 8).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/format/half.h"
#include "gpu/format/pool_layout.h"
#include "gpu/kernels/kernels.h"
#include "tests/gpu/device_buffer.h"

namespace leapcache::bench {
namespace {

using kernels::DenseParams;
using kernels::StepParams;
using testing::DeviceBuffer;

constexpr int kD = kernels::kKernelDim;
constexpr int kHeads = 32;

#define BENCH_CHECK_OK(expr)                                                          \
  do {                                                                                \
    const ::leapcache::Status s_ = (expr);                                            \
    if (!s_.ok()) {                                                                   \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s_.ToString().c_str());  \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Device {
  std::string name;
  size_t l2_bytes = 0;
};

Device GetDevice() {
  cudaDeviceProp prop{};
  LEAPCACHE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return Device{prop.name, static_cast<size_t>(prop.l2CacheSize)};
}

// Per-request inputs of one step, shared by all rotations (they are small and hot anyway).
struct Inputs {
  DeviceBuffer<uint16_t> q, k, v;
  DeviceBuffer<float> g, beta, o;
  DeviceBuffer<int32_t> slot;
  StepParams params;

  Inputs(StateKind kind, int batch, std::mt19937& rng) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    const size_t m = size_t(batch) * kHeads * kD;
    std::vector<uint16_t> h(m);
    for (auto& x : h) x = FloatToBf16(n(rng));
    q = DeviceBuffer<uint16_t>(h);
    for (auto& x : h) x = FloatToBf16(n(rng));
    k = DeviceBuffer<uint16_t>(h);
    for (auto& x : h) x = FloatToBf16(n(rng));
    v = DeviceBuffer<uint16_t>(h);
    std::vector<float> gh(size_t(batch) * kHeads * (kind == StateKind::kGdn ? 1 : kD));
    for (auto& x : gh) x = -0.05f * std::fabs(n(rng));
    g = DeviceBuffer<float>(gh);
    std::vector<float> bh(size_t(batch) * kHeads, 0.6f);
    beta = DeviceBuffer<float>(bh);
    o = DeviceBuffer<float>(m);
    std::vector<int32_t> sh(batch);
    for (int i = 0; i < batch; ++i) sh[i] = i;
    slot = DeviceBuffer<int32_t>(sh);
    params.batch = batch;
    params.num_heads = kHeads;
    params.slot = slot.get();
    params.q = q.get();
    params.k = k.get();
    params.v = v.get();
    params.in_dtype = DType::kBf16;
    params.g = g.get();
    params.beta = beta.get();
    params.o = o.get();
    params.out_dtype = DType::kFp32;
    params.l2norm_qk = true;
    params.scale = 1.0f / std::sqrt(float(kD));
  }
};

// How many copies of a buffer of `bytes` keep the working set well beyond the L2.
int Rotations(size_t bytes, size_t l2) {
  const size_t want = 6 * l2;
  int r = static_cast<int>((want + bytes - 1) / bytes);
  r = std::max(r, 2);
  const size_t cap = size_t(24) << 30;  // keep the whole benchmark under 24 GiB
  while (r > 2 && size_t(r) * bytes > cap) --r;
  return r;
}

// Median of `reps` timings of `body(iteration)` run `inner` times each, in microseconds per call.
template <typename F>
double TimeUs(int inner, int reps, F&& body) {
  cudaEvent_t a, b;
  LEAPCACHE_CUDA_CHECK(cudaEventCreate(&a));
  LEAPCACHE_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < inner; ++i) body(i);  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    LEAPCACHE_CUDA_CHECK(cudaEventRecord(a));
    for (int i = 0; i < inner; ++i) body(i);
    LEAPCACHE_CUDA_CHECK(cudaEventRecord(b));
    LEAPCACHE_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    LEAPCACHE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms / inner);
  }
  LEAPCACHE_CUDA_CHECK(cudaEventDestroy(a));
  LEAPCACHE_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The same, with the `calls` launches captured once into a CUDA graph and the graph replayed:
// how an engine running CUDA graphs sees small batches, without per-launch CPU overhead.
template <typename F>
double TimeGraphUs(int calls, int reps, F&& body) {
  cudaStream_t stream;
  LEAPCACHE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  LEAPCACHE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) body(i, stream);
  LEAPCACHE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LEAPCACHE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  LEAPCACHE_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  cudaEvent_t a, b;
  LEAPCACHE_CUDA_CHECK(cudaEventCreate(&a));
  LEAPCACHE_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    LEAPCACHE_CUDA_CHECK(cudaEventRecord(a, stream));
    LEAPCACHE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LEAPCACHE_CUDA_CHECK(cudaEventRecord(b, stream));
    LEAPCACHE_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    LEAPCACHE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms / calls);
  }
  LEAPCACHE_CUDA_CHECK(cudaEventDestroy(a));
  LEAPCACHE_CUDA_CHECK(cudaEventDestroy(b));
  LEAPCACHE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LEAPCACHE_CUDA_CHECK(cudaGraphDestroy(graph));
  LEAPCACHE_CUDA_CHECK(cudaStreamDestroy(stream));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Byte model (per head): what each kernel must move at least.
double InputBytes(StateKind kind) {  // q, k, v bf16; g; beta; o fp32
  return 3 * 2 * kD + 4.0 * (kind == StateKind::kGdn ? 1 : kD) + 4 + 4 * kD;
}

struct Row {
  std::string kind;
  int batch;
  double fp32_graph_us, window_graph_us, window_overlap_us, window_random_us, window_two_us;
  double fp32_us, window_stagger_us, window_lock_us, step_only_us, refit_us, encode_us, decode_us;
  double fp32_bytes, window_bytes, refit_bytes, encode_bytes, decode_bytes;
  // The 6- and 4-bit formats (packed codes, r = 6 and 8): [0] 6-bit, [1] 4-bit. Encode, decode,
  // the step alone and the lockstep cycle (step + refit launch per token).
  double packed_encode_us[2], packed_decode_us[2], packed_encode_bytes[2], packed_decode_bytes[2];
  double packed_step_us[2], packed_lock_us[2];
};

Row Measure(StateKind kind, int batch, const Device& dev, double copy_gbs) {
  std::mt19937 rng(7);
  Row row{};
  row.kind = StateKindName(kind);
  row.batch = batch;
  Inputs in(kind, batch, rng);
  const double heads = double(batch) * kHeads;

  // FP32 baseline.
  {
    const size_t pool_floats = size_t(batch) * kHeads * kD * kD;
    const int rot = Rotations(pool_floats * 4, dev.l2_bytes);
    std::vector<DeviceBuffer<float>> pools;
    std::vector<float> init(pool_floats);
    std::normal_distribution<float> n(0.0f, 0.1f);
    for (auto& x : init) x = n(rng);
    for (int r = 0; r < rot; ++r) pools.emplace_back(init);
    row.fp32_us = TimeUs(4 * rot, 5, [&](int i) {
      BENCH_CHECK_OK(kernels::Fp32DecodeStep(kind, in.params, pools[i % rot].get(), batch, nullptr));
    });
    row.fp32_graph_us = TimeGraphUs(4 * rot, 5, [&](int i, cudaStream_t st) {
      BENCH_CHECK_OK(kernels::Fp32DecodeStep(kind, in.params, pools[i % rot].get(), batch, st));
    });
    row.fp32_bytes = heads * (2.0 * kD * kD * 4 + InputBytes(kind));
  }

  // Window format, 8-bit, r = 4, p = 16.
  const BlobSpec spec = BlobSpec::Leap(kind, 8);
  auto layout_or = MakePoolLayout(spec, batch, kHeads);
  if (!layout_or.ok()) std::exit(1);
  const PoolLayout layout = *layout_or;
  const int p = spec.p;
  const double gate = layout.gate();
  const double payload = double(layout.payload().payload_bytes);
  const double record = 2.0 * kD + 2.0 * kD + 4 + 4 * gate;
  const double header = 16 + 4 * gate;
  // Step: payload + header + on average (p-1)/2 records read, one record + header written.
  const double step_bytes = payload + 2 * header + (p - 1) / 2.0 * record + record + InputBytes(kind);
  // Refit: payload + p records + header read, payload + header written; once per p steps.
  const double refit_bytes = 2 * payload + p * record + 2 * header;
  row.window_bytes = heads * (step_bytes + refit_bytes / p);
  row.refit_bytes = heads * refit_bytes;
  const int rot = Rotations(layout.pool_bytes(), dev.l2_bytes);
  std::vector<DeviceBuffer<uint8_t>> pools;
  for (int r = 0; r < rot; ++r) pools.emplace_back(layout.pool_bytes());
  // Fresh boundaries from random dense states (BF16 [N,H,V,K]).
  std::vector<uint16_t> dense(size_t(batch) * kHeads * kD * kD);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto& x : dense) x = FloatToBf16(n(rng));
  DeviceBuffer<uint16_t> d_dense(dense);
  DenseParams dp{batch, in.slot.get(), d_dense.get(), DType::kBf16, Orientation::kVK};
  // Window phases: request i starts phase[i] records into its window.
  std::vector<int> modulo_phase(batch), random_phase(batch), lockstep_phase(batch, 0);
  std::mt19937 phase_rng(11);
  for (int i = 0; i < batch; ++i) {
    modulo_phase[i] = i % p;
    random_phase[i] = static_cast<int>(phase_rng() % p);
  }
  auto reset = [&](const std::vector<int>& phase) {
    for (auto& pool : pools) {
      BENCH_CHECK_OK(kernels::WindowEncode(layout, dp, pool.get(), nullptr));
      // Step only the requests still short of their phase.
      for (int s = 0; s < p - 1; ++s) {
        std::vector<int32_t> active(batch);
        for (int i = 0; i < batch; ++i) active[i] = phase[i] > s ? i : -1;
        if (std::all_of(active.begin(), active.end(), [](int32_t x) { return x < 0; })) break;
        DeviceBuffer<int32_t> d_active(active);
        StepParams sp = in.params;
        sp.slot = d_active.get();
        BENCH_CHECK_OK(kernels::WindowDecodeStep(layout, sp, pool.get(), nullptr));
        LEAPCACHE_CUDA_CHECK(cudaDeviceSynchronize());
      }
    }
  };
  // Whole p-cycles of tokens, one cycle per pool, then the next pool.
  auto time_cycles = [&](const PoolLayout& pl, std::vector<DeviceBuffer<uint8_t>>& ps) {
    const int n = static_cast<int>(ps.size());
    return TimeUs(p * n, 5, [&](int i) {
      BENCH_CHECK_OK(kernels::WindowDecodeStepAndRefit(pl, in.params, ps[(i / p) % n].get(), nullptr));
    });
  };
  // The step kernel by itself on pools of fresh boundaries: 7 warm-up and 7 timed steps per pool
  // (records 7..13 read), so no window fills and no refit launch is needed.
  auto time_steps = [&](const PoolLayout& pl, std::vector<DeviceBuffer<uint8_t>>& ps) {
    const int n = static_cast<int>(ps.size());
    return TimeUs(7 * n, 1, [&](int i) {
      BENCH_CHECK_OK(kernels::WindowDecodeStep(pl, in.params, ps[i % n].get(), nullptr));
    });
  };
  reset(modulo_phase);
  row.window_stagger_us = time_cycles(layout, pools);
  // The same cycles as a step and a refit launch per token at every batch.
  reset(modulo_phase);
  row.window_two_us = TimeUs(p * rot, 5, [&](int i) {
    uint8_t* pool = pools[(i / p) % rot].get();
    BENCH_CHECK_OK(kernels::WindowDecodeStep(layout, in.params, pool, nullptr));
    BENCH_CHECK_OK(kernels::WindowRefit(layout, in.slot.get(), batch, pool, nullptr));
  });
  reset(random_phase);
  row.window_random_us = time_cycles(layout, pools);
  // Staggered again, graph-replayed: the tokens of one p-cycle per pool.
  reset(modulo_phase);
  row.window_graph_us = TimeGraphUs(p * rot, 5, [&](int i, cudaStream_t st) {
    BENCH_CHECK_OK(kernels::WindowDecodeStepAndRefit(layout, in.params, pools[(i / p) % rot].get(), st));
  });
  // Staggered again, each token's refit overlapped with other requests' steps: the requests whose
  // window fills at this token step and refit on a high-priority stream while the rest step on a
  // second stream (an engine that tracks its requests' window positions can launch a token so).
  // Request i holds (modulo_phase[i] + s) mod p records before token s of a pool's cycle.
  {
    std::vector<DeviceBuffer<int32_t>> due_slots, rest_slots;
    for (int s = 0; s < p; ++s) {
      std::vector<int32_t> due(batch), rest(batch);
      for (int i = 0; i < batch; ++i) {
        const bool fills = (modulo_phase[i] + s) % p == p - 1;
        due[i] = fills ? i : -1;
        rest[i] = fills ? -1 : i;
      }
      due_slots.emplace_back(due);
      rest_slots.emplace_back(rest);
    }
    DeviceBuffer<float> o_rest(size_t(batch) * kHeads * kD);  // the launches' padding writes zeros
    int low = 0, high = 0;
    LEAPCACHE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&low, &high));
    cudaStream_t refit_stream, step_stream;
    LEAPCACHE_CUDA_CHECK(cudaStreamCreateWithPriority(&refit_stream, cudaStreamNonBlocking, high));
    LEAPCACHE_CUDA_CHECK(cudaStreamCreateWithPriority(&step_stream, cudaStreamNonBlocking, low));
    cudaEvent_t fork, refit_done, step_done;
    for (cudaEvent_t* e : {&fork, &refit_done, &step_done}) {
      LEAPCACHE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    reset(modulo_phase);
    row.window_overlap_us = TimeUs(p * rot, 5, [&](int i) {
      uint8_t* pool = pools[(i / p) % rot].get();
      const int s = i % p;
      StepParams due = in.params, rest = in.params;
      due.slot = due_slots[s].get();
      rest.slot = rest_slots[s].get();
      rest.o = o_rest.get();
      LEAPCACHE_CUDA_CHECK(cudaEventRecord(fork, nullptr));
      LEAPCACHE_CUDA_CHECK(cudaStreamWaitEvent(refit_stream, fork));
      LEAPCACHE_CUDA_CHECK(cudaStreamWaitEvent(step_stream, fork));
      BENCH_CHECK_OK(kernels::WindowDecodeStep(layout, due, pool, refit_stream));
      BENCH_CHECK_OK(kernels::WindowRefit(layout, due.slot, batch, pool, refit_stream));
      BENCH_CHECK_OK(kernels::WindowDecodeStep(layout, rest, pool, step_stream));
      LEAPCACHE_CUDA_CHECK(cudaEventRecord(refit_done, refit_stream));
      LEAPCACHE_CUDA_CHECK(cudaEventRecord(step_done, step_stream));
      LEAPCACHE_CUDA_CHECK(cudaStreamWaitEvent(nullptr, refit_done));
      LEAPCACHE_CUDA_CHECK(cudaStreamWaitEvent(nullptr, step_done));
    });
    LEAPCACHE_CUDA_CHECK(cudaDeviceSynchronize());
    for (cudaEvent_t e : {fork, refit_done, step_done}) LEAPCACHE_CUDA_CHECK(cudaEventDestroy(e));
    LEAPCACHE_CUDA_CHECK(cudaStreamDestroy(refit_stream));
    LEAPCACHE_CUDA_CHECK(cudaStreamDestroy(step_stream));
  }
  reset(lockstep_phase);
  row.window_lock_us = time_cycles(layout, pools);
  // The refit alone with every head due, and the step alone (refit launch skipped).
  {
    reset(lockstep_phase);
    for (auto& pool : pools) {
      for (int s = 0; s < p; ++s) BENCH_CHECK_OK(kernels::WindowDecodeStep(layout, in.params, pool.get(), nullptr));
    }
    // Each pool refits once for real; later calls find nothing due, so time one pass per pool.
    cudaEvent_t a, b;
    LEAPCACHE_CUDA_CHECK(cudaEventCreate(&a));
    LEAPCACHE_CUDA_CHECK(cudaEventCreate(&b));
    LEAPCACHE_CUDA_CHECK(cudaDeviceSynchronize());
    LEAPCACHE_CUDA_CHECK(cudaEventRecord(a));
    for (auto& pool : pools) BENCH_CHECK_OK(kernels::WindowRefit(layout, in.slot.get(), batch, pool.get(), nullptr));
    LEAPCACHE_CUDA_CHECK(cudaEventRecord(b));
    LEAPCACHE_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    LEAPCACHE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    row.refit_us = 1000.0 * ms / rot;
    LEAPCACHE_CUDA_CHECK(cudaEventDestroy(a));
    LEAPCACHE_CUDA_CHECK(cudaEventDestroy(b));
    reset(lockstep_phase);
    row.step_only_us = time_steps(layout, pools);
  }
  // Encode (BF16 [N,H,V,K] in) and decode (FP32 [N,H,V,K] out) on a layout's pools: the 8-bit
  // ones above, then the packed formats', each on pools of their own.
  DeviceBuffer<float> out(size_t(batch) * kHeads * kD * kD);
  const DenseParams op{batch, in.slot.get(), out.get(), DType::kFp32, Orientation::kVK};
  auto time_codec = [&](const PoolLayout& pl, std::vector<DeviceBuffer<uint8_t>>& ps,
                        double* encode_us, double* decode_us, double* encode_bytes,
                        double* decode_bytes) {
    const int n = static_cast<int>(ps.size());
    *encode_us = TimeUs(n, 5, [&](int i) {
      BENCH_CHECK_OK(kernels::WindowEncode(pl, dp, ps[i % n].get(), nullptr));
    });
    *decode_us = TimeUs(n, 5, [&](int i) {
      BENCH_CHECK_OK(kernels::WindowDecode(pl, op, ps[i % n].get(), nullptr));
    });
    const double pb = double(pl.payload().payload_bytes);
    *encode_bytes = heads * (2.0 * kD * kD + pb + header);
    *decode_bytes = heads * (pb + header + 4.0 * kD * kD);
  };
  time_codec(layout, pools, &row.encode_us, &row.decode_us, &row.encode_bytes, &row.decode_bytes);
  for (int f = 0; f < 2; ++f) {
    auto packed_or = MakePoolLayout(BlobSpec::Leap(kind, f == 0 ? 6 : 4), batch, kHeads);
    if (!packed_or.ok()) std::exit(1);
    std::vector<DeviceBuffer<uint8_t>> packed_pools;
    const int prot = Rotations(packed_or->pool_bytes(), dev.l2_bytes);
    for (int r = 0; r < prot; ++r) packed_pools.emplace_back(packed_or->pool_bytes());
    const PoolLayout& pl = *packed_or;
    time_codec(pl, packed_pools, &row.packed_encode_us[f], &row.packed_decode_us[f],
               &row.packed_encode_bytes[f], &row.packed_decode_bytes[f]);
    // The pools hold fresh boundaries from the encode's timing.
    row.packed_step_us[f] = time_steps(pl, packed_pools);
    for (auto& pool : packed_pools)
      BENCH_CHECK_OK(kernels::WindowEncode(pl, dp, pool.get(), nullptr));
    row.packed_lock_us[f] = time_cycles(pl, packed_pools);
  }
  (void)copy_gbs;
  return row;
}

double CopyBandwidthGBs() {
  const size_t bytes = size_t(2) << 30;
  DeviceBuffer<uint8_t> a(bytes), b(bytes);
  LEAPCACHE_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  const double us = TimeUs(5, 5, [&](int) {
    LEAPCACHE_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
  });
  return 2.0 * bytes / (us * 1e3);  // read + write
}

std::string F(double x, int prec = 1) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", prec, x);
  return b;
}

int Main(int argc, char** argv) {
  std::string out = ".";
  std::vector<int> batches = {1, 8, 32, 64, 128, 256, 512};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else if (a == "--batches" && i + 1 < argc) {
      batches.clear();
      std::stringstream ss(argv[++i]);
      for (std::string x; std::getline(ss, x, ',');) batches.push_back(std::stoi(x));
    } else {
      std::fprintf(stderr, "usage: leapcache-kernel-bench [--out DIR] [--batches 1,8,...]\n");
      return 2;
    }
  }
  const Device dev = GetDevice();
  const double copy = CopyBandwidthGBs();
  std::printf("%s, L2 %zu MiB, device copy %.0f GB/s (read + write)\n", dev.name.c_str(), dev.l2_bytes >> 20, copy);
  std::vector<Row> rows;
  for (StateKind kind : {StateKind::kGdn, StateKind::kKda}) {
    for (int b : batches) {
      rows.push_back(Measure(kind, b, dev, copy));
      const Row& r = rows.back();
      std::printf(
          "%s B=%d fp32 %.1f us, window %.1f us (two launches %.1f, random phases %.1f, lockstep %.1f, "
          "refit overlapped %.1f), speedup %.2fx\n",
          r.kind.c_str(), b, r.fp32_us, r.window_stagger_us, r.window_two_us, r.window_random_us,
          r.window_lock_us, r.window_overlap_us, r.fp32_us / r.window_stagger_us);
      std::fflush(stdout);
    }
  }
  auto gbs = [](double bytes, double us) { return bytes / (us * 1e3); };
  std::ostringstream md, js;
  md << "GPU: " << dev.name << "; device copy " << F(copy, 0) << " GB/s (read + write). H = 32, dk = dv = 128, "
     << "BF16 inputs, cold L2. Window = 8-bit leap format, p = 16, r = 4, one p-cycle of tokens "
     << "(WindowDecodeStepAndRefit: one kernel while the batch's heads fit two waves of it, else a step "
     << "and a refit launch), per-step average; \"two launches\": a step and a refit launch per token "
     << "at every batch. GB/s = byte model / time.\n\n"
     << "| kind | B | fp32 us | fp32 GB/s | fp32 % copy | window us (staggered) | GB/s | lockstep us | "
        "speedup (staggered) | speedup (lockstep) | step only us | refit us (all due) | refit GB/s | "
        "encode us | encode GB/s | decode us | decode GB/s | fp32 us (graph) | window us (graph) | "
        "speedup (graph) | window us (staggered, refit overlapped) | window us (random phases) | "
        "speedup (random phases) | window us (staggered, two launches) |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|---:|\n";
  js << "{\n  \"gpu\": \"" << dev.name << "\",\n  \"copy_gbs\": " << copy << ",\n  \"heads\": " << kHeads
     << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    md << "| " << r.kind << " | " << r.batch << " | " << F(r.fp32_us) << " | " << F(gbs(r.fp32_bytes, r.fp32_us), 0)
       << " | " << F(100 * gbs(r.fp32_bytes, r.fp32_us) / copy, 0) << "% | " << F(r.window_stagger_us) << " | "
       << F(gbs(r.window_bytes, r.window_stagger_us), 0) << " | " << F(r.window_lock_us) << " | "
       << F(r.fp32_us / r.window_stagger_us, 2) << "x | " << F(r.fp32_us / r.window_lock_us, 2) << "x | "
       << F(r.step_only_us) << " | " << F(r.refit_us) << " | " << F(gbs(r.refit_bytes, r.refit_us), 0) << " | "
       << F(r.encode_us) << " | " << F(gbs(r.encode_bytes, r.encode_us), 0) << " | " << F(r.decode_us) << " | "
       << F(gbs(r.decode_bytes, r.decode_us), 0) << " | " << F(r.fp32_graph_us) << " | "
       << F(r.window_graph_us) << " | " << F(r.fp32_graph_us / r.window_graph_us, 2) << "x | "
       << F(r.window_overlap_us) << " | " << F(r.window_random_us) << " | "
       << F(r.fp32_us / r.window_random_us, 2) << "x | " << F(r.window_two_us) << " |\n";
    js << "    {\"kind\": \"" << r.kind << "\", \"batch\": " << r.batch << ", \"fp32_us\": " << r.fp32_us
       << ", \"fp32_bytes\": " << r.fp32_bytes << ", \"window_staggered_us\": " << r.window_stagger_us
       << ", \"window_lockstep_us\": " << r.window_lock_us << ", \"window_bytes_per_step\": " << r.window_bytes
       << ", \"step_only_us\": " << r.step_only_us << ", \"refit_all_due_us\": " << r.refit_us
       << ", \"refit_bytes\": " << r.refit_bytes << ", \"encode_us\": " << r.encode_us
       << ", \"encode_bytes\": " << r.encode_bytes << ", \"decode_us\": " << r.decode_us
       << ", \"decode_bytes\": " << r.decode_bytes << ", \"fp32_graph_us\": " << r.fp32_graph_us
       << ", \"window_staggered_graph_us\": " << r.window_graph_us
       << ", \"window_staggered_overlapped_us\": " << r.window_overlap_us
       << ", \"window_random_phases_us\": " << r.window_random_us
       << ", \"window_staggered_two_launches_us\": " << r.window_two_us << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  js << "  ],\n  \"packed_rows\": [\n";
  md << "\nBy code width: 8-bit (r = 4) as above, 6-bit (r = 6) and 4-bit (r = 8) with packed "
        "codes. Encode (BF16 [N,H,V,K] in), decode (FP32 out), the step alone, and the lockstep "
        "cycle (per token) with its speedup over the FP32 kernel.\n\n"
     << "| kind | B | 8-bit encode us | GB/s | 8-bit decode us | GB/s | 6-bit encode us | GB/s | "
        "6-bit decode us | GB/s | 6-bit step us | 6-bit lockstep us | speedup | 4-bit encode us | "
        "GB/s | 4-bit decode us | GB/s | 4-bit step us | 4-bit lockstep us | speedup |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    md << "| " << r.kind << " | " << r.batch << " | " << F(r.encode_us) << " | "
       << F(gbs(r.encode_bytes, r.encode_us), 0) << " | " << F(r.decode_us) << " | "
       << F(gbs(r.decode_bytes, r.decode_us), 0);
    js << "    {\"kind\": \"" << r.kind << "\", \"batch\": " << r.batch;
    for (int f = 0; f < 2; ++f) {
      const char* name = f == 0 ? "6bit" : "4bit";
      md << " | " << F(r.packed_encode_us[f]) << " | "
         << F(gbs(r.packed_encode_bytes[f], r.packed_encode_us[f]), 0) << " | "
         << F(r.packed_decode_us[f]) << " | "
         << F(gbs(r.packed_decode_bytes[f], r.packed_decode_us[f]), 0) << " | "
         << F(r.packed_step_us[f]) << " | " << F(r.packed_lock_us[f]) << " | "
         << F(r.fp32_us / r.packed_lock_us[f], 2) << "x";
      js << ", \"encode_" << name << "_us\": " << r.packed_encode_us[f] << ", \"encode_" << name
         << "_bytes\": " << r.packed_encode_bytes[f] << ", \"decode_" << name
         << "_us\": " << r.packed_decode_us[f] << ", \"decode_" << name
         << "_bytes\": " << r.packed_decode_bytes[f] << ", \"step_only_" << name
         << "_us\": " << r.packed_step_us[f] << ", \"window_lockstep_" << name
         << "_us\": " << r.packed_lock_us[f];
    }
    md << " |\n";
    js << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  js << "  ]\n}\n";
  std::filesystem::create_directories(out);
  std::ofstream(std::filesystem::path(out) / "kernel_bench.md") << md.str();
  std::ofstream(std::filesystem::path(out) / "kernel_bench.json") << js.str();
  std::printf("\n%s", md.str().c_str());
  return 0;
}

}  // namespace
}  // namespace leapcache::bench

int main(int argc, char** argv) { return leapcache::bench::Main(argc, argv); }
