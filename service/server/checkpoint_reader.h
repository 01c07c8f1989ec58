// CheckpointReader: the bytes of one Get, produced chunk by chunk under a read lease.
//
// Open() takes a read lease on the checkpoint's head range (so its bytes are neither evicted nor
// freed while the stream runs) and Read() fills the caller's buffer with the next bytes: the
// stored v1 blobs as they are (compact), or each blob decoded to dense fp32/bf16 states in the
// requested layout. Bytes come in (layer, head) order; chunks may split a blob or a state. The
// lease is released when the reader is destroyed, whether or not it was read to the end.
// Not thread-safe (one stream, one reader).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/format.h"
#include "service/core/checkpoint_store.h"
#include "service/server/dense_state.h"

namespace leapcache::server {

struct ReadRequest {
  core::NamespaceId ns = 0;
  core::BlockHash hash{};
  core::HeadRange heads;
  std::optional<DenseFormat> dense;  // nullopt: compact
};

// What the reader's bytes are.
struct ReadShape {
  core::Position position;
  core::HeadRange heads;
  int layers = 0;
  BlobSpec format;  // the namespace's (dk, dv, kind are the state's)
  uint64_t blob_bytes = 0;
  uint64_t state_bytes = 0;  // 0 for compact reads
  uint64_t total_bytes = 0;  // everything Read() will produce
  std::optional<DenseFormat> dense;
};

class CheckpointReader {
 public:
  // NOT_FOUND for an unknown namespace or a checkpoint that does not hold every head.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(core::CheckpointStore& store,
                                                                const ReadRequest& request);
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

 private:
  CheckpointReader(core::ReadLease lease, ReadShape shape);
  // Makes item `i` (a (layer, head) blob or its decoded state) the current one.
  absl::Status Load(size_t i);

  core::ReadLease lease_;
  ReadShape shape_;
  size_t next_item_ = 0;
  std::span<const uint8_t> current_;  // the current item's bytes
  size_t within_ = 0;                 // bytes of current_ already read
  std::vector<uint8_t> blob_;         // a blob copied out of memory that is not host-addressable
  std::vector<uint8_t> state_;        // a decoded state
  std::vector<float> scratch_;
  uint64_t offset_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace leapcache::server
