// Side states (a layer's short-convolution state and the engine's extra bytes, per head): their
// registration, sizes and identity, and checkpoints whose units carry them, put and read back
// byte for byte across tensor-parallel head ranges, with bad ones refused at commit.
#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/core/checkpoint_store.h"
#include "tests/unit/core/test_util.h"

namespace leapcache::core {
namespace {

using testing::CheckpointBytes;
using testing::Crc;
using testing::HashOf;
using testing::LeaseBytes;
using testing::MakeStore;
using testing::PositionAt;
using testing::PutBytes;
using testing::SmallSpec;

// 4 heads; GDN's conv_dim = 2 x 4 x 16 + 4 x 16 = 192 channels (48 per head), kernel 4.
NamespaceSpec ConvSpec(DType dtype = DType::kBf16, int extra = 0) {
  NamespaceSpec s = SmallSpec("tenant-a", 2, 4);
  s.model.conv = {192, 3, dtype};
  s.model.extra_bytes = extra;
  return s;
}

class SideStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = MakeStore({{"host", 1 << 20, 4096}});
    ASSERT_NE(store_, nullptr);
  }
  NamespaceInfo Register(const NamespaceSpec& spec) {
    absl::StatusOr<NamespaceId> id = store_->RegisterNamespace(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    absl::StatusOr<NamespaceInfo> info = store_->GetNamespace(id.value_or(0));
    EXPECT_TRUE(info.ok()) << info.status();
    return info.value_or(NamespaceInfo{});
  }
  std::unique_ptr<CheckpointStore> store_;
};

TEST_F(SideStateTest, AUnitIsTheBlobThenItsHeadsConvStateThenTheExtraBytes) {
  const NamespaceInfo plain = Register(SmallSpec("tenant-a", 2, 4));
  const NamespaceInfo conv = Register(ConvSpec(DType::kBf16, 10));
  EXPECT_EQ(plain.side_bytes, 0u);
  EXPECT_EQ(plain.unit_bytes, plain.blob_bytes);
  EXPECT_EQ(conv.blob_bytes, plain.blob_bytes);
  EXPECT_EQ(conv.conv_bytes, 48u * 3 * 2);
  EXPECT_EQ(conv.side_bytes, conv.conv_bytes + 10);
  EXPECT_EQ(conv.unit_bytes, conv.blob_bytes + conv.side_bytes);
  EXPECT_EQ(conv.slot_bytes % kSlotAlignment, 0u);
  EXPECT_GE(conv.slot_bytes, conv.unit_bytes);
  EXPECT_EQ(Register(ConvSpec(DType::kFp32)).conv_bytes, 48u * 3 * 4);
}

TEST_F(SideStateTest, NamespacesWithoutASideStateKeepTheirIdentity) {
  // The tag of a namespace without a side state is what it was before side states existed:
  // SHA-256 of this exact text (an engine's cached id and tag stay valid across the upgrade).
  const NamespaceSpec plain = SmallSpec("tenant-a", 2, 4);
  const std::string text = "leapcache.v1 namespace 8:tenant-a|2,4,16,16,1|6,1,16,16,8,16,4,1";
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  uint64_t want = 0;
  for (int i = 7; i >= 0; --i) want = (want << 8) | digest[i];
  EXPECT_EQ(NamespaceTag(plain), want);
  // Any side state makes another namespace: its checkpoints never serve the plain one.
  const uint64_t conv = NamespaceTag(ConvSpec());
  EXPECT_NE(conv, want);
  EXPECT_NE(NamespaceTag(ConvSpec(DType::kFp16)), conv);
  EXPECT_NE(NamespaceTag(ConvSpec(DType::kBf16, 4)), conv);
  NamespaceSpec wider = ConvSpec();
  wider.model.conv.width = 2;
  EXPECT_NE(NamespaceTag(wider), conv);
  EXPECT_NE(Register(plain).id, Register(ConvSpec()).id);
}

TEST_F(SideStateTest, BadSideStateShapesAreRefusedNamingTheField) {
  struct Case {
    const char* name;
    ConvShape conv;
    int extra;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"channels not a multiple of the heads", {190, 3, DType::kBf16}, 0, "conv.channels"},
      {"no channels", {0, 3, DType::kBf16}, 0, "conv.channels"},
      {"too many channels", {kMaxConvChannels + 4, 3, DType::kBf16}, 0, "conv.channels"},
      {"width 0", {192, 0, DType::kBf16}, 0, "conv.width"},
      {"width past the limit", {192, kMaxConvWidth + 1, DType::kBf16}, 0, "conv.width"},
      {"no dtype", {192, 3, DType{}}, 0, "conv.dtype"},
      {"unknown dtype", {192, 3, static_cast<DType>(9)}, 0, "conv.dtype"},
      {"negative extra", {}, -1, "extra_bytes"},
      {"extra past the limit", {}, kMaxExtraBytes + 1, "extra_bytes"},
  };
  for (const Case& c : cases) {
    NamespaceSpec s = SmallSpec("tenant-a", 2, 4);
    s.model.conv = c.conv;
    s.model.extra_bytes = c.extra;
    absl::StatusOr<NamespaceId> id = store_->RegisterNamespace(s);
    ASSERT_FALSE(id.ok()) << c.name;
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(id.status().message().find(c.field), std::string::npos)
        << c.name << ": " << id.status();
  }
  EXPECT_EQ(store_->Stats().namespaces, 0u);
  // A unit past the page: 1 MiB tiers with 4 KiB pages cannot hold a 64 KiB extra.
  EXPECT_EQ(store_->RegisterNamespace(ConvSpec(DType::kFp32, kMaxExtraBytes)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SideStateTest, TensorParallelHalvesPutTheirSideStatesAndAWholeReadGetsThemBack) {
  const NamespaceInfo ns = Register(ConvSpec(DType::kBf16, 6));
  const BlockHash hash = HashOf(1);
  const std::vector<uint8_t> low = CheckpointBytes(ns, 11, {0, 2});
  const std::vector<uint8_t> high = CheckpointBytes(ns, 11, {2, 4});
  ASSERT_EQ(low.size(), 2u * 2 * ns.unit_bytes);
  ASSERT_TRUE(PutBytes(*store_, ns.id, hash, PositionAt(3), {0, 2}, low).ok());
  ASSERT_TRUE(PutBytes(*store_, ns.id, hash, PositionAt(3), {2, 4}, high).ok());

  absl::StatusOr<ReadLease> all = store_->Get(ns.id, hash, {0, 4});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->unit_bytes(), ns.unit_bytes);
  EXPECT_EQ(LeaseBytes(*all), CheckpointBytes(ns, 11, {0, 4}));
  // One head of the other half, its side state included, and the CRC recorded for its unit.
  const std::vector<uint8_t> whole = CheckpointBytes(ns, 11, {0, 4});
  const std::span<const uint8_t> want(whole.data() + (1 * 4 + 3) * ns.unit_bytes, ns.unit_bytes);
  std::vector<uint8_t> got(ns.unit_bytes);
  ASSERT_TRUE(all->CopyUnit(1, 3, got).ok());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()));
  EXPECT_EQ(all->UnitCrc(1, 3), Crc(want));
}

