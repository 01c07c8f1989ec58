// CheckpointReader: the bytes of one Get, produced chunk by chunk under a read lease.
//
// Open() takes a read lease on the checkpoint's head range (so its bytes are neither evicted nor
// freed while the stream runs) and Read() fills the caller's buffer with the next bytes: the
// stored units as they are (compact: v1 blob and side state), or units of the blob decoded to a
// dense fp32/bf16 state in the requested layout and the side state as stored, a decoder's batch
// at a time (the compute backend's, service/compute/compute.h). Units come in (layer, head) order; chunks may split a unit. The lease is released when the reader is
// destroyed, whether or not it was read to the end.
// Not thread-safe (one stream, one reader).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/format/format.h"
#include "service/compute/compute.h"
#include "service/compute/dense_state.h"
#include "service/core/checkpoint_store.h"

namespace leapcache::server {

// Linear layers [begin, end) of a checkpoint.
struct LayerRange {
  int begin = 0;
  int end = 0;
};

struct ReadRequest {
  core::NamespaceId ns = 0;
  core::BlockHash hash{};
  core::HeadRange heads;
  std::optional<compute::DenseFormat> dense;  // nullopt: compact
  std::optional<LayerRange> layers{};         // nullopt: every layer
};

// What the reader's bytes are.
struct ReadShape {
  core::Position position;
  core::HeadRange heads;
  int first_layer = 0;  // the bytes hold layers [first_layer, first_layer + layers)
  int layers = 0;
  BlobSpec format;  // the namespace's (dk, dv, kind are the state's)
  uint64_t blob_bytes = 0;
  uint64_t state_bytes = 0;  // 0 for compact reads
  uint64_t side_bytes = 0;   // of every unit; 0 without a side state
  uint64_t unit_bytes = 0;   // per (layer, head): blob_bytes or state_bytes, plus side_bytes
  uint64_t total_bytes = 0;  // everything Read() will produce
  std::optional<compute::DenseFormat> dense;
};

class CheckpointReader {
 public:
  // NOT_FOUND for an unknown namespace or a checkpoint that does not hold every head;
  // INVALID_ARGUMENT for a layer range outside the namespace's layers. Dense reads decode with
  // `compute` (the CPU reference when null), which must outlive the reader.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(core::CheckpointStore& store,
                                                                const ReadRequest& request,
                                                                compute::Compute* compute = nullptr);
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const ReadShape& shape() const { return shape_; }
  // Fills `out` with the next bytes; returns how many (less than out.size() only at the end,
  // 0 once done). DATA_LOSS if a stored blob fails its checks while decoding.
  absl::StatusOr<size_t> Read(std::span<uint8_t> out);
  bool done() const { return offset_ == shape_.total_bytes; }
  uint64_t offset() const { return offset_; }
  // CRC-32C of the bytes read so far.
  uint32_t crc32c() const { return crc_; }

  // For a transport that copies device to device: when the read is compact, nothing has been
  // read yet and every unit sits in device memory of CUDA device `device` (the GPU tier), the
  // units' device addresses in (layer, head) order (shape().unit_bytes each), to be copied in
  // place by the caller under this reader's lease. The reader is then done, its crc32c() folded
  // from the CRCs recorded at commit (the bytes are not read on the host; a receiver's own check
  // still covers them). Otherwise empty, and the reader unchanged.
  std::vector<const uint8_t*> TakeDeviceUnits(int device);

  // For a dense read produced elsewhere than through Read() (decoded on the device straight into
  // the receiver's memory, Compute::DecodeInPlace): when nothing has been read yet and every
  // unit sits in device memory of CUDA device `device`, the stored units' device addresses in
  // (layer, head) order, valid under this reader's lease. Otherwise empty. The reader is
  // unchanged until ProducedElsewhere.
  std::vector<const uint8_t*> StoredDeviceUnits(int device) const;
  // Marks every byte produced, their CRC-32C `crc` (as computed where they were written).
  // REQUIRES: nothing read yet.
  void ProducedElsewhere(uint32_t crc);

 private:
  // Units per copy out of memory that is not host-addressable (device memory): about 1.2 MiB of
  // 8-bit 128 x 128 blobs.
  static constexpr size_t kCopyBatch = 64;

  CheckpointReader(core::ReadLease lease, ReadShape shape, compute::Compute& compute);
  // Makes the next items (one (layer, head) unit, or a decoder's batch of decoded units) the
  // current bytes.
  absl::Status LoadNext();
  std::string Describe(size_t i) const;
  // Item i of the read (its units in (layer, head) order): its layer and head in the lease, and
  // its index among the lease's units.
  int LayerOf(size_t i) const {
    return shape_.first_layer + static_cast<int>(i / shape_.heads.size());
  }
  int HeadOf(size_t i) const {
    return shape_.heads.begin + static_cast<int>(i % shape_.heads.size());
  }
  size_t items() const { return static_cast<size_t>(shape_.layers) * shape_.heads.size(); }
  size_t LeaseUnit(size_t i) const {
    return static_cast<size_t>(shape_.first_layer) * shape_.heads.size() + i;
  }

  core::ReadLease lease_;
  ReadShape shape_;
  compute::Compute& compute_;
  size_t next_item_ = 0;
  std::span<const uint8_t> current_;  // the current items' bytes
  size_t within_ = 0;                 // bytes of current_ already read
  std::vector<uint8_t> units_;        // units copied out of memory that is not host-addressable
  std::vector<uint8_t> states_;       // a batch of decoded states
  std::vector<uint8_t> dense_units_;  // those states with their side states, as units
  uint64_t offset_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace leapcache::server
