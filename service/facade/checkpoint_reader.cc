#include "service/facade/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gpu/crc32c.h"

namespace leapcache::server {

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    core::CheckpointStore& store, const ReadRequest& request, StateDecoder* decoder) {
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
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(
      std::move(lease), shape, decoder != nullptr ? *decoder : CpuStateDecoder()));
}

CheckpointReader::CheckpointReader(core::ReadLease lease, ReadShape shape, StateDecoder& decoder)
    : lease_(std::move(lease)), shape_(shape), decoder_(decoder) {}

std::string CheckpointReader::Describe(size_t i) const {
  return absl::StrCat("stored blob of layer ", i / shape_.heads.size(), " head ",
                      shape_.heads.begin + i % shape_.heads.size());
}

absl::Status CheckpointReader::LoadNext() {
  const size_t items = lease_.num_blobs();
  const size_t first = next_item_;
  const bool in_place = lease_.host_addressable();
  if (!shape_.dense.has_value()) {
    if (in_place) {
      current_ = lease_.Blob(static_cast<int>(first / shape_.heads.size()),
                             shape_.heads.begin + static_cast<int>(first % shape_.heads.size()));
      next_item_ = first + 1;
    } else {
      // Memory that is not host-addressable: a batch of blobs, in as few copies as they allow.
      const size_t n = std::min(kCopyBatch, items - first);
      blobs_.resize(n * shape_.blob_bytes);
      LC_RETURN_IF_ERROR(lease_.CopyBlobs(first, n, blobs_));
      current_ = blobs_;
      next_item_ = first + n;
    }
    within_ = 0;
    return absl::OkStatus();
  }
  const size_t n = std::min(decoder_.BatchFor(shape_.format), items - first);
  // The decoder sees the batch's blobs together: in place, or copied out of memory that is not
  // host-addressable in as few copies as they allow.
  std::vector<std::span<const uint8_t>> blobs(n);
  if (!in_place) {
    blobs_.resize(n * shape_.blob_bytes);
    LC_RETURN_IF_ERROR(lease_.CopyBlobs(first, n, blobs_));
  }
  for (size_t k = 0; k < n; ++k) {
    const size_t i = first + k;
    blobs[k] =
        in_place
            ? lease_.Blob(static_cast<int>(i / shape_.heads.size()),
                          shape_.heads.begin + static_cast<int>(i % shape_.heads.size()))
            : std::span<const uint8_t>(blobs_).subspan(k * shape_.blob_bytes, shape_.blob_bytes);
  }
  states_.resize(n * shape_.state_bytes);
  LC_RETURN_IF_ERROR(decoder_.Decode(
      shape_.format, *shape_.dense, n, [&](size_t k) { return blobs[k]; },
      [&](size_t k) { return Describe(first + k); }, states_));
  next_item_ += n;
  current_ = states_;
  within_ = 0;
  return absl::OkStatus();
}

std::vector<const uint8_t*> CheckpointReader::TakeDeviceBlobs(int device) {
  if (shape_.dense.has_value() || offset_ != 0 || device < 0 || lease_.cuda_device() != device) {
    return {};
  }
  std::vector<const uint8_t*> blobs;
  blobs.reserve(lease_.num_blobs());
  // The fold's operator costs more to build than a thousand folds; a thread's gets mostly
  // repeat one blob size, so the last one is kept.
  thread_local size_t fold_bytes = 0;
  thread_local std::optional<Crc32cCombiner> last_fold;
  if (!last_fold.has_value() || fold_bytes != shape_.blob_bytes) {
    last_fold.emplace(shape_.blob_bytes);
    fold_bytes = shape_.blob_bytes;
  }
  const Crc32cCombiner& fold = *last_fold;
  for (size_t i = 0; i < lease_.num_blobs(); ++i) {
    const int layer = static_cast<int>(i / shape_.heads.size());
    const int head = shape_.heads.begin + static_cast<int>(i % shape_.heads.size());
    blobs.push_back(lease_.DeviceBlob(layer, head));
    crc_ = fold.Combine(crc_, lease_.BlobCrc(layer, head));
  }
  next_item_ = lease_.num_blobs();
  offset_ = shape_.total_bytes;
  return blobs;
}

absl::StatusOr<size_t> CheckpointReader::Read(std::span<uint8_t> out) {
  size_t n = 0;
  while (n < out.size() && !done()) {
    if (within_ == current_.size()) LC_RETURN_IF_ERROR(LoadNext());
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
