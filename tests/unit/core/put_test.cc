// Two-phase put: Reserve / Upload (or write the spans) / Commit / Abort / expiry.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/base/config.h"
#include "test_util.h"

namespace leapcache::core {
namespace {

using namespace leapcache::core::testing;  // NOLINT

class PutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = MakeStore({{"host", 64 * 4096}}, QuietOptions(), &clock_);
    ns_ = *store_->GetNamespace(*store_->RegisterNamespace(SmallSpec()));
  }

  PutRequest Request(uint64_t i, HeadRange heads = {0, 4}) const {
    PutRequest r;
    r.ns = ns_.id;
    r.hash = HashOf(i);
    r.position = PositionAt(static_cast<int64_t>(i) + 1);
    r.heads = heads;
    return r;
  }

  bool Visible(uint64_t i, HeadRange heads = {0, 4}) {
    const BlockHash h = HashOf(i);
    LookupRequest q;
    q.ns = ns_.id;
    q.chain = std::span<const BlockHash>(&h, 1);
    q.heads = heads;
    q.block_tokens = 16;
    absl::StatusOr<LookupResult> l = store_->Lookup(q);
    EXPECT_TRUE(l.ok());
    const bool get_ok = store_->Get(ns_.id, h, heads).ok();
    // Lookup checks position (blocks == 1 for a one-hash chain); Get does not.
    return get_ok;
  }

  FakeClock clock_;
  std::unique_ptr<CheckpointStore> store_;
  NamespaceInfo ns_;
};

TEST_F(PutTest, ReserveGivesOneSpanPerLayerAndHead) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(1, {1, 3}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->id, 0u);
  EXPECT_EQ(r->layers, 2);
  EXPECT_EQ(r->heads, (HeadRange{1, 3}));
  EXPECT_EQ(r->unit_bytes, ns_.unit_bytes);
  ASSERT_EQ(r->units.size(), 4u);
  for (const auto& s : r->units) {
    EXPECT_EQ(s.size(), ns_.blob_bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % kSlotAlignment, 0u);
  }
  EXPECT_EQ(r->unit(1, 2).data(), r->units[3].data());
  EXPECT_EQ(r->deadline, clock_.Now() + StoreOptions().default_put_ttl);
  EXPECT_TRUE(store_->Abort(r->id).ok());
}

TEST_F(PutTest, WritingTheSpansThenCommitPublishes) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(1));
  ASSERT_TRUE(r.ok());
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 7, {0, 4});
  for (size_t b = 0; b < r->units.size(); ++b) {
    std::memcpy(r->units[b].data(), bytes.data() + b * ns_.blob_bytes, ns_.blob_bytes);
  }
  EXPECT_FALSE(Visible(1));  // written but not committed
  ASSERT_TRUE(store_->Commit(r->id, Crc(bytes)).ok());
  absl::StatusOr<ReadLease> lease = store_->Get(ns_.id, HashOf(1), {0, 4});
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(LeaseBytes(*lease), bytes);
  EXPECT_EQ(lease->position(), PositionAt(2));
  // The put id is spent.
  EXPECT_EQ(store_->Commit(r->id, Crc(bytes)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Abort(r->id).code(), absl::StatusCode::kNotFound);
}

TEST_F(PutTest, UploadInChunksInAnyOrder) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(2));
  ASSERT_TRUE(r.ok());
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 8, {0, 4});
  // Odd-sized chunks that straddle blob boundaries, uploaded back to front.
  const size_t chunk = 333;
  std::vector<size_t> offsets;
  for (size_t off = 0; off < bytes.size(); off += chunk) offsets.push_back(off);
  for (auto it = offsets.rbegin(); it != offsets.rend(); ++it) {
    const size_t n = std::min(chunk, bytes.size() - *it);
    ASSERT_TRUE(store_->Upload(r->id, *it, std::span(bytes).subspan(*it, n)).ok());
  }
  ASSERT_TRUE(store_->Commit(r->id, Crc(bytes)).ok());
  EXPECT_EQ(LeaseBytes(*store_->Get(ns_.id, HashOf(2), {0, 4})), bytes);
}

