// Checkpoints with side states (conv state and extra bytes per (layer, head)) through the real
// server: compact and dense puts and gets carry them byte for byte in every unit, tensor-parallel
// halves put their own heads' side states, a non-finite conv element is refused over the wire
// and changes nothing, and a namespace without a side state is unchanged by the feature.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

using client::DenseEncoding;
using client::DType;
using client::Layout;

class SideStateTest : public ServiceTest {};

// 2 layers x 4 heads of 32 x 32; GDN's conv over 2 x 4 x 32 + 4 x 32 = 384 channels, kernel 4.
client::NamespaceSpec ConvNamespace(const std::string& tenant, int extra = 5) {
  client::NamespaceSpec spec = SmallNamespace(tenant, 2, 4, 32);
  spec.model.conv = client::ConvShape{384, 3, client::ConvDType::kBf16};
  spec.model.extra_bytes = extra;
  return spec;
}

constexpr size_t kConvBytes = 384 / 4 * 3 * 2;  // per head

// One side state per unit: finite bf16 conv elements, then any extra bytes.
std::vector<uint8_t> MakeSides(size_t units, size_t side_bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(units * side_bytes);
  for (size_t u = 0; u < units; ++u) {
    uint8_t* side = out.data() + u * side_bytes;
    for (size_t i = 0; i < kConvBytes; i += 2) {
      const float x = std::normal_distribution<float>(0.0f, 3.0f)(rng);
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      const uint16_t bf16 = static_cast<uint16_t>(bits >> 16);
      std::memcpy(side + i, &bf16, 2);
    }
    for (size_t i = kConvBytes; i < side_bytes; ++i) side[i] = static_cast<uint8_t>(rng());
  }
  return out;
}

// Units of `state_bytes` states (back to back in `states`) and their side states.
std::vector<uint8_t> Join(std::span<const uint8_t> states, size_t state_bytes,
                          std::span<const uint8_t> sides, size_t side_bytes) {
  const size_t units = states.size() / state_bytes;
  std::vector<uint8_t> out;
  out.reserve(units * (state_bytes + side_bytes));
  for (size_t u = 0; u < units; ++u) {
    out.insert(out.end(), states.begin() + u * state_bytes, states.begin() + (u + 1) * state_bytes);
    out.insert(out.end(), sides.begin() + u * side_bytes, sides.begin() + (u + 1) * side_bytes);
  }
  return out;
}

client::PutTarget Target(uint32_t ns, const client::BlockHash& hash,
                         client::HeadRange heads = {}) {
  return client::PutTarget{ns, hash, {32, 2}, heads, absl::ZeroDuration()};
}

TEST_F(SideStateTest, CompactAndDenseUnitsCarryTheSideStatesByteForByte) {
  const client::NamespaceSpec spec = ConvNamespace("tenant-conv");
  const client::NamespaceInfo ns = Register(spec);
  ASSERT_EQ(ns.side_bytes, kConvBytes + 5);
  const size_t units = 2 * 4;
  const std::vector<float> states = MakeStates(spec, 3);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  const std::vector<uint8_t> sides = MakeSides(units, ns.side_bytes, 3);
  const std::vector<uint8_t> compact = Join(blobs, ns.blob_bytes, sides, ns.side_bytes);

  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(1)), compact).ok());
  absl::StatusOr<client::Checkpoint> got = client_->Get({ns.id, TestHash(1), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->side_bytes, ns.side_bytes);
  EXPECT_TRUE(got->bytes == compact);
  // Decoded: every unit is the reference's decoded state, then the side state as stored.
  absl::StatusOr<client::Checkpoint> dense =
      client_->Get({ns.id, TestHash(1), {}, DenseEncoding{DType::kFp32, Layout::kVK}});
  ASSERT_TRUE(dense.ok()) << dense.status();
  const std::vector<float> decoded = DecodeBlobs(spec, blobs, Layout::kVK);
  EXPECT_TRUE(dense->bytes == Join(AsBytes(decoded), 32 * 32 * 4, sides, ns.side_bytes));

  // A dense put of bf16 states with their side states; its blobs are the reference's encoding
  // of what arrived and its side states are what was sent.
  const std::vector<uint8_t> bf16 = ToBf16Bytes(states);
  const std::vector<uint8_t> dense_units = Join(bf16, 32 * 32 * 2, sides, ns.side_bytes);
  ASSERT_TRUE(client_
                  ->PutDense(Target(ns.id, TestHash(2)), {DType::kBf16, Layout::kKV},
                             dense_units)
                  .ok());
  absl::StatusOr<client::Checkpoint> stored = client_->Get({ns.id, TestHash(2), {}, {}});
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->bytes ==
              Join(EncodeBlobs(spec, FromBf16Bytes(bf16)), ns.blob_bytes, sides, ns.side_bytes));
}

