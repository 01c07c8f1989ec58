#include "service/facade/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "gpu/format/crc32c.h"

namespace leapcache::server {

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    core::CheckpointStore& store, const ReadRequest& request, compute::Compute* compute) {
  LC_ASSIGN_OR_RETURN(const core::NamespaceInfo ns, store.GetNamespace(request.ns));
  LC_ASSIGN_OR_RETURN(core::ReadLease lease, store.Get(request.ns, request.hash, request.heads));
  ReadShape shape;
  shape.position = lease.position();
  shape.heads = lease.heads();
  shape.layers = lease.layers();
  if (request.layers.has_value()) {
    const LayerRange l = *request.layers;
    if (l.begin < 0 || l.begin >= l.end || l.end > lease.layers()) {
      return absl::InvalidArgumentError(absl::StrCat("layers [", l.begin, ", ", l.end,
                                                     ") is not a range of the namespace's ",
                                                     lease.layers(), " layers"));
    }
    shape.first_layer = l.begin;
    shape.layers = l.end - l.begin;
  }
  shape.format = ns.spec.format;
  shape.blob_bytes = ns.blob_bytes;
  shape.side_bytes = ns.side_bytes;
  shape.dense = request.dense;
  shape.state_bytes = request.dense.has_value()
                          ? compute::DenseStateBytes(*request.dense, ns.spec.model.dk, ns.spec.model.dv)
                          : 0;
  shape.unit_bytes =
      (request.dense.has_value() ? shape.state_bytes : shape.blob_bytes) + shape.side_bytes;
  shape.total_bytes = static_cast<uint64_t>(shape.layers) * shape.heads.size() * shape.unit_bytes;
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(
      std::move(lease), shape, compute != nullptr ? *compute : compute::CpuCompute()));
}

CheckpointReader::CheckpointReader(core::ReadLease lease, ReadShape shape,
                                   compute::Compute& compute)
    : lease_(std::move(lease)), shape_(shape), compute_(compute) {}

std::string CheckpointReader::Describe(size_t i) const {
  return absl::StrCat("stored blob of layer ", LayerOf(i), " head ", HeadOf(i));
}

absl::Status CheckpointReader::LoadNext() {
  const size_t items = this->items();
  const size_t first = next_item_;
  const bool in_place = lease_.host_addressable();
  const size_t stored = lease_.unit_bytes();
  const auto unit_in_place = [&](size_t i) { return lease_.Unit(LayerOf(i), HeadOf(i)); };
  if (!shape_.dense.has_value()) {
    if (in_place) {
      current_ = unit_in_place(first);
      next_item_ = first + 1;
    } else {
      // Memory that is not host-addressable: a batch of units, in as few copies as they allow.
      const size_t n = std::min(kCopyBatch, items - first);
      units_.resize(n * stored);
      LC_RETURN_IF_ERROR(lease_.CopyUnits(LeaseUnit(first), n, units_));
      current_ = units_;
      next_item_ = first + n;
    }
    within_ = 0;
    return absl::OkStatus();
  }
  const size_t n = std::min(compute_.DecodeBatch(shape_.format), items - first);
  // The decoder sees the batch's units together: in place, or copied out of memory that is not
  // host-addressable in as few copies as they allow.
  std::vector<std::span<const uint8_t>> units(n);
  if (!in_place) {
    units_.resize(n * stored);
    LC_RETURN_IF_ERROR(lease_.CopyUnits(LeaseUnit(first), n, units_));
  }
  for (size_t k = 0; k < n; ++k) {
    units[k] = in_place ? unit_in_place(first + k)
                        : std::span<const uint8_t>(units_).subspan(k * stored, stored);
  }
  states_.resize(n * shape_.state_bytes);
  LC_RETURN_IF_ERROR(compute_.Decode(
      shape_.format, *shape_.dense, n, [&](size_t k) { return units[k].first(shape_.blob_bytes); },
      [&](size_t k) { return Describe(first + k); }, {states_, compute::Memory::kHost}));
  next_item_ += n;
  within_ = 0;
  if (shape_.side_bytes == 0) {
    current_ = states_;
    return absl::OkStatus();
  }
  // Each decoded state followed by its side state as stored.
  dense_units_.resize(n * shape_.unit_bytes);
  for (size_t k = 0; k < n; ++k) {
    uint8_t* unit = dense_units_.data() + k * shape_.unit_bytes;
    std::memcpy(unit, states_.data() + k * shape_.state_bytes, shape_.state_bytes);
    std::memcpy(unit + shape_.state_bytes, units[k].data() + shape_.blob_bytes, shape_.side_bytes);
  }
  current_ = dense_units_;
  return absl::OkStatus();
}

std::vector<const uint8_t*> CheckpointReader::TakeDeviceUnits(int device) {
  if (shape_.dense.has_value() || offset_ != 0 || device < 0 || lease_.cuda_device() != device) {
    return {};
  }
  std::vector<const uint8_t*> units;
  units.reserve(items());
  // The fold's operator costs more to build than a thousand folds; a thread's gets mostly
  // repeat one unit size, so the last one is kept.
  thread_local size_t fold_bytes = 0;
  thread_local std::optional<Crc32cCombiner> last_fold;
  if (!last_fold.has_value() || fold_bytes != shape_.unit_bytes) {
    last_fold.emplace(shape_.unit_bytes);
    fold_bytes = shape_.unit_bytes;
  }
  const Crc32cCombiner& fold = *last_fold;
  for (size_t i = 0; i < items(); ++i) {
    units.push_back(lease_.DeviceUnit(LayerOf(i), HeadOf(i)));
    crc_ = fold.Combine(crc_, lease_.UnitCrc(LayerOf(i), HeadOf(i)));
  }
  next_item_ = items();
  offset_ = shape_.total_bytes;
  return units;
}

std::vector<const uint8_t*> CheckpointReader::StoredDeviceUnits(int device) const {
  if (offset_ != 0 || device < 0 || lease_.cuda_device() != device) return {};
  std::vector<const uint8_t*> units;
  units.reserve(items());
  for (size_t i = 0; i < items(); ++i) units.push_back(lease_.DeviceUnit(LayerOf(i), HeadOf(i)));
  return units;
}

void CheckpointReader::ProducedElsewhere(uint32_t crc) {
  LC_CHECK(offset_ == 0, "CheckpointReader::ProducedElsewhere after a read");
  next_item_ = items();
  offset_ = shape_.total_bytes;
  crc_ = crc;
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
