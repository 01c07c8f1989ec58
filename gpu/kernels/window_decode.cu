// Decode of window-format pool regions into dense FP32 or BF16 states ([N,H,K,V] or [N,H,V,K]):
// each region's state reconstructed from its payload and open window (FoldStaged,
// window_fold.cuh; CPU reference: reference::Dequantize and WindowState's reconstruct) and
// written from the fold's accumulators; padding slots give zeros. The payload variant reads
// payloads wherever they lie (stored blobs in the GPU tier) and writes states at a stride.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/device_utils.cuh"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"
#include "gpu/kernels/window_fold.cuh"
#include "gpu/kernels/window_layout.cuh"

namespace leapcache::kernels {
using namespace window;
namespace {

// The state of `region` (a pool region, or with kPayloadOnly a payload alone: an empty window)
// written to `out` in the layout `kv` names.
template <typename T, bool kPayloadOnly>
__device__ __forceinline__ void DecodeInto(DecodeShared& sh, const uint8_t* region, T* out,
                                           const RegionView& rv, bool kv, bool kda) {
  // Straight from the fold's accumulators: per store instruction a warp writes 8 rows x 32
  // bytes ([K,V]) or one column's 16 consecutive keys ([V,K], the thread's rows a0 and a1 = a0 + 1
  // as one pair), whole 32-byte sectors either way.
  const FragmentRows fr;
  // The staging holds p records; a window never holds more. A count outside [0, p] is a corrupt
  // header (its byte counts would wrap): the state is all NaN, so it shows instead of passing
  // for a state.
  const int n = kPayloadOnly ? 0 : *reinterpret_cast<const int32_t*>(region + rv.window);
  if (n < 0 || n > rv.p) {
    for (int i = threadIdx.x; i < kD * kD; i += kThreads) {
      StoreFromFloat(out, i, __int_as_float(0x7fc00000));
    }
    return;
  }
  StageReads<true, DecodeShared, kPayloadOnly>(sh, region, rv, n);
  FoldStaged<2, true>(sh, rv, n, kda, [&](int nt, float s00, float s01, float s10, float s11) {
    const int j = fr.Col(nt);
    if (kv) {
      StorePairFromFloat(out, fr.a0 * kD + j, s00, s01);
      StorePairFromFloat(out, fr.a1 * kD + j, s10, s11);
    } else {
      StorePairFromFloat(out, j * kD + fr.a0, s00, s10);
      StorePairFromFloat(out, (j + 1) * kD + fr.a0, s01, s11);
    }
  });
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 3) DecodeKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DecodeShared& sh = *reinterpret_cast<DecodeShared*>(smem);
  int slot;
  uint8_t* region = RegionOf(a, &slot);
  T* out = static_cast<T*>(a.states) + static_cast<size_t>(blockIdx.x) * kD * kD;
  if (region == nullptr) {  // padding: zeros
    for (int i = threadIdx.x; i < kD * kD; i += kThreads) StoreFromFloat(out, i, 0.0f);
    return;
  }
  DecodeInto<T, false>(sh, region, out, a.rv, a.kv_layout != 0, a.kda);
}

// One CTA per payload: payloads[b] decoded to states + b * stride bytes.
struct PayloadArgs {
  RegionView rv;
  const uint8_t* const* payloads;
  unsigned char* states;
  uint64_t stride;
  int kv_layout;
  bool kda;
};

template <typename T>
__global__ void __launch_bounds__(kThreads, 3) DecodePayloadsKernel(PayloadArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DecodeShared& sh = *reinterpret_cast<DecodeShared*>(smem);
  T* out = reinterpret_cast<T*>(a.states + blockIdx.x * a.stride);
  DecodeInto<T, true>(sh, a.payloads[blockIdx.x], out, a.rv, a.kv_layout != 0, a.kda);
}

}  // namespace

Status WindowDecode(const PoolLayout& layout, const DenseParams& p, const uint8_t* pool,
                    cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateDenseParams(p));
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, p.slot, p.batch, [] {
    const size_t bytes = DecodeSharedBytes(kMaxWindow, kMaxRank, kD);
    return AllowSharedBytes(bytes, DecodeKernel<float>, DecodeKernel<__nv_bfloat16>);
  }));
  if (p.batch == 0) return OkStatus();
  RegionArgs a{MakeRegionView(layout),
               p.batch,
               p.slot,
               const_cast<uint8_t*>(pool),
               p.states,
               p.layout == Orientation::kKV ? 1 : 0,
               layout.spec().kind == StateKind::kKda};
  const int grid = p.batch * layout.num_heads();
  const size_t decode_bytes = DecodeSharedBytes(layout.spec().p, layout.spec().r, layout.gate());
  if (p.dtype == DType::kBf16) {
    DecodeKernel<__nv_bfloat16><<<grid, kThreads, decode_bytes, stream>>>(a);
  } else {
    DecodeKernel<float><<<grid, kThreads, decode_bytes, stream>>>(a);
  }
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

Status WindowDecodePayloads(const PoolLayout& layout, const PayloadDecodeParams& p,
                            cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(ValidatePayloadDecodeParams(layout, p));
  LEAPCACHE_RETURN_IF_ERROR(OncePerDevice([] {
    const size_t bytes = DecodeSharedBytes(kMaxWindow, kMaxRank, kD);
    return CudaStatus(
        AllowSharedBytes(bytes, DecodePayloadsKernel<float>, DecodePayloadsKernel<__nv_bfloat16>),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
  }));
  if (p.batch == 0) return OkStatus();
  const PayloadArgs a{MakeRegionView(layout),
                      p.payloads,
                      static_cast<unsigned char*>(p.states),
                      p.stride_bytes,
                      p.layout == Orientation::kKV ? 1 : 0,
                      layout.spec().kind == StateKind::kKda};
  const size_t decode_bytes = DecodeSharedBytes(layout.spec().p, layout.spec().r, layout.gate());
  if (p.dtype == DType::kBf16) {
    DecodePayloadsKernel<__nv_bfloat16><<<p.batch, kThreads, decode_bytes, stream>>>(a);
  } else {
    DecodePayloadsKernel<float><<<p.batch, kThreads, decode_bytes, stream>>>(a);
  }
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
