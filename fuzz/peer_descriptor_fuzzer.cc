// Fuzz target: the checks every data-plane backend relies on before it touches memory a peer
// named: ValidateDescriptor on an engine's buffer descriptor, ValidateTransfers on the list a
// transfer is cut into, and the CUDA IPC key's parse and range check (cuda_ipc_key.h), whose
// answer bounds the copies the service runs in its own device context.
//
// Input: [transport][memory][accepts: bit 0 cuda direct, bit 1 in-band, bit 2 device ops]
// [address u64][bytes u64][allocation u64][key length u8][key][then ops, 12 bytes each:
// direction u8, local memory u8, local size u16, remote offset u64], integers little-endian.
//
// Invariants: no crash, no sanitizer report; what a check accepts is what it promises, computed
// here in 128-bit arithmetic: an accepted descriptor is non-empty, does not wrap, has a key
// where its transport needs one and reaches device memory only where allowed; an accepted
// transfer list lies inside its region; an accepted CUDA IPC key is exactly 72 bytes, and an
// accepted range lies inside the allocation. Refusals carry a message.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "transport/cuda_ipc/cuda_ipc_key.h"
#include "transport/transport.h"

namespace {

namespace transport = leapcache::transport;

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T Get() {
    T v = 0;
    for (size_t i = 0; i < sizeof(T) && at_ < size_; ++i) {
      v |= static_cast<T>(static_cast<T>(data_[at_++]) << (8 * i));
    }
    return v;
  }
  std::string Bytes(size_t n) {
    n = std::min(n, size_ - at_);
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }
  bool done() const { return at_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

using u128 = unsigned __int128;

void CheckMessage(const absl::Status& st, const char* what) {
  FUZZ_CHECK(st.ok() || !st.message().empty(), "%s refused without a message", what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  transport::BufferDescriptor d;
  d.transport = static_cast<transport::TransportKind>(in.Get<uint8_t>());
  d.memory = static_cast<transport::MemoryKind>(in.Get<uint8_t>());
  const uint8_t accepts_bits = in.Get<uint8_t>();
  const transport::Capabilities accepts{
      (accepts_bits & 2) != 0,
      (accepts_bits & 1) ? transport::CudaAccess::kDirect : transport::CudaAccess::kNone};
  const bool device_ops = (accepts_bits & 4) != 0;
  d.address = in.Get<uint64_t>();
  d.bytes = in.Get<uint64_t>();
  const uint64_t allocation = in.Get<uint64_t>();
  d.key = in.Bytes(in.Get<uint8_t>());

  const absl::Status described = transport::ValidateDescriptor(d, d.transport, accepts);
  CheckMessage(described, "ValidateDescriptor");
  if (described.ok()) {
    FUZZ_CHECK(d.bytes > 0 && d.address != 0, "an empty or null buffer was accepted");
    FUZZ_CHECK(static_cast<u128>(d.address) + d.bytes <= static_cast<u128>(UINT64_MAX) + 1,
               "a wrapping buffer was accepted");
    FUZZ_CHECK(d.memory == transport::MemoryKind::kHost || d.memory == transport::MemoryKind::kCuda,
               "an unknown memory kind was accepted");
    FUZZ_CHECK(d.memory != transport::MemoryKind::kCuda ||
                   accepts.cuda == transport::CudaAccess::kDirect,
               "device memory was accepted by a transport that cannot reach it");
    FUZZ_CHECK(d.transport == transport::TransportKind::kInline ||
                   d.transport == transport::TransportKind::kNccl || !d.key.empty(),
               "a buffer without its key was accepted");
  }

  // The transfer list, its local spans cut from one scratch buffer (never written here).
  struct Op {
    uint8_t direction, memory;
    uint16_t size;
    uint64_t offset;
  };
  std::vector<Op> raw;
  size_t local_bytes = 0;
  while (!in.done() && raw.size() < 64) {
    Op op{in.Get<uint8_t>(), in.Get<uint8_t>(), in.Get<uint16_t>(), in.Get<uint64_t>()};
    raw.push_back(op);
    local_bytes += op.size;
  }
  std::vector<uint8_t> scratch(std::max<size_t>(local_bytes, 1));
  std::vector<transport::TransferOp> ops;
  size_t at = 0;
  for (const Op& op : raw) {
    transport::TransferOp t;
    t.direction = static_cast<transport::Direction>(op.direction % 3);
    t.local_memory = static_cast<transport::MemoryKind>(op.memory % 4);
    t.local = std::span<uint8_t>(scratch.data() + at, op.size);
    t.remote_offset = op.offset;
    at += op.size;
    ops.push_back(t);
  }
  const absl::Status listed = transport::ValidateTransfers(d, ops, device_ops);
  CheckMessage(listed, "ValidateTransfers");
  if (listed.ok()) {
    FUZZ_CHECK(!ops.empty(), "an empty transfer list was accepted");
    for (const transport::TransferOp& op : ops) {
      FUZZ_CHECK(!op.local.empty(), "an empty transfer was accepted");
      FUZZ_CHECK(static_cast<u128>(op.remote_offset) + op.local.size() <= d.bytes,
                 "a transfer of [%llu, +%zu) was accepted in a %llu-byte region",
                 static_cast<unsigned long long>(op.remote_offset), op.local.size(),
                 static_cast<unsigned long long>(d.bytes));
      FUZZ_CHECK(op.local_memory != transport::MemoryKind::kCuda || device_ops,
                 "local device memory was accepted by a connection that does not take it");
    }
  } else {
    FUZZ_CHECK(listed.code() == absl::StatusCode::kInvalidArgument ||
                   listed.code() == absl::StatusCode::kOutOfRange,
               "ValidateTransfers answered code %d", static_cast<int>(listed.code()));
  }

  // The CUDA IPC key and its range, as the service's Import checks them.
  absl::StatusOr<transport::CudaIpcKey> key = transport::ParseCudaIpcKey(d.key);
  CheckMessage(key.status(), "ParseCudaIpcKey");
  FUZZ_CHECK(key.ok() == (d.key.size() == transport::kCudaIpcKeyBytes),
             "a %zu-byte CUDA IPC key was %s", d.key.size(), key.ok() ? "accepted" : "refused");
  if (key.ok()) {
    FUZZ_CHECK(transport::SerializeCudaIpcKey(*key) == d.key, "the key does not round-trip");
    const absl::Status inside = transport::CheckCudaIpcRange(key->offset, d.bytes, allocation);
    CheckMessage(inside, "CheckCudaIpcRange");
    FUZZ_CHECK(inside.ok() == (d.bytes > 0 && static_cast<u128>(key->offset) + d.bytes <=
                                                  static_cast<u128>(allocation)),
               "range [%llu, +%llu) in %llu bytes was %s",
               static_cast<unsigned long long>(key->offset),
               static_cast<unsigned long long>(d.bytes),
               static_cast<unsigned long long>(allocation), inside.ok() ? "accepted" : "refused");
  }
  return 0;
}
