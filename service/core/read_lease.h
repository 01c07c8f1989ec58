// ReadLease: a read handle on the committed units (blob and side state, namespace_registry.h)
// of one checkpoint's head range.
//
// While a lease lives, the bytes it points at are neither evicted, spilled, promoted nor freed:
// Delete removes the checkpoint from the index at once but frees its memory only when the last
// lease drops. Leases are counted per checkpoint (any number may be held) and released by the
// destructor or Release(). Move-only.
//
// REQUIRES: a lease is released before its CheckpointStore is destroyed. A lease may be used and
// released from any thread, but one lease object is not for concurrent use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "service/core/residency_table.h"
#include "service/core/types.h"

namespace leapcache::core {

class ReadLease {
 public:
  ReadLease() = default;
  ~ReadLease() { Release(); }
  ReadLease(ReadLease&& other) noexcept;
  ReadLease& operator=(ReadLease&& other) noexcept;
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;

  bool valid() const { return table_ != nullptr; }
  NamespaceId ns() const { return key_.ns; }
  const BlockHash& hash() const { return key_.hash; }
  const Position& position() const { return position_; }
  HeadRange heads() const { return heads_; }
  int layers() const { return layers_; }
  size_t unit_bytes() const { return unit_bytes_; }
  size_t num_units() const { return units_.size(); }
  size_t total_bytes() const { return units_.size() * unit_bytes_; }

  // True if every unit is in host-addressable memory, so Unit() may be used.
  bool host_addressable() const;
  // The unit of (layer, head), in place. REQUIRES: valid(), host_addressable(),
  // 0 <= layer < layers(), heads().Contains(head).
  std::span<const uint8_t> Unit(int layer, int head) const;
  // Copies the unit of (layer, head) to dst. INVALID_ARGUMENT if (layer, head) is outside the
  // lease or dst.size() != unit_bytes(); FAILED_PRECONDITION if the lease is not valid.
  absl::Status CopyUnit(int layer, int head, std::span<uint8_t> dst) const;
  // Copies every unit in (layer, head) order. INVALID_ARGUMENT if dst.size() != total_bytes().
  absl::Status CopyAll(std::span<uint8_t> dst) const;
  // Copies units [first, first + n) in (layer, head) order; units that follow each other in
  // one page go in one copy (a fixed cost each in device memory). INVALID_ARGUMENT if the range
  // leaves the lease or dst.size() != n * unit_bytes().
  absl::Status CopyUnits(size_t first, size_t n, std::span<uint8_t> dst) const;

  // The CRC-32C of the unit of (layer, head), recorded when it was committed. REQUIRES: valid(),
  // (layer, head) inside the lease.
  uint32_t UnitCrc(int layer, int head) const;

  // The CUDA device holding every unit of the lease, or -1 if any is elsewhere (host memory,
  // another device) or the lease is not valid.
  int cuda_device() const;
  // The device address of the unit of (layer, head). REQUIRES: cuda_device() >= 0, (layer, head)
  // inside the lease.
  const uint8_t* DeviceUnit(int layer, int head) const;

  // Drops the lease now (idempotent).
  void Release();

 private:
  friend class CheckpointStore;
  ReadLease(ResidencyTable* table, uint64_t entry_id, CheckpointKey key, Position position,
            HeadRange heads, int layers, size_t unit_bytes, std::vector<UnitLocation> units);
  size_t IndexOf(int layer, int head) const;

  ResidencyTable* table_ = nullptr;  // null: no lease
  uint64_t entry_id_ = 0;
  CheckpointKey key_;
  Position position_;
  HeadRange heads_;
  int layers_ = 0;
  size_t unit_bytes_ = 0;
  std::vector<UnitLocation> units_;  // (layer, head) order
};

}  // namespace leapcache::core
