#include "service/server/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/crc32c.h"
#include "service/core/status_util.h"

namespace leapcache::server {

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    core::CheckpointStore& store, const ReadRequest& request) {
  LC_ASSIGN_OR_RETURN(const core::NamespaceInfo ns, store.GetNamespace(request.ns));
  LC_ASSIGN_OR_RETURN(core::ReadLease lease, store.Get(request.ns, request.hash, request.heads));
  ReadShape shape;
  shape.position = lease.position();
  shape.heads = lease.heads();
  shape.layers = lease.layers();
  shape.format = ns.spec.format;
  shape.blob_bytes = lease.blob_bytes();
  shape.dense = request.dense;
  const uint64_t item_bytes =
      request.dense.has_value()
          ? DenseStateBytes(*request.dense, ns.spec.model.dk, ns.spec.model.dv)
          : lease.blob_bytes();
  shape.state_bytes = request.dense.has_value() ? item_bytes : 0;
  shape.total_bytes = lease.num_blobs() * item_bytes;
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(std::move(lease), shape));
}

CheckpointReader::CheckpointReader(core::ReadLease lease, ReadShape shape)
    : lease_(std::move(lease)), shape_(shape) {}

absl::Status CheckpointReader::Load(size_t i) {
  const int layer = static_cast<int>(i / shape_.heads.size());
  const int head = shape_.heads.begin + static_cast<int>(i % shape_.heads.size());
  std::span<const uint8_t> blob;
  if (lease_.host_addressable()) {
    blob = lease_.Blob(layer, head);
  } else {
    blob_.resize(shape_.blob_bytes);
    LC_RETURN_IF_ERROR(lease_.CopyBlob(layer, head, blob_));
    blob = blob_;
  }
  if (shape_.dense.has_value()) {
    state_.resize(shape_.state_bytes);
    if (absl::Status st = DecodeDenseState(blob, *shape_.dense, state_, &scratch_); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("stored blob of layer ", layer, " head ", head,
                                                  ": ", st.message()));
    }
    current_ = state_;
  } else {
    current_ = blob;
  }
  within_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<size_t> CheckpointReader::Read(std::span<uint8_t> out) {
  size_t n = 0;
  while (n < out.size() && !done()) {
    if (within_ == current_.size()) {
      LC_RETURN_IF_ERROR(Load(next_item_++));
    }
    const size_t take = std::min(out.size() - n, current_.size() - within_);
    std::memcpy(out.data() + n, current_.data() + within_, take);
    within_ += take;
    n += take;
    offset_ += take;
  }
  crc_ = Crc32cExtend(crc_, out.data(), n);
  return n;
}

}  // namespace leapcache::server
