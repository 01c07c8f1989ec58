// Encode of dense FP32 or BF16 states ([N,H,K,V] or [N,H,V,K]) into window-format pool regions
// (FORMAT.md section 4, leap; CPU reference: reference::Encode): the state loaded straight into
// the fold's accumulator layout, then fitted and quantized there as the refit does
// (FitAndEncodeFragments, window_fit.cuh), the window left empty.
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"
#include "gpu/kernels/window_fit.cuh"
#include "gpu/kernels/window_layout.cuh"

namespace leapcache::kernels {
using namespace window;
namespace {

// kAnyWidth: the packed widths' paths (their ranks' factorizations, code packing) compiled in.
// The 8-bit encode runs without them: with them present and never taken it spilled more and ran
// 4-5% slower.
template <typename T, bool kAnyWidth>
__global__ void __launch_bounds__(kThreads, 2) EncodeKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  int slot;
  uint8_t* region = RegionOf(a, &slot);
  if (region == nullptr) return;
  // The state straight into the accumulator layout, fitted and quantized there as the refit
  // does after its fold. Per load instruction a warp reads 8 rows x 32 bytes ([K,V]) or 4
  // columns x 16 consecutive keys ([V,K], the thread's rows a0 and a1 = a0 + 1 as one pair).
  const T* in = static_cast<const T*>(a.states) + static_cast<size_t>(blockIdx.x) * kD * kD;
  const FragmentRows fr;
  float s[kD / 8][4];
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    const int j = fr.Col(nt);
    if (a.kv_layout) {
      LoadPairAsFloat(in, fr.a0 * kD + j, s[nt][0], s[nt][1]);
      LoadPairAsFloat(in, fr.a1 * kD + j, s[nt][2], s[nt][3]);
    } else {
      LoadPairAsFloat(in, j * kD + fr.a0, s[nt][0], s[nt][2]);
      LoadPairAsFloat(in, (j + 1) * kD + fr.a0, s[nt][1], s[nt][3]);
    }
  }
  if (a.rv.r > 0) BuildOmegaFragments(sh, a.rv.r);
  if (threadIdx.x < kD) sh.col_max[threadIdx.x] = 0;
  __syncthreads();
  FitAndEncodeFragments<kAnyWidth>(sh, s, region, a.rv, 0);
}

}  // namespace

Status WindowEncode(const PoolLayout& layout, const DenseParams& p, uint8_t* pool,
                    cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateDenseParams(p));
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, p.slot, p.batch, [] {
    return AllowSharedBytes(EncodeSharedBytes(), EncodeKernel<float, false>,
                            EncodeKernel<float, true>, EncodeKernel<__nv_bfloat16, false>,
                            EncodeKernel<__nv_bfloat16, true>);
  }));
  if (p.batch == 0) return OkStatus();
  RegionArgs a{MakeRegionView(layout),
               p.batch,
               p.slot,
               pool,
               p.states,
               p.layout == Orientation::kKV ? 1 : 0,
               layout.spec().kind == StateKind::kKda};
  const int grid = p.batch * layout.num_heads();
  const bool packed = layout.spec().bits != 8;
  auto* kernel =
      p.dtype == DType::kBf16
          ? (packed ? EncodeKernel<__nv_bfloat16, true> : EncodeKernel<__nv_bfloat16, false>)
          : (packed ? EncodeKernel<float, true> : EncodeKernel<float, false>);
  kernel<<<grid, kThreads, EncodeSharedBytes(), stream>>>(a);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
