#include "gpu/format/pool_layout.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/format/half.h"

namespace leapcache {

namespace {

size_t AlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

StatusOr<PoolLayout> MakePoolLayout(const BlobSpec& spec, int num_slots, int num_heads) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateSpec(spec));
  if (num_slots < 1) return InvalidArgumentError("num_slots must be >= 1");
  if (num_heads < 1) return InvalidArgumentError("num_heads must be >= 1");
  // The kernels index a region by slot * num_heads + head in an int.
  if (static_cast<int64_t>(num_slots) * num_heads > INT32_MAX) {
    return InvalidArgumentError("num_slots * num_heads must be < 2^31");
  }
  PoolLayout l;
  l.spec_ = spec;
  l.num_slots_ = num_slots;
  l.num_heads_ = num_heads;
  l.gate_ = spec.kind == StateKind::kGdn ? 1 : spec.dk;
  l.payload_ = ComputeLayout(spec);
  size_t off = AlignUp(l.payload_.payload_bytes, 16);
  l.window_offset_ = off;
  off = AlignUp(off + 16 + 4 * static_cast<size_t>(l.gate_), 16);
  l.rec_k_offset_ = off;
  off = AlignUp(off + 2 * static_cast<size_t>(spec.p) * spec.dk, 16);
  l.rec_u_offset_ = off;
  off = AlignUp(off + 2 * static_cast<size_t>(spec.p) * spec.dv, 16);
  l.rec_w_offset_ = off;
  off = AlignUp(off + 4 * static_cast<size_t>(spec.p), 16);
  l.rec_g_offset_ = off;
  off += 4 * static_cast<size_t>(spec.p) * l.gate_;
  l.region_bytes_ = AlignUp(off, 128);
  if (static_cast<double>(l.region_bytes_) * num_slots * num_heads > 1e15) {
    return InvalidArgumentError("pool size overflows");
  }
  return l;
}

Status WriteRegion(const PoolLayout& l, const reference::WindowSnapshot& s, uint8_t* region) {
  LEAPCACHE_ASSIGN_OR_RETURN(const BlobSpec spec, ParseBlob(s.blob));
  if (spec.codec != l.spec().codec || spec.bits != l.spec().bits || spec.r != l.spec().r ||
      spec.dk != l.spec().dk || spec.dv != l.spec().dv || spec.kind != l.spec().kind ||
      spec.smoothing != l.spec().smoothing) {
    return InvalidArgumentError("snapshot blob " + spec.ToString() + " does not fit pool " +
                                l.spec().ToString());
  }
  const int n = static_cast<int>(s.k.size());
  if (n > l.spec().p || s.G.size() != static_cast<size_t>(l.gate())) {
    return InvalidArgumentError("snapshot window does not fit the pool");
  }
  std::memset(region, 0, l.region_bytes());
  std::memcpy(region, s.blob.data() + kHeaderBytes, l.payload().payload_bytes);
  const int32_t n32 = n;
  std::memcpy(region + l.window_offset(), &n32, 4);
  std::memcpy(region + l.window_offset() + 16, s.G.data(), 4 * l.gate());
  for (int j = 0; j < n; ++j) {
    for (int a = 0; a < l.spec().dk; ++a) {
      StoreU16(region + l.rec_k_offset() + 2 * (static_cast<size_t>(j) * l.spec().dk + a),
               FloatToHalf(s.k[j][a]));
    }
    for (int c = 0; c < l.spec().dv; ++c) {
      StoreU16(region + l.rec_u_offset() + 2 * (static_cast<size_t>(j) * l.spec().dv + c),
               FloatToHalf(s.u[j][c]));
    }
    std::memcpy(region + l.rec_w_offset() + 4 * j, &s.scale[j], 4);
    std::memcpy(region + l.rec_g_offset() + 4 * static_cast<size_t>(j) * l.gate(), s.gcum[j].data(),
                4 * l.gate());
  }
  return OkStatus();
}

StatusOr<reference::WindowSnapshot> ReadRegion(const PoolLayout& l, const uint8_t* region) {
  reference::WindowSnapshot s;
  s.blob.resize(l.payload().blob_bytes());
  std::memcpy(s.blob.data() + kHeaderBytes, region, l.payload().payload_bytes);
  SealBlob(l.spec(), s.blob);
  int32_t n = 0;
  std::memcpy(&n, region + l.window_offset(), 4);
  if (n < 0 || n > l.spec().p) {
    return DataLossError("region holds " + std::to_string(n) + " records, p is " +
                         std::to_string(l.spec().p));
  }
  s.G.resize(l.gate());
  std::memcpy(s.G.data(), region + l.window_offset() + 16, 4 * l.gate());
  for (int j = 0; j < n; ++j) {
    std::vector<float> k(l.spec().dk), u(l.spec().dv), g(l.gate());
    for (int a = 0; a < l.spec().dk; ++a) {
      k[a] = HalfToFloat(
          LoadU16(region + l.rec_k_offset() + 2 * (static_cast<size_t>(j) * l.spec().dk + a)));
    }
    for (int c = 0; c < l.spec().dv; ++c) {
      u[c] = HalfToFloat(
          LoadU16(region + l.rec_u_offset() + 2 * (static_cast<size_t>(j) * l.spec().dv + c)));
    }
    float w = 0.0f;
    std::memcpy(&w, region + l.rec_w_offset() + 4 * j, 4);
    std::memcpy(g.data(), region + l.rec_g_offset() + 4 * static_cast<size_t>(j) * l.gate(),
                4 * l.gate());
    s.k.push_back(std::move(k));
    s.u.push_back(std::move(u));
    s.scale.push_back(w);
    s.gcum.push_back(std::move(g));
  }
  return s;
}

}  // namespace leapcache