// A layer range reads those layers' units only, side states included, compact and dense, alone
// or with a head range: exactly the matching bytes of the whole checkpoint, their CRC checked
// by the client; ranges outside the namespace's layers are refused and hold no lease.
TEST_F(SideStateTest, LayerRangesReadThoseLayersUnitsOnly) {
  client::NamespaceSpec spec = SmallNamespace("tenant-layers", 4, 4, 32);
  spec.model.conv = client::ConvShape{384, 3, client::ConvDType::kBf16};
  spec.model.extra_bytes = 3;
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<float> states = MakeStates(spec, 12);
  const std::vector<uint8_t> sides = MakeSides(16, ns.side_bytes, 12);
  const std::vector<uint8_t> units =
      Join(EncodeBlobs(spec, states), ns.blob_bytes, sides, ns.side_bytes);
  const client::PutTarget target{ns.id, TestHash(9), {64, 4}, {}, absl::ZeroDuration()};
  ASSERT_TRUE(client_->PutCompact(target, units).ok());
  const size_t unit = ns.blob_bytes + ns.side_bytes;
  for (const client::HeadRange heads : {client::HeadRange{}, client::HeadRange{1, 3}}) {
    for (const std::optional<DenseEncoding> dense :
         {std::optional<DenseEncoding>{},
          std::optional<DenseEncoding>{{DType::kBf16, Layout::kKV}}}) {
      absl::StatusOr<client::Checkpoint> whole = client_->Get({ns.id, TestHash(9), heads, dense});
      ASSERT_TRUE(whole.ok()) << whole.status();
      const size_t per_layer = whole->bytes.size() / 4;
      ASSERT_EQ(per_layer % (heads.all() ? 4 : 2), 0u);
      if (!dense.has_value()) {
        ASSERT_EQ(per_layer, (heads.all() ? 4 : 2) * unit);
      }
      for (const client::LayerRange layers : {client::LayerRange{0, 1}, client::LayerRange{1, 3},
                                              client::LayerRange{3, 4}, client::LayerRange{0, 4}}) {
        client::GetRequest q{ns.id, TestHash(9), heads, dense};
        q.layers = layers;
        absl::StatusOr<client::Checkpoint> got = client_->Get(q);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->first_layer, layers.begin);
        EXPECT_EQ(got->layers, layers.size());
        EXPECT_EQ(got->side_bytes, ns.side_bytes);
        EXPECT_TRUE(std::equal(got->bytes.begin(), got->bytes.end(),
                               whole->bytes.begin() + layers.begin * per_layer,
                               whole->bytes.begin() + layers.end * per_layer))
            << "layers " << layers.begin << ".." << layers.end;
      }
    }
  }
  for (const client::LayerRange bad : {client::LayerRange{2, 2}, client::LayerRange{3, 5},
                                       client::LayerRange{2, 1}, client::LayerRange{-1, 2}}) {
    client::GetRequest q{ns.id, TestHash(9), {}, std::nullopt};
    q.layers = bad;
    EXPECT_EQ(client_->Get(q).status().code(), absl::StatusCode::kInvalidArgument)
        << bad.begin << ".." << bad.end;
  }
  EXPECT_EQ(Stats().leases, 0u);
}