TEST_F(SideStateTest, ANonFiniteConvElementIsRefusedAtCommitAndNothingBecomesVisible) {
  for (DType dtype : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    const NamespaceInfo ns = Register(ConvSpec(dtype));
    const BlockHash hash = HashOf(2, static_cast<uint8_t>(dtype));
    std::vector<uint8_t> bytes = CheckpointBytes(ns, 5, {0, 4});
    // Layer 1, head 2's conv element 7: an infinity (exponent bits all ones, mantissa 0).
    uint8_t* element =
        bytes.data() + (1 * 4 + 2) * ns.unit_bytes + ns.blob_bytes + 7 * DTypeBytes(dtype);
    const uint32_t inf = dtype == DType::kFp32   ? 0x7f800000u
                         : dtype == DType::kBf16 ? 0x7f80u
                                                 : 0x7c00u;
    std::memcpy(element, &inf, DTypeBytes(dtype));

    PutRequest req;
    req.ns = ns.id;
    req.hash = hash;
    req.position = PositionAt(2);
    req.heads = {0, 4};
    absl::StatusOr<Reservation> r = store_->Reserve(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
    const absl::Status st = store_->Commit(r->id, Crc(bytes));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << DTypeName(dtype);
    EXPECT_NE(st.message().find("conv state (layer 1, head 2): element 7 is not finite"),
              std::string::npos)
        << st;
    EXPECT_EQ(store_->Get(ns.id, hash, {0, 4}).status().code(), absl::StatusCode::kNotFound);
    // The put stays open for a corrected upload.
    std::memset(element, 0, DTypeBytes(dtype));
    ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
    EXPECT_TRUE(store_->Commit(r->id, Crc(bytes)).ok());
    absl::StatusOr<ReadLease> lease = store_->Get(ns.id, hash, {0, 4});
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_EQ(LeaseBytes(*lease), bytes);
  }
}

TEST_F(SideStateTest, AChangedSideStateByteFailsTheChecksum) {
  const NamespaceInfo ns = Register(ConvSpec(DType::kBf16, 6));
  std::vector<uint8_t> bytes = CheckpointBytes(ns, 9, {0, 4});
  const uint32_t crc = Crc(bytes);
  bytes[3 * ns.unit_bytes - 1] ^= 0x01;  // the last extra byte of unit 2
  PutRequest req;
  req.ns = ns.id;
  req.hash = HashOf(3);
  req.position = PositionAt(1);
  req.heads = {0, 4};
  absl::StatusOr<Reservation> r = store_->Reserve(req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
  EXPECT_EQ(store_->Commit(r->id, crc).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store_->Get(ns.id, HashOf(3), {0, 4}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace leapcache::core
