#include "transport/transport.h"

#include "absl/strings/str_cat.h"

namespace leapcache::transport {

absl::string_view TransportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kInline:
      return "inline";
    case TransportKind::kUcx:
      return "ucx";
    case TransportKind::kNccl:
      return "nccl";
    case TransportKind::kCudaIpc:
      return "cuda_ipc";
  }
  return "unknown";
}

absl::string_view MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

absl::Status ValidateDescriptor(const BufferDescriptor& d, TransportKind expected,
                                const Capabilities& accepts) {
  if (d.transport != expected) {
    return absl::InvalidArgumentError(absl::StrCat("buffer.transport is ",
                                                   TransportName(d.transport),
                                                   ", the session's is ", TransportName(expected)));
  }
  if (d.memory == MemoryKind::kHost && !accepts.host) {
    return absl::InvalidArgumentError("buffer.memory host is not reachable by this transport");
  }
  if (d.memory == MemoryKind::kCuda && accepts.cuda != CudaAccess::kDirect) {
    return absl::InvalidArgumentError(
        "buffer.memory cuda is not directly reachable by this transport (stage it through "
        "registered host memory)");
  }
  if (d.memory != MemoryKind::kHost && d.memory != MemoryKind::kCuda) {
    return absl::InvalidArgumentError("buffer.memory is unknown");
  }
  if (d.bytes == 0) return absl::InvalidArgumentError("buffer.bytes is 0");
  if (d.address == 0) return absl::InvalidArgumentError("buffer.address is 0");
  if (d.address + d.bytes < d.address) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer.address ", d.address, " + bytes ", d.bytes, " wraps around"));
  }
  // NCCL addresses no remote memory (the engine posts its own receives and sends): no key.
  if (d.transport != TransportKind::kInline && d.transport != TransportKind::kNccl &&
      d.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer.remote_key is empty (", TransportName(d.transport), " needs one)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateTransfers(const BufferDescriptor& region, std::span<const TransferOp> ops,
                               bool takes_device_memory) {
  if (ops.empty()) return absl::InvalidArgumentError("the transfer list is empty");
  for (size_t i = 0; i < ops.size(); ++i) {
    const TransferOp& op = ops[i];
    if (op.local.empty() || op.local.data() == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("transfer ", i, " has an empty local span"));
    }
    if (op.direction != Direction::kWrite && op.direction != Direction::kRead) {
      return absl::InvalidArgumentError(absl::StrCat("transfer ", i, " has no direction"));
    }
    if (op.local_memory == MemoryKind::kCuda && !takes_device_memory) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer ", i, " has local device memory, which ", TransportName(region.transport),
          " connections do not take"));
    }
    if (op.local_memory != MemoryKind::kHost && op.local_memory != MemoryKind::kCuda) {
      return absl::InvalidArgumentError(absl::StrCat("transfer ", i, " has no local memory kind"));
    }
    if (op.remote_offset > region.bytes || op.local.size() > region.bytes - op.remote_offset) {
      return absl::OutOfRangeError(absl::StrCat("transfer ", i, " covers [", op.remote_offset,
                                                ", ", op.remote_offset + op.local.size(),
                                                ") of a ", region.bytes, "-byte region"));
    }
  }
  return absl::OkStatus();
}

}  // namespace leapcache::transport