TEST_F(PutTest, UncommittedPutsAreInvisible) {
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 3, {0, 4});
  absl::StatusOr<Reservation> r = store_->Reserve(Request(3));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
  EXPECT_FALSE(Visible(3));
  EXPECT_EQ(store_->Pin(ns_.id, HashOf(3)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(ns_.id, HashOf(3)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Stats().checkpoints, 0u);
  ASSERT_TRUE(store_->Commit(r->id, Crc(bytes)).ok());
  EXPECT_TRUE(Visible(3));
}

TEST_F(PutTest, AbortFreesEverything) {
  const StoreStats before = store_->Stats();
  absl::StatusOr<Reservation> r = store_->Reserve(Request(4));
  ASSERT_TRUE(r.ok());
  StoreStats during = store_->Stats();
  EXPECT_GT(during.tiers[0].used_bytes, before.tiers[0].used_bytes);
  EXPECT_EQ(during.tiers[0].reserved_bytes, during.tiers[0].used_bytes);
  EXPECT_EQ(during.pending_puts, 1u);
  ASSERT_TRUE(store_->Abort(r->id).ok());
  const StoreStats after = store_->Stats();
  EXPECT_EQ(after.tiers[0].used_bytes, before.tiers[0].used_bytes);
  EXPECT_EQ(after.tiers[0].reserved_bytes, 0u);
  EXPECT_EQ(after.pending_puts, 0u);
  EXPECT_EQ(after.puts_aborted, 1u);
  EXPECT_FALSE(Visible(4));
  // The heads are free again.
  EXPECT_TRUE(PutSeeded(*store_, ns_, HashOf(4), PositionAt(5), {0, 4}, 4).ok());
}

TEST_F(PutTest, TheReaperReclaimsExpiredPuts) {
  PutRequest req = Request(5);
  req.ttl = absl::Seconds(2);
  absl::StatusOr<Reservation> r = store_->Reserve(req);
  ASSERT_TRUE(r.ok());
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 5, {0, 4});
  ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(store_->ReapExpiredPuts(), 0u);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(store_->ReapExpiredPuts(), 1u);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.tiers[0].used_bytes, 0u);
  EXPECT_EQ(s.puts_expired, 1u);
  EXPECT_EQ(store_->Commit(r->id, Crc(bytes)).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Visible(5));
}

TEST_F(PutTest, CommitOrUploadPastTheDeadlineFailsAndReclaims) {
  PutRequest req = Request(6);
  req.ttl = absl::Milliseconds(500);
  absl::StatusOr<Reservation> a = store_->Reserve(req);
  req.hash = HashOf(7);
  req.position = PositionAt(8);
  absl::StatusOr<Reservation> b = store_->Reserve(req);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 6, {0, 4});
  ASSERT_TRUE(store_->Upload(a->id, 0, bytes).ok());
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_EQ(store_->Commit(a->id, Crc(bytes)).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(store_->Upload(b->id, 0, bytes).code(), absl::StatusCode::kDeadlineExceeded);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.tiers[0].used_bytes, 0u);
  EXPECT_EQ(s.puts_expired, 2u);
  EXPECT_FALSE(Visible(6));
}

