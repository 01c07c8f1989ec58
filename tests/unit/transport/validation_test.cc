// Descriptor and transfer-list validation (transport.h): every malformed descriptor or op is
// refused with the documented code before anything moves.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace leapcache::transport {
namespace {

BufferDescriptor UcxHostRegion(uint64_t bytes) {
  return BufferDescriptor{TransportKind::kUcx, MemoryKind::kHost, 0x10000, bytes, "rkey"};
}

constexpr Capabilities kHostOnly{true, CudaAccess::kNone};
constexpr Capabilities kStaged{true, CudaAccess::kStaged};
constexpr Capabilities kDirect{true, CudaAccess::kDirect};

TEST(ValidateDescriptor, AcceptsAWellFormedHostRegion) {
  EXPECT_TRUE(ValidateDescriptor(UcxHostRegion(4096), TransportKind::kUcx, kHostOnly).ok());
}

TEST(ValidateDescriptor, RefusesAnotherTransportsDescriptor) {
  const absl::Status st =
      ValidateDescriptor(UcxHostRegion(4096), TransportKind::kCudaIpc, kDirect);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("buffer.transport"), std::string::npos) << st;
}

TEST(ValidateDescriptor, RefusesCudaMemoryUnlessReachableDirectly) {
  BufferDescriptor d = UcxHostRegion(4096);
  d.memory = MemoryKind::kCuda;
  EXPECT_EQ(ValidateDescriptor(d, TransportKind::kUcx, kHostOnly).code(),
            absl::StatusCode::kInvalidArgument);
  // Staged access means the engine registers a host buffer; a cuda descriptor is still wrong.
  EXPECT_EQ(ValidateDescriptor(d, TransportKind::kUcx, kStaged).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateDescriptor(d, TransportKind::kUcx, kDirect).ok());
}

TEST(ValidateDescriptor, RefusesEmptyNullWrappingOrKeylessRegions) {
  BufferDescriptor empty = UcxHostRegion(0);
  EXPECT_EQ(ValidateDescriptor(empty, TransportKind::kUcx, kHostOnly).code(),
            absl::StatusCode::kInvalidArgument);
  BufferDescriptor null = UcxHostRegion(16);
  null.address = 0;
  EXPECT_EQ(ValidateDescriptor(null, TransportKind::kUcx, kHostOnly).code(),
            absl::StatusCode::kInvalidArgument);
  BufferDescriptor wraps = UcxHostRegion(UINT64_MAX);
  EXPECT_EQ(ValidateDescriptor(wraps, TransportKind::kUcx, kHostOnly).code(),
            absl::StatusCode::kInvalidArgument);
  BufferDescriptor keyless = UcxHostRegion(16);
  keyless.key.clear();
  const absl::Status st = ValidateDescriptor(keyless, TransportKind::kUcx, kHostOnly);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("remote_key"), std::string::npos) << st;
}

TEST(ValidateDescriptor, NcclRegionsNeedNoKey) {
  // NCCL addresses no remote memory (the engine posts its own receives and sends), so its
  // descriptors carry none; every other check still applies.
  BufferDescriptor d{TransportKind::kNccl, MemoryKind::kCuda, 0x10000, 4096, ""};
  EXPECT_TRUE(ValidateDescriptor(d, TransportKind::kNccl, {false, CudaAccess::kDirect}).ok());
  d.memory = MemoryKind::kHost;
  EXPECT_EQ(ValidateDescriptor(d, TransportKind::kNccl, {false, CudaAccess::kDirect}).code(),
            absl::StatusCode::kInvalidArgument);
  d.memory = MemoryKind::kCuda;
  d.bytes = 0;
  EXPECT_EQ(ValidateDescriptor(d, TransportKind::kNccl, {false, CudaAccess::kDirect}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValidateTransfers, AcceptsOpsInsideTheRegion) {
  std::vector<uint8_t> local(64);
  const TransferOp ops[] = {{Direction::kWrite, local, 0}, {Direction::kRead, local, 64}};
  EXPECT_TRUE(ValidateTransfers(UcxHostRegion(128), ops).ok());
}

TEST(ValidateTransfers, RefusesAnEmptyListOrAnEmptySpan) {
  EXPECT_EQ(ValidateTransfers(UcxHostRegion(128), {}).code(), absl::StatusCode::kInvalidArgument);
  const TransferOp ops[] = {{Direction::kWrite, {}, 0}};
  EXPECT_EQ(ValidateTransfers(UcxHostRegion(128), ops).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValidateTransfers, RefusesOpsLeavingTheRegionAndNamesThem) {
  std::vector<uint8_t> local(64);
  const TransferOp ops[] = {{Direction::kWrite, local, 0}, {Direction::kRead, local, 65}};
  const absl::Status st = ValidateTransfers(UcxHostRegion(128), ops);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("transfer 1"), std::string::npos) << st;
  // An offset so large that offset + size wraps is refused, not wrapped into range.
  const TransferOp wrap[] = {{Direction::kRead, local, UINT64_MAX - 8}};
  EXPECT_EQ(ValidateTransfers(UcxHostRegion(128), wrap).code(), absl::StatusCode::kOutOfRange);
}

TEST(ValidateTransfers, LocalDeviceMemoryOnlyWhereTheConnectionTakesIt) {
  std::vector<uint8_t> local(64);
  const TransferOp ops[] = {{Direction::kWrite, local, 0},
                            {Direction::kWrite, local, 64, MemoryKind::kCuda}};
  const absl::Status st = ValidateTransfers(UcxHostRegion(128), ops);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("transfer 1 has local device memory"), std::string::npos) << st;
  EXPECT_TRUE(ValidateTransfers(UcxHostRegion(128), ops, /*takes_device_memory=*/true).ok());
  const TransferOp unknown[] = {{Direction::kWrite, local, 0, static_cast<MemoryKind>(9)}};
  EXPECT_EQ(ValidateTransfers(UcxHostRegion(128), unknown, true).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TransportNames, NameEveryKind) {
  EXPECT_EQ(TransportName(TransportKind::kInline), "inline");
  EXPECT_EQ(TransportName(TransportKind::kUcx), "ucx");
  EXPECT_EQ(TransportName(TransportKind::kNccl), "nccl");
  EXPECT_EQ(TransportName(TransportKind::kCudaIpc), "cuda_ipc");
  EXPECT_EQ(MemoryKindName(MemoryKind::kCuda), "cuda");
}

}  // namespace
}  // namespace leapcache::transport
