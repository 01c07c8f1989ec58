// ReadLease: a read handle on the committed blobs of one checkpoint's head range.
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
  size_t blob_bytes() const { return blob_bytes_; }
  size_t num_blobs() const { return blobs_.size(); }
  size_t total_bytes() const { return blobs_.size() * blob_bytes_; }

  // True if every blob is in host-addressable memory, so Blob() may be used.
  bool host_addressable() const;
  // The blob of (layer, head), in place. REQUIRES: valid(), host_addressable(),
  // 0 <= layer < layers(), heads().Contains(head).
  std::span<const uint8_t> Blob(int layer, int head) const;
  // Copies the blob of (layer, head) to dst. INVALID_ARGUMENT if (layer, head) is outside the
  // lease or dst.size() != blob_bytes(); FAILED_PRECONDITION if the lease is not valid.
  absl::Status CopyBlob(int layer, int head, std::span<uint8_t> dst) const;
  // Copies every blob in (layer, head) order. INVALID_ARGUMENT if dst.size() != total_bytes().
  absl::Status CopyAll(std::span<uint8_t> dst) const;
  // Copies blobs [first, first + n) in (layer, head) order; blobs that follow each other in
  // one page go in one copy (a fixed cost each in device memory). INVALID_ARGUMENT if the range
  // leaves the lease or dst.size() != n * blob_bytes().
  absl::Status CopyBlobs(size_t first, size_t n, std::span<uint8_t> dst) const;

  // The CRC-32C of the blob of (layer, head), recorded when it was committed. REQUIRES: valid(),
  // (layer, head) inside the lease.
  uint32_t BlobCrc(int layer, int head) const;

  // The CUDA device holding every blob of the lease, or -1 if any is elsewhere (host memory,
  // another device) or the lease is not valid.
  int cuda_device() const;
  // The device address of the blob of (layer, head). REQUIRES: cuda_device() >= 0, (layer, head)
  // inside the lease.
  const uint8_t* DeviceBlob(int layer, int head) const;

  // Drops the lease now (idempotent).
  void Release();

 private:
  friend class CheckpointStore;
  ReadLease(ResidencyTable* table, uint64_t entry_id, CheckpointKey key, Position position,
            HeadRange heads, int layers, size_t blob_bytes, std::vector<BlobLocation> blobs);
  size_t IndexOf(int layer, int head) const;

  ResidencyTable* table_ = nullptr;  // null: no lease
  uint64_t entry_id_ = 0;
  CheckpointKey key_;
  Position position_;
  HeadRange heads_;
  int layers_ = 0;
  size_t blob_bytes_ = 0;
  std::vector<BlobLocation> blobs_;  // (layer, head) order
};

}  // namespace leapcache::core