TEST_F(PutTest, WriteInPlaceGivesTheUnitsAndHoldsThePagesWhileItWrites) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(9));
  ASSERT_TRUE(r.ok());
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 9, {0, 4});
  ASSERT_TRUE(store_
                  ->WriteInPlace(r->id,
                                 [&](const CheckpointStore::UnitAddresses& at) {
                                   EXPECT_EQ(at.cuda_device, -1);  // host memory
                                   EXPECT_EQ(at.units.size(), r->units.size());
                                   for (size_t b = 0; b < at.units.size(); ++b) {
                                     EXPECT_EQ(at.units[b], r->units[b].data());
                                     std::memcpy(at.units[b], bytes.data() + b * ns_.unit_bytes,
                                                 ns_.unit_bytes);
                                   }
                                   return absl::OkStatus();
                                 })
                  .ok());
  ASSERT_TRUE(store_->Commit(r->id, Crc(bytes)).ok());
  EXPECT_EQ(LeaseBytes(*store_->Get(ns_.id, HashOf(9), {0, 4})), bytes);

  // An Abort while the writer writes frees the pages only once it returned; the writer's error
  // comes back as it was.
  absl::StatusOr<Reservation> a = store_->Reserve(Request(10));
  ASSERT_TRUE(a.ok());
  const size_t used = store_->Stats().tiers[0].used_bytes;
  const absl::Status written =
      store_->WriteInPlace(a->id, [&](const CheckpointStore::UnitAddresses&) {
        EXPECT_TRUE(store_->Abort(a->id).ok());
        EXPECT_EQ(store_->Stats().tiers[0].used_bytes, used);  // still held
        return absl::UnavailableError("the engine went away");
      });
  EXPECT_EQ(written.code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(store_->Stats().tiers[0].used_bytes, used);
  EXPECT_EQ(store_->WriteInPlace(a->id, [](const auto&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kNotFound);

  // Past its deadline a put gives no addresses and is reclaimed.
  PutRequest late = Request(11);
  late.ttl = absl::Milliseconds(100);
  absl::StatusOr<Reservation> b = store_->Reserve(late);
  ASSERT_TRUE(b.ok());
  clock_.Advance(absl::Milliseconds(100));
  bool called = false;
  EXPECT_EQ(store_
                ->WriteInPlace(b->id,
                               [&](const auto&) {
                                 called = true;
                                 return absl::OkStatus();
                               })
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(called);
  EXPECT_EQ(store_->Stats().pending_puts, 0u);
}

// A store with a real reaper thread every millisecond, on `clock`, and one namespace.
std::unique_ptr<CheckpointStore> ReapedStore(FakeClock* clock, size_t budget_bytes,
                                             NamespaceInfo* ns) {
  StoreOptions options;
  options.reaper_interval = absl::Milliseconds(1);
  auto store = MakeStore({{"host", budget_bytes}}, options, clock);
  *ns = *store->GetNamespace(*store->RegisterNamespace(SmallSpec()));
  return store;
}

// A put of every head at `hash` that expires after `ttl`.
PutRequest ExpiringPut(const NamespaceInfo& ns, const BlockHash& hash, absl::Duration ttl) {
  PutRequest req;
  req.ns = ns.id;
  req.hash = hash;
  req.position = PositionAt(1);
  req.heads = {0, 4};
  req.ttl = ttl;
  return req;
}

TEST(PutReaperThreadTest, BackgroundReaperRunsOnTheInjectedClock) {
  FakeClock clock;
  NamespaceInfo ns;
  auto store = ReapedStore(&clock, 16 * 4096, &ns);
  ASSERT_TRUE(store->Reserve(ExpiringPut(ns, HashOf(1), absl::Seconds(10))).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(store->Stats().pending_puts, 1u);  // real time passes, the clock does not
  clock.Advance(absl::Seconds(10));
  // The reaper takes the put out of the pending table before giving its memory back.
  for (int i = 0; i < 5000; ++i) {
    const StoreStats s = store->Stats();
    if (s.pending_puts == 0 && s.tiers[0].used_bytes == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  StoreStats s = store->Stats();
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.tiers[0].used_bytes, 0u);
  EXPECT_EQ(s.puts_expired, 1u);
}

// ReapExpiredPuts returns only once every put expired by then is reclaimed, even when the
// background reaper took them first and is still giving their memory back: a caller (Reserve's
// retry, an operator draining the store) that sees no pending put must see no reserved page.
TEST(PutReaperThreadTest, ReapingWaitsForTheBackgroundReapersReclaims) {
  FakeClock clock;
  NamespaceInfo ns;
  auto store = ReapedStore(&clock, 256 * 4096, &ns);
  std::mt19937 rng(7);
  uint64_t next_hash = 1;
  int reaped_here = 0;
  for (int round = 0; round < 150; ++round) {
    for (int i = 0; i < 60; ++i) {
      ASSERT_TRUE(store->Reserve(ExpiringPut(ns, HashOf(next_hash++), absl::Seconds(1))).ok());
    }
    clock.Advance(absl::Seconds(1));
    // Somewhere in the reaper's 1 ms period: sometimes before it wakes, sometimes while it
    // reclaims, sometimes after.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 1500));
    reaped_here += static_cast<int>(store->ReapExpiredPuts());
    const StoreStats s = store->Stats();
    ASSERT_EQ(s.pending_puts, 0u) << "round " << round;
    ASSERT_EQ(s.tiers[0].reserved_bytes, 0u) << "round " << round;
    ASSERT_EQ(s.tiers[0].used_bytes, 0u) << "round " << round;
  }
  std::printf("%d of 9000 expired puts reaped by the caller, the rest by the reaper\n",
              reaped_here);
}

// After each failed commit: nothing visible, the put still open and unchanged, memory the same.
class FailedCommitTest : public PutTest {
 protected:
  void ExpectNothingChanged(PutId id, const StoreStats& during) {
    EXPECT_FALSE(Visible(9));
    const StoreStats s = store_->Stats();
    EXPECT_EQ(s.checkpoints, 0u);
    EXPECT_EQ(s.puts_committed, 0u);
    EXPECT_EQ(s.pending_puts, 1u);
    EXPECT_EQ(s.tiers[0].used_bytes, during.tiers[0].used_bytes);
    EXPECT_EQ(s.tiers[0].reserved_bytes, during.tiers[0].reserved_bytes);
    EXPECT_TRUE(s.memory.empty());
    // The put can still be completed correctly.
    const std::vector<uint8_t> good = CheckpointBytes(ns_, 9, {0, 4});
    ASSERT_TRUE(store_->Upload(id, 0, good).ok());
    ASSERT_TRUE(store_->Commit(id, Crc(good)).ok());
    EXPECT_TRUE(Visible(9));
  }
};

TEST_F(FailedCommitTest, WrongChecksumIsDataLoss) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(9));
  ASSERT_TRUE(r.ok());
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 9, {0, 4});
  ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
  const StoreStats during = store_->Stats();
  absl::Status st = store_->Commit(r->id, Crc(bytes) ^ 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st;
  EXPECT_EQ(store_->Stats().puts_rejected, 1u);
  ExpectNothingChanged(r->id, during);
}

TEST_F(FailedCommitTest, UnusableValuesUnderAValidChecksumAreInvalidArgument) {
  // A blob whose checksums are right but whose compensator is NaN: no reader would accept it,
  // so the store refuses it at commit, naming it, rather than serve it.
  absl::StatusOr<Reservation> r = store_->Reserve(Request(9));
  ASSERT_TRUE(r.ok());
  std::vector<uint8_t> bytes = CheckpointBytes(ns_, 9, {0, 4});
  const PayloadLayout l = ComputeLayout(ns_.spec.format);
  const size_t blob6 = ns_.blob_bytes * 6;  // layer 1, head 2
  StoreU16(bytes.data() + blob6 + kHeaderBytes + l.comp_offset, 0x7e00);
  SealBlob(ns_.spec.format, std::span(bytes).subspan(blob6, ns_.blob_bytes));
  ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
  const StoreStats during = store_->Stats();
  absl::Status st = store_->Commit(r->id, Crc(bytes));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("blob (layer 1, head 2): compensator 0 is not finite"),
            std::string::npos)
      << st;
  ExpectNothingChanged(r->id, during);
}

TEST_F(FailedCommitTest, TruncatedUploadFails) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(9));
  ASSERT_TRUE(r.ok());
  // Zero the memory first so the missing tail is deterministic, then upload all but 10 bytes.
  const std::vector<uint8_t> zeros(r->total_bytes(), 0);
  ASSERT_TRUE(store_->Upload(r->id, 0, zeros).ok());
  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 9, {0, 4});
  ASSERT_TRUE(store_->Upload(r->id, 0, std::span(bytes).first(bytes.size() - 10)).ok());
  const StoreStats during = store_->Stats();
  // The writer's checksum covers what it meant to send: mismatch.
  EXPECT_EQ(store_->Commit(r->id, Crc(bytes)).code(), absl::StatusCode::kDataLoss);
  // Even a checksum of what actually arrived is refused: the last blob does not parse.
  std::vector<uint8_t> arrived = bytes;
  std::fill(arrived.end() - 10, arrived.end(), 0);
  absl::Status st = store_->Commit(r->id, Crc(arrived));
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("blob (layer 1, head 3)"), std::string::npos) << st;
  ExpectNothingChanged(r->id, during);
}

