#include "load/state_pool.h"

#include <gtest/gtest.h>

#include "gpu/format/format.h"

namespace leapcache::load {
namespace {

client::ModelShape Shape() {
  client::ModelShape m;
  m.linear_layers = 2;
  m.total_heads = 3;
  m.dk = 32;
  m.dv = 32;
  return m;
}

std::unique_ptr<StatePool> Pool(const std::vector<LoadFormat>& formats) {
  StatePoolOptions o;
  o.distinct_states = 6;
  o.trajectory_tokens = 64;
  o.seed = 3;
  absl::StatusOr<std::unique_ptr<StatePool>> p = StatePool::Build(Shape(), formats, o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(p).value() : nullptr;
}

TEST(StatePool, CheckpointsAreValidBlobsOfTheFormat) {
  const std::vector<LoadFormat> formats = *ParseFormats("fp32,bf16,leap8,leap6,leap4");
  std::unique_ptr<StatePool> pool = Pool(formats);
  ASSERT_NE(pool, nullptr);
  std::vector<uint8_t> bytes;
  for (size_t f = 0; f < formats.size(); ++f) {
    const BlobSpec spec = ToBlobSpec(Shape(), formats[f].format);
    EXPECT_EQ(pool->blob_bytes(f), ComputeLayout(spec).blob_bytes()) << formats[f].label;
    EXPECT_EQ(pool->checkpoint_bytes(f), pool->blob_bytes(f) * 6);
    pool->CheckpointBlobs(f, 42, bytes);
    ASSERT_EQ(bytes.size(), pool->checkpoint_bytes(f));
    for (int k = 0; k < 6; ++k) {
      StatusOr<BlobSpec> parsed = ParseBlob(
          std::span<const uint8_t>(bytes).subspan(k * pool->blob_bytes(f), pool->blob_bytes(f)));
      ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
      EXPECT_EQ(parsed->codec, spec.codec);
    }
  }
  // Real states: fp32 is lossless, the window format loses more at fewer bits, and none is
  // far off (random noise would not compress this well at 8 bits).
  EXPECT_EQ(pool->mean_relative_error(0), 0.0);
  EXPECT_GT(pool->mean_relative_error(1), 0.0);
  EXPECT_LT(pool->mean_relative_error(2), pool->mean_relative_error(4));
  EXPECT_LT(pool->mean_relative_error(2), 0.05);
}

TEST(StatePool, BytesAreAFunctionOfTheSeedAndMatchesChecksThem) {
  const std::vector<LoadFormat> formats = *ParseFormats("leap8");
  std::unique_ptr<StatePool> pool = Pool(formats);
  ASSERT_NE(pool, nullptr);
  std::vector<uint8_t> a, b, c;
  pool->CheckpointBlobs(0, 1000, a);
  pool->CheckpointBlobs(0, 1000, b);
  pool->CheckpointBlobs(0, 1001, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(pool->Matches(0, 1000, a));
  EXPECT_FALSE(pool->Matches(0, 1001, a));
  a[a.size() / 2] ^= 1;
  EXPECT_FALSE(pool->Matches(0, 1000, a));
  a.pop_back();
  EXPECT_FALSE(pool->Matches(0, 1000, a));
}

TEST(StatePool, UnitsCarryAFiniteSideStateThatMatchesChecks) {
  const std::vector<LoadFormat> formats = *ParseFormats("leap8");
  client::ModelShape m = Shape();
  m.conv = client::ConvShape{3 * 16, 3, client::ConvDType::kBf16};  // 16 channels per head
  m.extra_bytes = 5;
  StatePoolOptions o;
  o.distinct_states = 6;
  o.trajectory_tokens = 64;
  absl::StatusOr<std::unique_ptr<StatePool>> pool = StatePool::Build(m, formats, o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const uint64_t conv_bytes = 16 * 3 * 2;
  ASSERT_EQ((*pool)->side_bytes(), conv_bytes + 5);
  const uint64_t unit = (*pool)->blob_bytes(0) + (*pool)->side_bytes();
  EXPECT_EQ((*pool)->checkpoint_bytes(0), unit * 6);
  std::vector<uint8_t> bytes;
  (*pool)->CheckpointBlobs(0, 7, bytes);
  for (int k = 0; k < 6; ++k) {
    EXPECT_TRUE(ParseBlob(std::span<const uint8_t>(bytes).subspan(k * unit,
                                                                   (*pool)->blob_bytes(0)))
                    .ok());
    for (uint64_t e = 0; e < conv_bytes; e += 2) {
      const uint16_t v = static_cast<uint16_t>(bytes[k * unit + (*pool)->blob_bytes(0) + e] |
                                               bytes[k * unit + (*pool)->blob_bytes(0) + e + 1]
                                                   << 8);
      EXPECT_NE(v & 0x7f80, 0x7f80) << "unit " << k << " element " << e / 2;
    }
  }
  EXPECT_TRUE((*pool)->Matches(0, 7, bytes));
  bytes[unit - 1] ^= 1;  // the first unit's last extra byte
  EXPECT_FALSE((*pool)->Matches(0, 7, bytes));
}

TEST(StatePool, RejectsBadShapesAndOptions) {
  const std::vector<LoadFormat> formats = *ParseFormats("leap8");
  client::ModelShape m = Shape();
  m.dk = 100;
  EXPECT_NE(StatePool::Build(m, formats, {}).status().message().find("dk"), std::string::npos);
  m = Shape();
  m.total_heads = 0;
  EXPECT_FALSE(StatePool::Build(m, formats, {}).ok());
  StatePoolOptions none;
  none.distinct_states = 0;
  EXPECT_FALSE(StatePool::Build(Shape(), formats, none).ok());
  EXPECT_FALSE(ParseFormats("leap8,int3").ok());
  EXPECT_FALSE(ParseFormats("leap8,leap8").ok());
  EXPECT_FALSE(ParseFormats("").ok());
}

}  // namespace
}  // namespace leapcache::load