TEST_F(SideStateTest, TensorParallelHalvesPutTheirOwnSideStates) {
  const client::NamespaceSpec spec = ConvNamespace("tenant-tp");
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<float> states = MakeStates(spec, 8);
  const std::vector<uint8_t> sides = MakeSides(8, ns.side_bytes, 8);
  const std::vector<uint8_t> whole =
      Join(EncodeBlobs(spec, states), ns.blob_bytes, sides, ns.side_bytes);
  const size_t unit = ns.blob_bytes + ns.side_bytes;
  // Heads [0, 2) and [2, 4) of both layers, each rank's units in (layer, head) order.
  for (const client::HeadRange half : {client::HeadRange{0, 2}, client::HeadRange{2, 4}}) {
    std::vector<uint8_t> mine;
    for (int layer = 0; layer < 2; ++layer) {
      const auto first = whole.begin() + (layer * 4 + half.begin) * unit;
      mine.insert(mine.end(), first, first + 2 * unit);
    }
    ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(3), half), mine).ok());
  }
  absl::StatusOr<client::Checkpoint> got = client_->Get({ns.id, TestHash(3), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == whole);
  absl::StatusOr<client::Checkpoint> part =
      client_->Get({ns.id, TestHash(3), {1, 3}, std::nullopt});
  ASSERT_TRUE(part.ok()) << part.status();
  ASSERT_EQ(part->bytes.size(), 4 * unit);
  EXPECT_TRUE(std::equal(part->bytes.begin(), part->bytes.begin() + 2 * unit,
                         whole.begin() + 1 * unit));
}

TEST_F(SideStateTest, ANonFiniteConvStateIsRefusedAndChangesNothing) {
  const client::NamespaceSpec spec = ConvNamespace("tenant-nan");
  const client::NamespaceInfo ns = Register(spec);
  std::vector<uint8_t> sides = MakeSides(8, ns.side_bytes, 4);
  const uint16_t nan = 0x7fc1;
  std::memcpy(sides.data() + 5 * ns.side_bytes + 10, &nan, 2);  // layer 1 head 1, element 5
  const std::vector<uint8_t> units =
      Join(EncodeBlobs(spec, MakeStates(spec, 4)), ns.blob_bytes, sides, ns.side_bytes);
  const absl::Status st = client_->PutCompact(Target(ns.id, TestHash(4)), units);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("conv state (layer 1, head 1): element 5"), std::string::npos)
      << st;
  EXPECT_EQ(client_->Get({ns.id, TestHash(4), {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
  // Blobs alone, without the side states, are the wrong length for the namespace.
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 4));
  EXPECT_FALSE(client_->PutCompact(Target(ns.id, TestHash(4)), blobs).ok());
  EXPECT_EQ(client_->Get({ns.id, TestHash(4), {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SideStateTest, TheSameModelWithoutASideStateIsAnotherNamespace) {
  const client::NamespaceInfo plain = Register(SmallNamespace("tenant-x", 2, 4, 32));
  const client::NamespaceInfo conv = Register(ConvNamespace("tenant-x"));
  EXPECT_EQ(plain.side_bytes, 0u);
  EXPECT_NE(plain.id, conv.id);
  EXPECT_NE(plain.tag, conv.tag);
  EXPECT_NE(plain.fingerprint, conv.fingerprint);
  EXPECT_EQ(plain.blob_bytes, conv.blob_bytes);
  // A bad conv shape is refused by the server with the field's name.
  client::NamespaceSpec bad = ConvNamespace("tenant-x");
  bad.model.conv->channels = 383;
  absl::StatusOr<client::NamespaceInfo> refused = client_->RegisterNamespace(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("conv.channels"), std::string::npos);
}

}  // namespace
}  // namespace leapcache::testing