TEST_F(FailedCommitTest, CorruptPayloadIsNamed) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(9));
  ASSERT_TRUE(r.ok());
  std::vector<uint8_t> bytes = CheckpointBytes(ns_, 9, {0, 4});
  bytes[ns_.blob_bytes * 5 + kHeaderBytes + 3] ^= 0x40;  // payload of blob 5: layer 1, head 1
  ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
  const StoreStats during = store_->Stats();
  absl::Status st = store_->Commit(r->id, Crc(bytes));  // consistent checksum, damaged blob
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("blob (layer 1, head 1)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("payload checksum"), std::string::npos) << st;
  ExpectNothingChanged(r->id, during);
}

TEST_F(FailedCommitTest, WrongSpecIsInvalidArgument) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(9));
  ASSERT_TRUE(r.ok());
  // KDA blobs of the same shape and size into a GDN namespace.
  NamespaceInfo kda = ns_;
  kda.spec.format = SmallLeap(StateKind::kKda);
  std::vector<uint8_t> bytes = CheckpointBytes(ns_, 9, {0, 4});
  const std::vector<uint8_t> wrong = MakeBlob(kda.spec.format, 1234);
  ASSERT_EQ(wrong.size(), ns_.blob_bytes);
  std::copy(wrong.begin(), wrong.end(), bytes.begin() + 2 * ns_.blob_bytes);  // layer 0, head 2
  ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
  const StoreStats during = store_->Stats();
  absl::Status st = store_->Commit(r->id, Crc(bytes));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("blob (layer 0, head 2)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("namespace stores"), std::string::npos) << st;
  ExpectNothingChanged(r->id, during);
}

