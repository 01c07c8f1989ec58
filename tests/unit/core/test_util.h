// Shared helpers of the cache core's tests: small namespaces, real v1 blobs made with the CPU
// reference encoder, side states, whole-checkpoint byte images, and a one-call put.
//
// Blobs are deterministic in (seed, layer, head) and distinct across them, so a test can
// recompute what any hit must return and compare it byte for byte. Shapes are small
// (dk = dv = 16 by default) to keep the tests fast, also under sanitizers.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/format/crc32c.h"
#include "gpu/format/format.h"
#include "gpu/reference/codec.h"
#include "service/core/checkpoint_store.h"
#include "service/core/host_tier.h"

namespace leapcache::core::testing {

inline BlobSpec SmallLeap(StateKind kind = StateKind::kGdn, int d = 16) {
  return BlobSpec::Leap(kind, 8, d, d);
}

inline NamespaceSpec SmallSpec(std::string tenant = "tenant-a", int layers = 2, int heads = 4,
                               BlobSpec format = SmallLeap()) {
  NamespaceSpec s;
  s.tenant = std::move(tenant);
  s.model.linear_layers = layers;
  s.model.total_heads = heads;
  s.model.dk = format.dk;
  s.model.dv = format.dv;
  s.model.kind = format.kind;
  s.format = format;
  return s;
}

// A distinct synthetic block hash per i (not a SHA-256 chain: the store treats hashes as opaque).
inline BlockHash HashOf(uint64_t i, uint8_t salt = 0) {
  BlockHash h{};
  for (int b = 0; b < 8; ++b) h[b] = static_cast<uint8_t>(i >> (8 * b));
  h[31] = salt;
  h[16] = 0xA5;  // never all zero
  return h;
}

// One sealed blob of `spec` encoding a Gaussian state drawn from `seed`.
inline std::vector<uint8_t> MakeBlob(const BlobSpec& spec, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> state(static_cast<size_t>(spec.dk) * spec.dv);
  for (float& x : state) x = normal(rng);
  StatusOr<std::vector<uint8_t>> blob = reference::Encode(spec, state.data(), Orientation::kKV);
  EXPECT_TRUE(blob.ok()) << blob.status().ToString();
  return blob.ok() ? std::move(blob).value() : std::vector<uint8_t>();
}

inline uint32_t BlobSeed(uint64_t seed, int layer, int head) {
  return static_cast<uint32_t>(seed * 1000003u + static_cast<uint64_t>(layer) * 1009u +
                               static_cast<uint64_t>(head) * 7u + 1u);
}

// A side state of `ns` (conv state, then extra bytes) drawn from `seed`: finite conv elements of
// the namespace's dtype, any extra bytes. Empty for a namespace without one.
inline std::vector<uint8_t> MakeSide(const NamespaceInfo& ns, uint32_t seed) {
  std::mt19937 rng(seed ^ 0x5eed5u);
  std::vector<uint8_t> side(ns.side_bytes);
  const size_t width = DTypeBytes(ns.spec.model.conv.dtype);
  for (size_t i = 0; i < ns.conv_bytes; i += width) {
    const float x = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    uint32_t bits = 0;
    std::memcpy(&bits, &x, 4);
    if (width == 2) {
      // bf16: the float's high half; fp16: any pattern whose exponent is not all ones.
      bits = ns.spec.model.conv.dtype == DType::kBf16 ? bits >> 16 : (rng() & 0xbfffu);
    }
    std::memcpy(side.data() + i, &bits, width);
  }
  for (size_t i = ns.conv_bytes; i < side.size(); ++i) side[i] = static_cast<uint8_t>(rng());
  return side;
}

// The units of `heads` (all layers) in (layer, head) order, concatenated: each blob followed by
// its side state, if the namespace has one.
inline std::vector<uint8_t> CheckpointBytes(const NamespaceInfo& ns, uint64_t seed,
                                            HeadRange heads) {
  std::vector<uint8_t> out;
  out.reserve(ns.Units(heads) * ns.unit_bytes);
  for (int layer = 0; layer < ns.spec.model.linear_layers; ++layer) {
    for (int h = heads.begin; h < heads.end; ++h) {
      std::vector<uint8_t> b = MakeBlob(ns.spec.format, BlobSeed(seed, layer, h));
      out.insert(out.end(), b.begin(), b.end());
      std::vector<uint8_t> side = MakeSide(ns, BlobSeed(seed, layer, h));
      out.insert(out.end(), side.begin(), side.end());
    }
  }
  return out;
}

inline uint32_t Crc(std::span<const uint8_t> bytes) { return Crc32c(bytes.data(), bytes.size()); }

inline Position PositionAt(int64_t blocks, int64_t block_tokens = 16) {
  return Position{blocks * block_tokens, blocks};
}

// Reserve, Upload in one chunk, Commit with the right checksum.
inline absl::Status PutBytes(CheckpointStore& store, NamespaceId ns, const BlockHash& hash,
                             Position position, HeadRange heads, std::span<const uint8_t> bytes) {
  PutRequest req;
  req.ns = ns;
  req.hash = hash;
  req.position = position;
  req.heads = heads;
  absl::StatusOr<Reservation> r = store.Reserve(req);
  if (!r.ok()) return r.status();
  if (absl::Status st = store.Upload(r->id, 0, bytes); !st.ok()) return st;
  return store.Commit(r->id, Crc(bytes));
}

// Puts the canonical bytes of (seed, heads).
inline absl::Status PutSeeded(CheckpointStore& store, const NamespaceInfo& ns,
                              const BlockHash& hash, Position position, HeadRange heads,
                              uint64_t seed) {
  std::vector<uint8_t> bytes = CheckpointBytes(ns, seed, heads);
  return PutBytes(store, ns.id, hash, position, heads, bytes);
}

// All units of a lease, (layer, head) order.
inline std::vector<uint8_t> LeaseBytes(const ReadLease& lease) {
  std::vector<uint8_t> out(lease.total_bytes());
  EXPECT_TRUE(lease.CopyAll(out).ok());
  return out;
}

struct TierSpec {
  std::string name;
  size_t budget_bytes;
  size_t page_bytes = 4096;
};

inline std::unique_ptr<CheckpointStore> MakeStore(std::vector<TierSpec> tiers,
                                                  StoreOptions options = {},
                                                  const Clock* clock = nullptr) {
  std::vector<std::unique_ptr<MemoryTier>> built;
  for (const TierSpec& t : tiers) {
    absl::StatusOr<std::unique_ptr<HostTier>> tier =
        HostTier::Create(t.name, t.budget_bytes, t.page_bytes);
    EXPECT_TRUE(tier.ok()) << tier.status();
    built.push_back(std::move(tier).value());
  }
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Create(options, std::move(built), clock);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

// Options for deterministic tests: no background reaper thread.
inline StoreOptions QuietOptions() {
  StoreOptions o;
  o.reaper_interval = absl::ZeroDuration();
  return o;
}

// Tenants x and y whose namespaces make_x(x) and make_y(y) want the same id (their tags agree in
// the low 32 bits), found by a birthday search over "x-0", "y-0", "x-1", ...: about 2^17 tags.
inline std::pair<std::string, std::string> TenantsWithCollidingIds(
    const std::function<NamespaceSpec(const std::string&)>& make_x,
    const std::function<NamespaceSpec(const std::string&)>& make_y) {
  absl::flat_hash_map<uint32_t, std::string> xs, ys;
  for (int i = 0;; ++i) {
    std::string x = "x-" + std::to_string(i), y = "y-" + std::to_string(i);
    const auto x_id = static_cast<uint32_t>(NamespaceTag(make_x(x)));
    if (auto it = ys.find(x_id); it != ys.end()) return {x, it->second};
    xs.try_emplace(x_id, x);
    const auto y_id = static_cast<uint32_t>(NamespaceTag(make_y(y)));
    if (auto it = xs.find(y_id); it != xs.end()) return {it->second, y};
    ys.try_emplace(y_id, y);
  }
}

}  // namespace leapcache::core::testing
