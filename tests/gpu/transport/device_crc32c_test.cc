// CRC-32C of device memory on the device (how an engine checks a checkpoint that landed in its
// GPU memory) against the host's Crc32c of the same bytes: lengths around the 16-byte loads and
// the kernel's chunks, warps and blocks, fresh random lengths, unaligned starts, a
// checkpoint-sized buffer; host memory is refused.
#include "transport/device/device_crc32c.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "gpu/format/crc32c.h"

namespace leapcache::transport {
namespace {

TEST(DeviceCrc32cTest, EqualsTheHostCrcAtAnyLengthAndAlignment) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::mt19937 rng(23);
  std::vector<uint8_t> host((20 << 20) + 64);
  for (uint8_t& b : host) b = static_cast<uint8_t>(rng());
  uint8_t* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), host.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  // Lengths around the 16-byte loads, the 256-byte chunks, a warp's 8 KiB and a block's 64 KiB,
  // and fresh random ones.
  std::vector<size_t> lengths = {1,       15,      16,    17,    255,          256,
                                 257,     4095,    4096,  4097,  3 * 4096 + 5, 8191,
                                 8192,    8193,    65535, 65536, 65537,        3 * 65536 + 17,
                                 1 << 20, 19988480};
  std::random_device fresh;
  const uint32_t seed = fresh();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 pick(seed);
  for (int i = 0; i < 6; ++i) lengths.push_back(1 + pick() % (20 << 20));
  for (size_t offset : {size_t{0}, size_t{1}, size_t{4}, size_t{7}, size_t{16}, size_t{33}}) {
    for (size_t n : lengths) {
      absl::StatusOr<uint32_t> crc = DeviceCrc32c(device + offset, n);
      ASSERT_TRUE(crc.ok()) << crc.status();
      EXPECT_EQ(*crc, Crc32c(host.data() + offset, n)) << "offset " << offset << " length " << n;
    }
  }
  EXPECT_EQ(*DeviceCrc32c(device, 0), 0u);
  // One flipped bit anywhere changes it.
  ASSERT_EQ(cudaMemset(device + 123457, host[123457] ^ 0x10, 1), cudaSuccess);
  EXPECT_NE(*DeviceCrc32c(device, 1 << 20), Crc32c(host.data(), 1 << 20));
  cudaFree(device);
  EXPECT_EQ(DeviceCrc32c(host.data(), 64).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leapcache::transport
