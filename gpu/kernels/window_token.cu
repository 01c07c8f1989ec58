// The one-kernel decode token of small batches (WindowDecodeStepAndRefit): a head's step, from
// window_step_head.cuh, in the first four warps of a refit-sized CTA, then, where the window
// filled, its refit (RefitRegion, window_fit.cuh) by the whole CTA. Larger batches take the step
// launch and the refit launch.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/dispatch.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"
#include "gpu/kernels/window_fit.cuh"
#include "gpu/kernels/window_layout.cuh"
#include "gpu/kernels/window_step_head.cuh"

namespace leapcache::kernels {
using namespace window;
namespace {

// One head's refit for StepAndRefitKernel: what RefitKernel sets up once per CTA (Omega's
// fragments, the column maxima cleared), then RefitRegion. Not inlined: one copy per code width
// serves that kernel's every input and output type.
template <bool kAnyWidth>
__device__ __noinline__ void RefitHead(Shared& sh, uint8_t* region, RegionView rv, bool kda) {
  if (rv.r > 0) BuildOmegaFragments(sh, rv.r);
  if (threadIdx.x < kD) sh.col_max[threadIdx.x] = 0;
  __syncthreads();
  RefitRegion<kAnyWidth>(sh, region, rv, kda);
}

// A decode token in one launch, for batches whose heads fit in two waves of it: warps 0-3 run
// the step of (request, head) blockIdx.x (window_step_head.cuh, on a named barrier) while warps
// 4-7 wait; then, if the step filled the window (or found it full), the whole CTA refits it.
// The same bytes as WindowDecodeStep followed by WindowRefit, without the second launch and its
// listing, which at small batches cost as much as the step (WindowDecodeStepAndRefit). The
// step's shared memory is the start of the refit's.
template <bool kKda, bool kAnyWidth, typename TIn, typename TOut>
__global__ void __launch_bounds__(kThreads, 2) StepAndRefitKernel(step::StepArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int count;
  if (threadIdx.x < step::kThreads) {
    const int n = step::StepHead<kKda, kAnyWidth, TIn, TOut, NamedBarrier<1, step::kThreads>>(
        a, static_cast<int>(blockIdx.x), smem);
    if (threadIdx.x == 0) count = n;
  }
  __syncthreads();
  if (count != a.rv.p) return;  // an open window, a padding slot (-1) or a corrupt count
  const int b = blockIdx.x / a.rv.num_heads, h = blockIdx.x % a.rv.num_heads;
  uint8_t* region =
      a.pool + (static_cast<size_t>(a.slot[b]) * a.rv.num_heads + h) * a.rv.region_bytes;
  RefitHead<kAnyWidth>(*reinterpret_cast<Shared*>(smem), region, a.rv, kKda);
}

using StepAndRefitFn = void (*)(step::StepArgs);

StepAndRefitFn StepAndRefitKernelFor(bool kda, DType in, DType out, bool packed) {
  StepAndRefitFn kernel = nullptr;
  DispatchStep(kda, in, out, [&](auto kda_c, auto in_t, auto out_t) {
    constexpr bool kKda = decltype(kda_c)::value;
    using TIn = typename decltype(in_t)::type;
    using TOut = typename decltype(out_t)::type;
    kernel = packed ? StepAndRefitKernel<kKda, true, TIn, TOut>
                    : StepAndRefitKernel<kKda, false, TIn, TOut>;
  });
  return kernel;
}

}  // namespace

Status WindowDecodeStepAndRefit(const PoolLayout& layout, const StepParams& p, uint8_t* pool,
                                cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateWindowStep(layout, p, pool));
  if (p.batch == 0) return OkStatus();
  // One CTA per head, two per SM, so its step runs at a quarter of the step kernel's CTAs per
  // SM. Measured on an H200 (GDN, staggered windows, H = 32): the one kernel wins at one and two
  // waves (B = 8: 16.9 -> 12.9 us per token; B = 16: 25.0 -> 23.3) and loses from three
  // (B = 24: 27.0 -> 29.0; B = 32: 28.7 -> 33.6), so larger batches take the two launches.
  if (p.batch * p.num_heads > 4 * SmCount()) {
    LEAPCACHE_RETURN_IF_ERROR(WindowDecodeStep(layout, p, pool, stream));
    return WindowRefit(layout, p.slot, p.batch, pool, stream);
  }
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, p.slot, p.batch, [] {
    const size_t bytes = std::max<size_t>(RefitSharedBytes(kMaxWindow, kMaxRank, kD),
                                          step::StepStage(kMaxWindow, kMaxRank, kD).bytes);
    cudaError_t e = cudaSuccess;
    for (bool kda : {false, true}) {
      for (DType in : {DType::kFp32, DType::kBf16}) {
        for (DType out : {DType::kFp32, DType::kBf16}) {
          for (bool packed : {false, true}) {
            if (e == cudaSuccess)
              e = AllowSharedBytes(bytes, StepAndRefitKernelFor(kda, in, out, packed));
          }
        }
      }
    }
    return e;
  }));
  const step::StepArgs a = step::MakeStepArgs(layout, p, pool);
  const int sp = layout.spec().p, r = layout.spec().r;
  const size_t smem = std::max<size_t>(RefitSharedBytes(sp, r, layout.gate()),
                                       step::StepStage(sp, r, layout.gate()).bytes);
  StepAndRefitKernelFor(
      layout.spec().kind == StateKind::kKda, p.in_dtype, p.out_dtype,
      layout.spec().bits != 8)<<<p.batch * p.num_heads, kThreads, smem, stream>>>(a);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
