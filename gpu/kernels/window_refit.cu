// Boundary refit of window-format pool regions (FORMAT.md section 5: where a window holds p
// records, B <- Encode(S), the records cleared, G <- 0; CPU reference: WindowState's refit):
// one launch over a batch, whichever of its heads are due (ListDueHeads), each refitted by
// RefitRegion (window_fit.cuh).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gpu/kernels/cuda_status.h"
#include "gpu/kernels/kernels.h"
#include "gpu/kernels/launch_support.h"
#include "gpu/kernels/region.cuh"
#include "gpu/kernels/window_fit.cuh"
#include "gpu/kernels/window_layout.cuh"

namespace leapcache::kernels {
using namespace window;
namespace {

// Which due heads a refit CTA takes. G = gridDim.x CTAs share the launch's (request, head) items,
// and each item has one owner that checks its record count and refits it if due (exactly p
// records: a count outside [0, p] is a corrupt header, left for the step to flag). A request's
// heads step together, so they fall due together, but which requests fall due at a token is the
// engine's schedule: under continuous batching, any subset. A fixed item-to-CTA map (item mod G)
// then lets one CTA draw several due heads while others draw none, and the launch takes as long
// as that CTA's list (with random window phases at B = 256, about 4.6 heads where 2.5 would do).
// So the owners follow a hint: whether head 0 of a request is due. Hinted requests are ranked in
// batch order and their heads numbered rank * H + h; CTA c owns the numbers congruent to c mod G,
// which gives every CTA at most ceil(due heads / G) of them, whatever requests are due. The
// other requests' heads keep the fixed map. Every CTA must compute the same hints, or an item
// could have two owners or none; yet the CTAs read head 0 at different times, and its owner may
// have refitted it (n back to 0) before a late CTA reads it. So the refit marks what it resets
// (WindowHead.refitted, written with n as one word; the step clears it), and the hint is
// "n >= p or marked": true before that refit and after it alike. A stale mark (two refit
// launches without a step between) is the same for every CTA too, and costs balance only, as
// any wrong hint does: the owner of an item still checks the item's own count.
struct DueList {
  int items[kThreads];  // the due regions' indices in the pool: slot * H + head
  int count;
  int owned[kThreads];  // each thread's first owned head of its request
  int warp_hints[kThreads / 32];
  int hinted_before;  // hinted requests in the groups before
};

// Pass `pass` over the requests: groups of 256 (one per thread), one candidate head per thread
// per pass, so more than one pass per group only where H > G. Lists this CTA's due heads of the
// pass in `list` (barriers inside; every thread calls it alike) and returns their number, or -1
// after the last pass. Not inlined: its values stay out of the refit's registers, which are at
// their cap. With nothing due a pass costs one round trip: head 0's count and the fixed map's
// candidate's, side by side.
__device__ __noinline__ int ListDueHeads(int pass, int batch, const int32_t* slots,
                                         const uint8_t* pool, int num_slots, int heads,
                                         uint32_t region_bytes, uint32_t window, int p,
                                         DueList& list) {
  const int stride = static_cast<int>(gridDim.x);
  const int cta = static_cast<int>(blockIdx.x);
  const int rounds = (heads - 1) / stride + 1;
  if (pass >= ((batch - 1) / kThreads + 1) * rounds) return -1;
  // The first head number >= 0 congruent to the CTA modulo G, for heads numbered from `first`.
  auto first_owned = [&](int first) { return ((cta - first) % stride + stride) % stride; };
  // Heads this CTA owns: no other CTA writes them during the launch.
  auto record_count = [&](const uint8_t* request_regions, int h) {
    return *reinterpret_cast<const int32_t*>(request_regions +
                                             static_cast<size_t>(h) * region_bytes + window);
  };
  const int round = pass % rounds;
  const int b = pass / rounds * kThreads + static_cast<int>(threadIdx.x);
  const int slot = b < batch ? slots[b] : -1;
  const uint8_t* regions = slot >= 0 && slot < num_slots
                               ? pool + static_cast<size_t>(slot) * heads * region_bytes
                               : nullptr;
  if (pass == 0 && threadIdx.x == 0) list.hinted_before = 0;
  if (threadIdx.x == 0) list.count = 0;
  if (round == 0) {
    // b * heads <= batch * heads, which the launcher keeps within int.
    const int fixed = b < batch ? first_owned(b * heads) : heads;
    const WindowHead head0 =
        regions != nullptr ? LoadWindowHead(regions + window) : WindowHead{0, 0};
    const int n_fixed = regions != nullptr && fixed < heads ? record_count(regions, fixed) : 0;
    const bool hint = head0.n >= p || head0.refitted != 0;
    const int hinted = __syncthreads_count(hint);
    int owned = fixed;
    if (hinted > 0) {  // this request's rank among the hinted ones
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      const unsigned ballot = __ballot_sync(0xffffffffu, hint);
      if (lane == 0) list.warp_hints[warp] = __popc(ballot);
      __syncthreads();
      int rank = list.hinted_before + __popc(ballot & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) rank += list.warp_hints[w];
      if (hint) owned = first_owned(rank * heads);
      __syncthreads();  // every thread has read hinted_before
      if (threadIdx.x == 0) list.hinted_before += hinted;
    }
    list.owned[threadIdx.x] = owned;
    if (regions != nullptr && owned < heads) {
      const int n = owned == fixed ? n_fixed : owned == 0 ? head0.n : record_count(regions, owned);
      if (n == p) list.items[atomicAdd(&list.count, 1)] = slot * heads + owned;
    }
  } else {
    __syncthreads();  // count reset
    const int64_t h = static_cast<int64_t>(round) * stride + list.owned[threadIdx.x];
    if (regions != nullptr && h < heads && record_count(regions, static_cast<int>(h)) == p) {
      list.items[atomicAdd(&list.count, 1)] = slot * heads + static_cast<int>(h);
    }
  }
  __syncthreads();
  return list.count;
}

// Persistent: each CTA refits the due heads ListDueHeads gives it, one after another.
// kAnyWidth: the 6- and 4-bit pools' kernel (packed codes, r = 6 and 8); the 8-bit one carries
// none of their paths.
template <bool kAnyWidth>
__global__ void __launch_bounds__(kThreads, 2) RefitKernel(RegionArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  __shared__ DueList list;
  if (a.rv.r > 0) BuildOmegaFragments(sh, a.rv.r);  // barrier: the first pass's first
  if (threadIdx.x < kD) sh.col_max[threadIdx.x] = 0;
  for (int pass = 0, count;
       (count = ListDueHeads(pass, a.batch, a.slot, a.pool, a.rv.num_slots, a.rv.num_heads,
                             a.rv.region_bytes, a.rv.window, a.rv.p, list)) >= 0;
       ++pass) {
    for (int i = 0; i < count; ++i) {
      RefitRegion<kAnyWidth>(sh, a.pool + static_cast<size_t>(list.items[i]) * a.rv.region_bytes,
                             a.rv, a.kda);
      __syncthreads();  // the next head's staging overwrites what this one read last
    }
  }
}

}  // namespace

Status WindowRefit(const PoolLayout& layout, const int32_t* slot, int batch, uint8_t* pool,
                   cudaStream_t stream) {
  LEAPCACHE_RETURN_IF_ERROR(PrepareRegionLaunch(layout, pool, slot, batch, [] {
    return AllowSharedBytes(RefitSharedBytes(kMaxWindow, kMaxRank, kD), RefitKernel<false>,
                            RefitKernel<true>);
  }));
  if (batch == 0) return OkStatus();
  RegionArgs a{
      MakeRegionView(layout), batch, slot, pool, nullptr, 0, layout.spec().kind == StateKind::kKda};
  // One CTA per resident slot (two per SM), never more than there are heads.
  const int grid = std::min(batch * layout.num_heads(), 2 * SmCount());
  const size_t smem = RefitSharedBytes(layout.spec().p, layout.spec().r, layout.gate());
  auto* kernel = layout.spec().bits != 8 ? RefitKernel<true> : RefitKernel<false>;
  kernel<<<grid, kThreads, smem, stream>>>(a);
  LEAPCACHE_CUDA_RETURN_IF_LAUNCH_FAILED();
  return OkStatus();
}

}  // namespace leapcache::kernels
