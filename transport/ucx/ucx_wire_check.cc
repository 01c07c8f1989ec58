#include "transport/ucx/ucx_wire_check.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace leapcache::transport {
namespace {

// UCX 1.13, src/ucp/wireup/address.c: the worker address's header and field flags.
constexpr uint8_t kVersionV1 = 0;
constexpr uint8_t kVersionV2 = 1;
constexpr uint8_t kHeaderFlagDebugInfo = 0x01;  // the worker's name follows the uuid
constexpr uint8_t kHeaderFlagWorkerUuid = 0x02;
constexpr uint8_t kHeaderFlagClientId = 0x04;
constexpr uint8_t kHeaderFlagsKnown = 0x0f;     // the fourth is "AM lanes only"
constexpr uint8_t kNullResource = 0xff;         // an empty address list
constexpr uint8_t kFlagLast = 0x80;             // last device / last interface of a device
constexpr uint8_t kMdFlagEmptyDevice = 0x80;    // a device without transport addresses
constexpr uint8_t kDeviceFlagNumPaths = 0x40;
constexpr uint8_t kDeviceFlagSysDevice = 0x20;
constexpr uint8_t kDeviceLengthMask = 0x1f;
constexpr uint8_t kIfaceFlagHasEpAddress = 0x40;
constexpr uint8_t kIfaceLengthMask = 0x3f;
constexpr uint8_t kSysDeviceUnknown = 0xff;
constexpr unsigned kSysDeviceLimit = 64;        // UCX keeps system devices in 64-bit maps
// Packed interface attributes: v1 three floats and a word, v2 four bytes, two half-words.
constexpr size_t kIfaceAttrBytesV1 = 16;
constexpr size_t kIfaceAttrBytesV2 = 8;
// UCX 1.13, src/ucp/core/ucp_rkey.c and src/ucs/memory/memory_type.h.
constexpr uint8_t kMemoryTypeCount = 5;         // host, cuda, cuda-managed, rocm, rocm-managed
constexpr size_t kRkeyDistanceBytes = 3;        // sys_dev, latency, bandwidth

// A forward-only cursor: every read is checked against the end.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}
  bool Byte(uint8_t& out) {
    if (pos_ >= bytes_.size()) return false;
    out = static_cast<uint8_t>(bytes_[pos_++]);
    return true;
  }
  bool Skip(size_t n) {
    if (n > bytes_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  bool Peek(uint8_t& out) const {
    if (pos_ >= bytes_.size()) return false;
    out = static_cast<uint8_t>(bytes_[pos_]);
    return true;
  }
  // The next n bytes (n <= left()), not consumed.
  const char* here() const { return bytes_.data() + pos_; }
  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

absl::Status Bad(absl::string_view what, const Cursor& c) {
  return absl::InvalidArgumentError(
      absl::StrCat("the UCX worker address is malformed at byte ", c.pos(), ": ", what));
}

// A field whose low bits hold a value and, in v2, the all-ones value means "the next byte holds
// it" (ucp_address_unpack_byte_extended).
bool ExtendedValue(Cursor& c, uint8_t first, uint8_t mask, bool v2, unsigned& value) {
  value = first & mask;
  if (v2 && value == mask) {
    uint8_t next;
    if (!c.Byte(next)) return false;
    value = next;
  }
  return true;
}

// An interface's packed performance figures feed UCX's lane scores, which UCX asserts are not
// negative: v1's floats must be finite, and overhead and latency not negative (a negative
// bandwidth is how UCX <= 1.11 peers send theirs); v2's 8-bit floats must not be NaN (exponent
// nibble 0xf).
bool IfaceAttributesUsable(const char* p, bool v2) {
  if (v2) {
    for (int i = 0; i < 3; ++i) {  // overhead, bandwidth, latency
      if ((static_cast<uint8_t>(p[i]) & 0x0f) == 0x0f) return false;
    }
    return true;
  }
  float overhead, bandwidth, latency;
  std::memcpy(&overhead, p, 4);
  std::memcpy(&bandwidth, p + 4, 4);
  std::memcpy(&latency, p + 8, 4);
  return std::isfinite(overhead) && overhead >= 0 && std::isfinite(bandwidth) &&
         std::isfinite(latency) && latency >= 0;
}

}  // namespace

absl::Status CheckUcxWorkerAddress(std::string_view address) {
  if (address.empty()) return absl::InvalidArgumentError("the UCX worker address is empty");
  if (address.size() > kUcxMaxWorkerAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the UCX worker address is ", address.size(),
                                                   " bytes, over the limit of ",
                                                   kUcxMaxWorkerAddressBytes));
  }
  Cursor c(address);
  uint8_t header = 0;
  c.Byte(header);
  const uint8_t version = header & 0x0f;
  uint8_t flags = 0;
  if (version == kVersionV1) {
    flags = header >> 4;
  } else if (header == kVersionV2) {
    if (!c.Byte(flags)) return Bad("the v2 header's flags byte is missing", c);
    if ((flags & ~kHeaderFlagsKnown) != 0) return Bad("unknown header flags", c);
  } else {
    return Bad(absl::StrCat("unknown address version byte 0x", absl::Hex(header)), c);
  }
  const bool v2 = version != kVersionV1;
  // v1 always carries the uuid in a worker address; v2 says so in its flags.
  if ((!v2 || (flags & kHeaderFlagWorkerUuid)) && !c.Skip(8)) return Bad("short worker uuid", c);
  if ((flags & kHeaderFlagClientId) && !c.Skip(8)) return Bad("short client id", c);
  if (flags & kHeaderFlagDebugInfo) {
    uint8_t name_bytes;
    if (!c.Byte(name_bytes) || !c.Skip(name_bytes)) return Bad("short worker name", c);
  }
  uint8_t first;
  if (!c.Peek(first)) return Bad("the device list is missing", c);
  if (first == kNullResource) {
    c.Skip(1);
    if (c.left() != 0) return Bad("bytes after an empty address list", c);
    return absl::OkStatus();
  }