TEST_F(PutTest, ConflictingPutsAreRefused) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(10, {0, 2}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(store_->Reserve(Request(10, {0, 2})).status().code(),
            absl::StatusCode::kFailedPrecondition);  // same heads in flight
  EXPECT_EQ(store_->Reserve(Request(10, {1, 3})).status().code(),
            absl::StatusCode::kFailedPrecondition);  // overlapping
  PutRequest moved = Request(10, {2, 4});
  moved.position = PositionAt(3);
  EXPECT_EQ(store_->Reserve(moved).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Reservation> other_half = store_->Reserve(Request(10, {2, 4}));
  ASSERT_TRUE(other_half.ok());  // disjoint heads: another TP rank
  ASSERT_TRUE(store_->Abort(other_half->id).ok());

  const std::vector<uint8_t> bytes = CheckpointBytes(ns_, 10, {0, 2});
  ASSERT_TRUE(store_->Upload(r->id, 0, bytes).ok());
  ASSERT_TRUE(store_->Commit(r->id, Crc(bytes)).ok());
  EXPECT_EQ(store_->Reserve(Request(10, {0, 2})).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->Reserve(Request(10, {0, 1})).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->Reserve(Request(10, {1, 4})).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Reserve(moved).status().code(), absl::StatusCode::kInvalidArgument);
  const StoreStats s = store_->Stats();
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.puts_refused, 7u);
}

