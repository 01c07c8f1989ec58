// The CUDA IPC key an engine sends (cuda_ipc_key.h): its exact size, its little-endian offset,
// and the range check that keeps the service's copies inside the allocation the handle maps.
#include "transport/cuda_ipc/cuda_ipc_key.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace leapcache::transport {
namespace {

TEST(CudaIpcKeyTest, RoundTripsWithTheOffsetLittleEndian) {
  CudaIpcKey key;
  for (size_t i = 0; i < key.handle.size(); ++i) key.handle[i] = static_cast<uint8_t>(i * 7 + 1);
  key.offset = 0x0102030405060708ull;
  const std::string wire = SerializeCudaIpcKey(key);
  ASSERT_EQ(wire.size(), kCudaIpcKeyBytes);
  EXPECT_EQ(static_cast<uint8_t>(wire[kCudaIpcHandleBytes]), 0x08);
  EXPECT_EQ(static_cast<uint8_t>(wire[kCudaIpcKeyBytes - 1]), 0x01);
  absl::StatusOr<CudaIpcKey> back = ParseCudaIpcKey(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->handle, key.handle);
  EXPECT_EQ(back->offset, key.offset);
}

TEST(CudaIpcKeyTest, AnyOtherSizeIsRefusedNamingTheField) {
  for (size_t n : {size_t{0}, size_t{1}, kCudaIpcHandleBytes, kCudaIpcKeyBytes - 1,
                   kCudaIpcKeyBytes + 1, size_t{4096}}) {
    absl::StatusOr<CudaIpcKey> key = ParseCudaIpcKey(std::string(n, '\x01'));
    EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_NE(key.status().message().find("buffer.remote_key"), std::string::npos);
  }
}

TEST(CudaIpcKeyTest, RangesStayInsideTheAllocation) {
  constexpr uint64_t kAlloc = 1 << 20;
  EXPECT_TRUE(CheckCudaIpcRange(0, kAlloc, kAlloc).ok());
  EXPECT_TRUE(CheckCudaIpcRange(kAlloc - 1, 1, kAlloc).ok());
  EXPECT_TRUE(CheckCudaIpcRange(4096, 65536, kAlloc).ok());
  const struct {
    uint64_t offset, bytes;
  } bad[] = {{0, 0},           {0, kAlloc + 1},      {kAlloc, 1},          {kAlloc - 4096, 65536},
             {kAlloc + 1, 0},  {UINT64_MAX, 1},      {UINT64_MAX - 10, 4096},
             {1, UINT64_MAX},  {64ull << 30, 4096}};
  for (const auto& r : bad) {
    const absl::Status st = CheckCudaIpcRange(r.offset, r.bytes, kAlloc);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << r.offset << " +" << r.bytes;
  }
  // Before mapping, with no size known, only the arithmetic is checked: wraps are refused.
  EXPECT_TRUE(CheckCudaIpcRange(64ull << 30, 4096, UINT64_MAX).ok());
  EXPECT_FALSE(CheckCudaIpcRange(UINT64_MAX - 10, 4096, UINT64_MAX).ok());
}

}  // namespace
}  // namespace leapcache::transport