  const uint8_t md_mask = v2 ? 0x7f : 0x1f;
  size_t addresses = 0;
  size_t devices = 0;
  bool last_device = false;
  while (!last_device) {
    if (++devices > kUcxMaxAddresses) return Bad("more devices than UCX supports", c);
    uint8_t md_byte;
    unsigned md_index;
    if (!c.Byte(md_byte) || !ExtendedValue(c, md_byte, md_mask, v2, md_index)) {
      return Bad("short device md index", c);
    }
    if (md_index > kUcxMaxMdIndex) return Bad(absl::StrCat("md index ", md_index, " >= 64"), c);
    uint8_t device_byte;
    unsigned device_address_bytes;
    if (!c.Byte(device_byte) ||
        !ExtendedValue(c, device_byte, kDeviceLengthMask, v2, device_address_bytes)) {
      return Bad("short device address length", c);
    }
    last_device = device_byte & kFlagLast;
    if (device_byte & kDeviceFlagNumPaths) {
      uint8_t paths;
      if (!c.Byte(paths)) return Bad("short device path count", c);
      if (paths == 0) return Bad("a device with 0 paths", c);
    }
    if (device_byte & kDeviceFlagSysDevice) {
      uint8_t sys_device;
      if (!c.Byte(sys_device)) return Bad("short system device", c);
      if (sys_device != kSysDeviceUnknown && sys_device >= kSysDeviceLimit) {
        return Bad(absl::StrCat("system device ", sys_device, " >= 64"), c);
      }
    }
    if (!c.Skip(device_address_bytes)) return Bad("short device address", c);

    bool last_iface = md_byte & kMdFlagEmptyDevice;
    while (!last_iface) {
      if (++addresses > kUcxMaxAddresses) return Bad("more addresses than UCX supports", c);
      // The transport name's checksum, then the interface's attributes.
      const size_t attr_bytes = v2 ? kIfaceAttrBytesV2 : kIfaceAttrBytesV1;
      if (!c.Skip(2) || c.left() < attr_bytes) return Bad("short interface attributes", c);
      if (!IfaceAttributesUsable(c.here(), v2)) return Bad("non-finite interface figures", c);
      c.Skip(attr_bytes);
      uint8_t iface_byte;
      unsigned iface_address_bytes;
      if (!c.Byte(iface_byte) ||
          !ExtendedValue(c, iface_byte, kIfaceLengthMask, v2, iface_address_bytes)) {
        return Bad("short interface address length", c);
      }
      last_iface = iface_byte & kFlagLast;
      if (iface_byte & kIfaceFlagHasEpAddress) {
        return Bad("an endpoint address inside a worker address", c);
      }
      if (!c.Skip(iface_address_bytes)) return Bad("short interface address", c);
    }
  }
  if (c.left() != 0) return Bad(absl::StrCat(c.left(), " bytes after the last device"), c);
  return absl::OkStatus();
}

absl::Status CheckUcxRemoteKey(std::string_view key) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("buffer.remote_key is not a UCX key: ", what));
  };
  if (key.size() > kUcxMaxRemoteKeyBytes) {
    return bad(absl::StrCat(key.size(), " bytes, over the limit of ", kUcxMaxRemoteKeyBytes));
  }
  Cursor c(key);
  uint64_t md_map = 0;
  for (int i = 0; i < 8; ++i) {
    uint8_t b;
    if (!c.Byte(b)) return bad("short md map");
    md_map |= uint64_t{b} << (8 * i);  // UCX packs it in host order; x86-64 and arm64 are little
  }
  if (md_map == 0) return bad("an empty md map");
  uint8_t memory_type;
  if (!c.Byte(memory_type)) return bad("no memory type");
  if (memory_type >= kMemoryTypeCount) return bad(absl::StrCat("memory type ", memory_type));
  for (int i = std::popcount(md_map); i > 0; --i) {
    uint8_t bytes;
    if (!c.Byte(bytes) || !c.Skip(bytes)) return bad("a per-md key runs past the end");
  }
  if (c.left() == 0) return absl::OkStatus();
  // The memory's system device, then (sys_dev, latency, bandwidth) per device it is near.
  uint8_t sys_device;
  c.Byte(sys_device);
  if ((c.left() % kRkeyDistanceBytes) != 0) return bad("a partial distance entry");
  while (c.left() != 0) {
    uint8_t device;
    c.Byte(device);
    if (device >= kSysDeviceLimit) return bad(absl::StrCat("distance to system device ", device));
    c.Skip(kRkeyDistanceBytes - 1);
  }
  return absl::OkStatus();
}

std::vector<uint8_t> PaddedCopy(std::string_view blob) {
  std::vector<uint8_t> out(blob.size() + kUcxBlobPadding, 0);
  std::copy(blob.begin(), blob.end(), out.begin());
  return out;
}

}  // namespace leapcache::transport
