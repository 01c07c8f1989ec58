#include "service/core/read_lease.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/check.h"

namespace leapcache::core {

ReadLease::ReadLease(ResidencyTable* table, uint64_t entry_id, CheckpointKey key, Position position,
                     HeadRange heads, int layers, size_t unit_bytes,
                     std::vector<UnitLocation> units)
    : table_(table),
      entry_id_(entry_id),
      key_(key),
      position_(position),
      heads_(heads),
      layers_(layers),
      unit_bytes_(unit_bytes),
      units_(std::move(units)) {}

ReadLease::ReadLease(ReadLease&& other) noexcept { *this = std::move(other); }

ReadLease& ReadLease::operator=(ReadLease&& other) noexcept {
  if (this != &other) {
    Release();
    table_ = std::exchange(other.table_, nullptr);
    entry_id_ = std::exchange(other.entry_id_, 0);
    key_ = other.key_;
    position_ = other.position_;
    heads_ = other.heads_;
    layers_ = other.layers_;
    unit_bytes_ = other.unit_bytes_;
    units_ = std::move(other.units_);
    other.units_.clear();
  }
  return *this;
}

void ReadLease::Release() {
  if (table_ == nullptr) return;
  units_.clear();  // the locations are meaningless once the bytes may move
  std::exchange(table_, nullptr)->ReleaseLease(entry_id_);
}

bool ReadLease::host_addressable() const {
  return valid() && std::all_of(units_.begin(), units_.end(),
                                [](const UnitLocation& b) { return b.host != nullptr; });
}

uint32_t ReadLease::UnitCrc(int layer, int head) const {
  LC_CHECK(valid() && layer >= 0 && layer < layers_ && heads_.Contains(head),
           "ReadLease::UnitCrc outside the lease");
  return units_[IndexOf(layer, head)].crc32c;
}

int ReadLease::cuda_device() const {
  if (!valid() || units_.empty()) return -1;
  const int device = units_.front().tier->cuda_device();
  for (const UnitLocation& b : units_) {
    if (b.tier->cuda_device() != device || b.tier->DeviceAddress(b.page) == nullptr) return -1;
  }
  return device;
}

const uint8_t* ReadLease::DeviceUnit(int layer, int head) const {
  LC_CHECK(valid() && layer >= 0 && layer < layers_ && heads_.Contains(head),
           "ReadLease::DeviceUnit outside the lease");
  const UnitLocation& b = units_[IndexOf(layer, head)];
  const uint8_t* page = b.tier->DeviceAddress(b.page);
  LC_CHECK(page != nullptr, "ReadLease::DeviceUnit on memory that is not on a device");
  return page + b.offset;
}

size_t ReadLease::IndexOf(int layer, int head) const {
  return static_cast<size_t>(layer) * heads_.size() + (head - heads_.begin);
}

std::span<const uint8_t> ReadLease::Unit(int layer, int head) const {
  LC_CHECK(valid() && layer >= 0 && layer < layers_ && heads_.Contains(head),
           "ReadLease::Unit outside the lease");
  const UnitLocation& b = units_[IndexOf(layer, head)];
  LC_CHECK(b.host != nullptr, "ReadLease::Unit on memory that is not host-addressable");
  return {b.host, unit_bytes_};
}

absl::Status ReadLease::CopyUnit(int layer, int head, std::span<uint8_t> dst) const {
  if (!valid()) return absl::FailedPreconditionError("lease is released");
  if (layer < 0 || layer >= layers_ || !heads_.Contains(head)) {
    return absl::InvalidArgumentError(
        absl::StrCat("(layer ", layer, ", head ", head, ") is outside the lease"));
  }
  if (dst.size() != unit_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("destination is ", dst.size(), " bytes, a unit is ", unit_bytes_));
  }
  const UnitLocation& b = units_[IndexOf(layer, head)];
  return b.tier->CopyOut(b.page, b.offset, dst);
}

absl::Status ReadLease::CopyAll(std::span<uint8_t> dst) const {
  if (!valid()) return absl::FailedPreconditionError("lease is released");
  if (dst.size() != total_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("destination is ", dst.size(), " bytes, the lease holds ", total_bytes()));
  }
  return CopyUnits(0, units_.size(), dst);
}

absl::Status ReadLease::CopyUnits(size_t first, size_t n, std::span<uint8_t> dst) const {
  if (!valid()) return absl::FailedPreconditionError("lease is released");
  if (first > units_.size() || n > units_.size() - first) {
    return absl::InvalidArgumentError(absl::StrCat("units [", first, ", ", first + n,
                                                   ") leave the lease's ", units_.size()));
  }
  if (dst.size() != n * unit_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("destination is ", dst.size(), " bytes, ", n,
                                                   " units are ", n * unit_bytes_));
  }
  for (size_t i = 0; i < n;) {
    const UnitLocation& b = units_[first + i];
    size_t run = 1;
    while (i + run < n) {
      const UnitLocation& next = units_[first + i + run];
      if (next.tier != b.tier || next.page != b.page ||
          next.offset != b.offset + run * unit_bytes_) {
        break;
      }
      ++run;
    }
    LC_RETURN_IF_ERROR(
        b.tier->CopyOut(b.page, b.offset, dst.subspan(i * unit_bytes_, run * unit_bytes_)));
    i += run;
  }
  return absl::OkStatus();
}

}  // namespace leapcache::core
