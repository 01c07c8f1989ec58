// Device test of the packed codes' register helpers (gpu/kernels/code_packing.cuh) against the
// format's CPU packing (reference::PackCodes): every code of every width, at every position of a
// row, widened exactly and at the top of its byte, and packed back (label gpu).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gpu/kernels/code_packing.cuh"
#include "gpu/reference/packing.h"
#include "tests/gpu/device_buffer.h"

namespace leapcache::kernels {
namespace {

using testing::DeviceBuffer;

constexpr int kD = kKernelDim;

// Thread i widens packed row i (kD * bits / 8 bytes) three ways: exact, at the top of each byte,
// and in place by UnpackCodeRow; then packs the exact codes back with PackCodeRow.
__global__ void WidenRows(const uint8_t* packed, int bits, int rows, int8_t* exact, int8_t* high,
                          int8_t* unpacked, uint8_t* repacked) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  const int row_bytes = kD * bits / 8;
  const uint32_t* in = reinterpret_cast<const uint32_t*>(packed + i * row_bytes);
  uint4* ex = reinterpret_cast<uint4*>(exact + i * kD);
  uint4* hi = reinterpret_cast<uint4*>(high + i * kD);
  for (int c = 0; c < kD / 16; ++c) {  // 16 codes per call
    if (bits == 4) {
      ex[c] = WidenNibbles(in[2 * c], in[2 * c + 1]);
      hi[c] = WidenNibblesHigh(in[2 * c], in[2 * c + 1]);
    } else {
      ex[c] = WidenSixes(in[3 * c], in[3 * c + 1], in[3 * c + 2]);
      hi[c] = WidenSixesHigh(in[3 * c], in[3 * c + 1], in[3 * c + 2]);
    }
  }
  int8_t* row = unpacked + i * kD;
  for (int b = 0; b < row_bytes; ++b) row[b] = static_cast<int8_t>(packed[i * row_bytes + b]);
  UnpackCodeRow(row, bits);
  PackCodeRow(exact + i * kD, bits, repacked + i * row_bytes);
}

class CodePackingTest : public ::testing::TestWithParam<int> {};

TEST_P(CodePackingTest, WidensAndPacksLikeTheReference) {
  const int bits = GetParam();
  const int max_code = (1 << (bits - 1)) - 1, shift = 8 - bits;
  const int rows = 512, row_bytes = kD * bits / 8;
  // Every code in [-max, max] at every position: row i, position c holds code
  // (i + c) mod (2 max + 1) - max; the rest of the rows random.
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(-max_code, max_code);
  std::vector<int8_t> codes(static_cast<size_t>(rows) * kD);
  for (int i = 0; i < rows; ++i) {
    for (int c = 0; c < kD; ++c) {
      codes[i * kD + c] = static_cast<int8_t>(
          i < 2 * max_code + 1 ? (i + c) % (2 * max_code + 1) - max_code : pick(rng));
    }
  }
  std::vector<uint8_t> packed(static_cast<size_t>(rows) * row_bytes);
  for (int i = 0; i < rows; ++i) {
    reference::PackCodes(&codes[i * kD], kD, bits, &packed[i * row_bytes]);
  }

  DeviceBuffer<uint8_t> d_packed(packed);
  // Poisoned outputs: a value the widening never produces (-128 is no code; 0x55 no top-aligned
  // byte of either width, whose low bits are clear).
  DeviceBuffer<int8_t> d_exact(std::vector<int8_t>(codes.size(), -128));
  DeviceBuffer<int8_t> d_high(std::vector<int8_t>(codes.size(), 0x55));
  DeviceBuffer<int8_t> d_unpacked(std::vector<int8_t>(codes.size(), -128));
  DeviceBuffer<uint8_t> d_repacked(std::vector<uint8_t>(packed.size(), 0xa5));
  WidenRows<<<(rows + 127) / 128, 128>>>(d_packed.get(), bits, rows, d_exact.get(), d_high.get(),
                                         d_unpacked.get(), d_repacked.get());
  LEAPCACHE_CUDA_CHECK(cudaGetLastError());
  LEAPCACHE_CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<int8_t> exact = d_exact.Download(), high = d_high.Download();
  const std::vector<int8_t> unpacked = d_unpacked.Download();
  const std::vector<uint8_t> repacked = d_repacked.Download();
  int bad_exact = 0, bad_high = 0, bad_unpacked = 0;
  for (size_t e = 0; e < codes.size(); ++e) {
    bad_exact += exact[e] != codes[e];
    bad_high += high[e] != codes[e] * (1 << shift);
    bad_unpacked += unpacked[e] != codes[e];
  }
  EXPECT_EQ(bad_exact, 0) << bits << "-bit codes widened exactly";
  EXPECT_EQ(bad_high, 0) << bits << "-bit codes widened to the top of their bytes";
  EXPECT_EQ(bad_unpacked, 0) << bits << "-bit rows unpacked in place";
  EXPECT_TRUE(std::equal(repacked.begin(), repacked.end(), packed.begin()))
      << bits << "-bit rows packed back differ from the reference's packing";
}

INSTANTIATE_TEST_SUITE_P(Widths, CodePackingTest, ::testing::Values(6, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "bit";
                         });

}  // namespace
}  // namespace leapcache::kernels
