// Byte layout of a pool of live window-format states: num_slots x num_heads regions, one per
// (slot, head), region index slot * num_heads + head. Serving engines address live states the
// same way (a slot per request, heads inside), and the decode kernels read one region per CTA.
//
// One region (offsets from its start; every section 16-byte aligned, the region 128-byte):
//   payload   the boundary blob's payload, byte-identical to a v1 blob without its header
//             (FORMAT.md section 3), so a checkpoint leaves the pool with one copy
//   window    i32 n (records in the open window, 0..p), i32 refitted (1 from a boundary refit
//             kernel until the next step, 0 otherwise: how the refit's CTAs agree on which
//             requests fell due; no state), 2 x i32 reserved, f32 G[gate]
//   rec_k     f16 [p][dk]   record keys, scaled (FORMAT.md section 5)
//   rec_u     f16 [p][dv]   record updates, scaled
//   rec_w     f32 [p]       record scales w_j
//   rec_g     f32 [p][gate] cumulative log-gates G_j
// gate = 1 (GDN) or dk (KDA). Records are struct-of-arrays so a kernel reads all keys of a
// window as one contiguous run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/format.h"
#include "gpu/reference/window.h"
#include "gpu/status.h"

namespace leapcache {

struct PoolLayout {
  BlobSpec spec;  // boundary codec; spec.p is the window length
  int num_slots = 0;
  int num_heads = 0;
  int gate = 1;
  PayloadLayout payload;
  size_t window_offset = 0;
  size_t rec_k_offset = 0, rec_u_offset = 0, rec_w_offset = 0, rec_g_offset = 0;
  size_t region_bytes = 0;

  size_t pool_bytes() const {
    return region_bytes * static_cast<size_t>(num_slots) * static_cast<size_t>(num_heads);
  }
  size_t region_offset(int slot, int head) const {
    return region_bytes * (static_cast<size_t>(slot) * num_heads + head);
  }
};

// The only way to make a layout: the kernels' launchers recompute it from spec, num_slots and
// num_heads and refuse one whose fields differ.
StatusOr<PoolLayout> MakePoolLayout(const BlobSpec& spec, int num_slots, int num_heads);

// Host-side conversion between a region's bytes and the reference window's stored form.
// REQUIRES: region points at layout.region_bytes bytes.
Status WriteRegion(const PoolLayout& layout, const reference::WindowSnapshot& snapshot,
                   uint8_t* region);
// Rebuilds the snapshot (a sealed blob from the payload) of a region; DATA_LOSS when the region
// holds an impossible record count.
StatusOr<reference::WindowSnapshot> ReadRegion(const PoolLayout& layout, const uint8_t* region);

}  // namespace leapcache
