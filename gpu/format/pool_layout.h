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

#include "gpu/format/format.h"
#include "gpu/format/status.h"
#include "gpu/reference/window.h"

namespace leapcache {

// Read-only, and made only by MakePoolLayout: every offset is the one its spec, slots and heads
// give, so the kernels address regions by them without checking them again. A default-constructed
// layout is empty (no slots, no spec), for holders that make theirs later; launchers refuse it.
class PoolLayout {
 public:
  PoolLayout() = default;

  const BlobSpec& spec() const { return spec_; }  // boundary codec; spec().p is the window length
  int num_slots() const { return num_slots_; }
  int num_heads() const { return num_heads_; }
  int gate() const { return gate_; }  // log-gate width: 1 (GDN) or dk (KDA)
  const PayloadLayout& payload() const { return payload_; }
  size_t window_offset() const { return window_offset_; }
  size_t rec_k_offset() const { return rec_k_offset_; }
  size_t rec_u_offset() const { return rec_u_offset_; }
  size_t rec_w_offset() const { return rec_w_offset_; }
  size_t rec_g_offset() const { return rec_g_offset_; }
  size_t region_bytes() const { return region_bytes_; }
  bool empty() const { return num_slots_ == 0; }

  size_t pool_bytes() const {
    return region_bytes_ * static_cast<size_t>(num_slots_) * static_cast<size_t>(num_heads_);
  }
  size_t region_offset(int slot, int head) const {
    return region_bytes_ * (static_cast<size_t>(slot) * num_heads_ + head);
  }

 private:
  friend StatusOr<PoolLayout> MakePoolLayout(const BlobSpec& spec, int num_slots, int num_heads);

  BlobSpec spec_;
  int num_slots_ = 0;
  int num_heads_ = 0;
  int gate_ = 1;
  PayloadLayout payload_;
  size_t window_offset_ = 0;
  size_t rec_k_offset_ = 0, rec_u_offset_ = 0, rec_w_offset_ = 0, rec_g_offset_ = 0;
  size_t region_bytes_ = 0;
};

// The only way to make a non-empty layout. Refuses pools of 2^31 regions or more (the kernels
// index a region as slot * num_heads + head in an int).
StatusOr<PoolLayout> MakePoolLayout(const BlobSpec& spec, int num_slots, int num_heads);

// Host-side conversion between a region's bytes and the reference window's stored form.
// REQUIRES: region points at layout.region_bytes() bytes.
Status WriteRegion(const PoolLayout& layout, const reference::WindowSnapshot& snapshot,
                   uint8_t* region);
// Rebuilds the snapshot (a sealed blob from the payload) of a region; DATA_LOSS when the region
// holds an impossible record count.
StatusOr<reference::WindowSnapshot> ReadRegion(const PoolLayout& layout, const uint8_t* region);

}  // namespace leapcache
