// The window format's decode step kernel: one CTA of 128 threads per (request, head), each
// running the step of window_step_head.cuh.
#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/dispatch.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"
#include "gpu/kernels/window_step_head.cuh"

namespace leapcache::kernels {
namespace {

using step::StepArgs;
using step::StepStage;

template <bool kKda, bool kPacked, typename TIn, typename TOut>
__global__ void __launch_bounds__(step::kThreads, kKda ? 7 : 8) WindowStepKernel(StepArgs a) {
  extern __shared__ __align__(16) uint8_t s_stage[];
  step::StepHead<kKda, kPacked, TIn, TOut, CtaBarrier>(a, static_cast<int>(blockIdx.x), s_stage);
}

}  // namespace


Status WindowDecodeStep(const PoolLayout& layout, const StepParams& p, uint8_t* pool,
                        cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateWindowStep(layout, p, pool));
  if (p.batch == 0) return OkStatus();
  const StepArgs a = step::MakeStepArgs(layout, p, pool);
  const dim3 grid(p.batch * p.num_heads), block(step::kThreads);
  const bool kda = layout.spec().kind == StateKind::kKda;
  const int stage_bytes = StepStage(layout.spec().p, layout.spec().r, layout.gate()).bytes;
  const bool packed = layout.spec().bits != 8;
  DispatchStep(kda, p.in_dtype, p.out_dtype, [&](auto kda_c, auto in_t, auto out_t) {
    constexpr bool kKda = decltype(kda_c)::value;
    using TIn = typename decltype(in_t)::type;
    using TOut = typename decltype(out_t)::type;
    auto* kernel =
        packed ? WindowStepKernel<kKda, true, TIn, TOut> : WindowStepKernel<kKda, false, TIn, TOut>;
    kernel<<<grid, block, stage_bytes, stream>>>(a);
  });
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