TEST_F(PutTest, BadRequestsChangeNothing) {
  const StoreStats before = store_->Stats();
  PutRequest r = Request(11);
  r.ns = 99;
  EXPECT_EQ(store_->Reserve(r).status().code(), absl::StatusCode::kNotFound);
  for (HeadRange heads : {HeadRange{-1, 2}, HeadRange{0, 5}, HeadRange{2, 2}, HeadRange{3, 1}}) {
    EXPECT_EQ(store_->Reserve(Request(11, heads)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  for (Position p :
       {Position{0, 0}, Position{16, 0}, Position{1, 2}, Position{int64_t{kMaxBlockTokens} + 1, 1},
        Position{kMaxChainBlocks + 1, kMaxChainBlocks + 1}}) {
    PutRequest bad = Request(11);
    bad.position = p;
    EXPECT_EQ(store_->Reserve(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << p.tokens << " " << p.blocks;
  }
  for (absl::Duration ttl : {absl::Seconds(-1), StoreOptions().max_put_ttl + absl::Seconds(1)}) {
    PutRequest bad = Request(11);
    bad.ttl = ttl;
    EXPECT_EQ(store_->Reserve(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(store_->Upload(12345, 0, {}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Commit(12345, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Abort(12345).code(), absl::StatusCode::kNotFound);
  const StoreStats after = store_->Stats();
  EXPECT_EQ(after.tiers[0].used_bytes, before.tiers[0].used_bytes);
  EXPECT_EQ(after.pending_puts, 0u);
  EXPECT_EQ(after.puts_reserved, 0u);

  absl::StatusOr<Reservation> ok = store_->Reserve(Request(11));
  ASSERT_TRUE(ok.ok());
  std::vector<uint8_t> one(1);
  EXPECT_EQ(store_->Upload(ok->id, ok->total_bytes(), one).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(store_->Upload(ok->id, ok->total_bytes() + 5, {}).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(store_->Upload(ok->id, ok->total_bytes() - 1, one).ok());
}

#if defined(ABSL_HAVE_ADDRESS_SANITIZER)
// Freed pages are poisoned: a writer that keeps using its spans after Abort (or after its
// deadline) is caught instead of corrupting the next owner's bytes.
TEST_F(PutTest, ASpanUsedAfterAbortIsReportedByAsan) {
  absl::StatusOr<Reservation> r = store_->Reserve(Request(1));
  ASSERT_TRUE(r.ok());
  const std::span<uint8_t> span = r->units[0];
  ASSERT_TRUE(store_->Abort(r->id).ok());
  EXPECT_DEATH({ span[0] = 1; }, "use-after-poison");
}
#endif

TEST(PutLimitsTest, TooLargeOrTooManyPutsAreResourceExhausted) {
  StoreOptions options = QuietOptions();
  options.max_pending_puts = 2;
  auto store = MakeStore({{"host", 3 * 4096}}, options);
  // 8 layers x 4 heads = 32 blobs of 704 B: 7 pages, the tier has 3.
  const NamespaceInfo big = *store->GetNamespace(*store->RegisterNamespace(SmallSpec("t", 8)));
  PutRequest req;
  req.ns = big.id;
  req.hash = HashOf(1);
  req.position = PositionAt(1);
  req.heads = {0, 4};
  absl::StatusOr<Reservation> r = store->Reserve(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("host"), std::string::npos) << r.status();
  req.heads = {0, 1};  // 8 blobs: 2 pages
  ASSERT_TRUE(store->Reserve(req).ok());
  req.heads = {1, 2};
  EXPECT_EQ(store->Reserve(req).status().code(), absl::StatusCode::kResourceExhausted);  // 1 free
  const NamespaceInfo small = *store->GetNamespace(*store->RegisterNamespace(SmallSpec("t", 1)));
  req.ns = small.id;
  req.heads = {0, 1};
  ASSERT_TRUE(store->Reserve(req).ok());
  req.heads = {1, 2};
  EXPECT_EQ(store->Reserve(req).status().code(), absl::StatusCode::kResourceExhausted);  // 2 puts
  EXPECT_EQ(store->Stats().pending_puts, 2u);
}

}  // namespace
}  // namespace leapcache::core
