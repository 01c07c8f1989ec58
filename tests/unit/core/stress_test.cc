// Randomized workloads against small tiers, so eviction, spill and promotion never stop:
// puts (whole and per tensor-parallel rank, through spans or Upload), aborted, damaged and
// abandoned puts, lookups, gets holding leases, deletes and pins, from many threads at once.
//
// Every byte a hit returns is compared with the bytes that key's writers put (each key has one
// deterministic content, so every writer of any head range agrees on it), the memory budget is
// checked throughout, and at the end no reservation, lease or page is left behind.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <latch>
#include <random>
#include <thread>
#include <vector>

#include "base/block_hash.h"
#include "test_util.h"

namespace leapcache::core {
namespace {

using namespace leapcache::core::testing;  // NOLINT

constexpr int kChains = 8;
constexpr int kDepth = 6;
constexpr int kSharedBlocks = 3;  // every chain starts with the same 3 blocks, then diverges
constexpr int64_t kBlock = 16;

BlobSpec Fp32Spec() {
  BlobSpec s;
  s.codec = Codec::kFp32;
  s.bits = 32;
  s.p = 1;
  s.r = 0;
  s.smoothing = false;
  s.dk = s.dv = 16;
  return s;
}

// One namespace of the workload with its chains and the canonical bytes of every key.
struct Space {
  NamespaceInfo info;
  std::vector<std::vector<BlockHash>> chains;  // [chain][depth]
  std::vector<std::vector<uint8_t>> bytes;     // [chain * kDepth + depth]: all heads
  int heads() const { return info.spec.model.total_heads; }
  const uint8_t* Blob(int chain, int depth, int layer, int head) const {
    return bytes[chain * kDepth + depth].data() +
           (static_cast<size_t>(layer) * heads() + head) * info.blob_bytes;
  }
};

class Workload {
 public:
  Workload(CheckpointStore* store, FakeClock* clock) : store_(store), clock_(clock) {
    Add(SmallSpec("tenant-a", 2, 4), 1);
    Add(SmallSpec("tenant-b", 2, 4, Fp32Spec()), 2);
    Add(SmallSpec("tenant-a", 3, 2, BlobSpec::Leap(StateKind::kKda, 8, 32, 32)), 3);
  }

  // The bytes of `lease` must be exactly the key's canonical bytes for its heads.
  void Verify(const ReadLease& lease, const Space& s, int chain, int depth) {
    EXPECT_EQ(lease.position(), (Position{(depth + 1) * kBlock, depth + 1}));
    for (int layer = 0; layer < lease.layers(); ++layer) {
      for (int h = lease.heads().begin; h < lease.heads().end; ++h) {
        std::span<const uint8_t> got = lease.Unit(layer, h);
        if (got.size() != s.info.blob_bytes ||
            std::memcmp(got.data(), s.Blob(chain, depth, layer, h), got.size()) != 0) {
          mismatches_.fetch_add(1);
        }
      }
    }
    verified_.fetch_add(1);
  }

  void CheckBudget() {
    const StoreStats s = store_->Stats();
    for (size_t t = 0; t < s.tiers.size(); ++t) {
      uint64_t physical = 0;
      for (const FormatMemoryStats& m : s.memory) {
        if (m.tier == s.tiers[t].name) physical += m.physical_bytes;
      }
      EXPECT_LE(s.tiers[t].used_bytes, s.tiers[t].capacity_bytes);
      EXPECT_EQ(physical + s.tiers[t].reserved_bytes, s.tiers[t].used_bytes);
    }
  }

  void Run(uint32_t seed, int ops) {
    std::mt19937 rng(seed);
    std::deque<std::tuple<ReadLease, int, int, int>> held;  // lease, space, chain, depth
    const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    for (int op = 0; op < ops; ++op) {
      const int k = pick(static_cast<int>(spaces_.size()));
      const Space& s = spaces_[k];
      const int chain = pick(kChains);
      const int depth = pick(kDepth);
      const int tp = s.heads() == 4 ? (1 << pick(3)) : (1 << pick(2));
      const int width = s.heads() / tp;
      const int rank = pick(tp);
      const HeadRange heads{rank * width, (rank + 1) * width};
      const BlockHash& hash = s.chains[chain][depth];
      const int what = pick(100);
      if (what < 35) {
        Put(rng, s, chain, depth, heads);
      } else if (what < 70) {
        LookupRequest q;
        q.ns = s.info.id;
        q.chain = s.chains[chain];
        q.heads = heads;
        q.block_tokens = kBlock;
        absl::StatusOr<LookupResult> r = store_->Lookup(q);
        ASSERT_TRUE(r.ok()) << r.status();
        if (!r->hit) continue;
        EXPECT_EQ(r->position.blocks, r->index + 1);
        absl::StatusOr<ReadLease> lease = store_->Get(s.info.id, s.chains[chain][r->index], heads);
        if (lease.ok()) {
          Verify(*lease, s, chain, r->index);
        } else {
          EXPECT_EQ(lease.status().code(), absl::StatusCode::kNotFound) << lease.status();
        }
      } else if (what < 78) {
        absl::StatusOr<ReadLease> lease = store_->Get(s.info.id, hash, heads);
        if (lease.ok()) {
          Verify(*lease, s, chain, depth);
          held.emplace_back(std::move(lease).value(), k, chain, depth);
          if (held.size() > 1) held.pop_front();  // leases pin memory: keep the total modest
        } else {
          EXPECT_EQ(lease.status().code(), absl::StatusCode::kNotFound) << lease.status();
        }
      } else if (what < 83) {
        if (!held.empty()) {  // bytes under a lease must not have changed meanwhile
          auto& [lease, hk, hc, hd] = held.front();
          Verify(lease, spaces_[hk], hc, hd);
          held.pop_front();
        }
      } else if (what < 88) {
        absl::Status st = store_->Delete(s.info.id, hash);
        EXPECT_TRUE(st.ok() || absl::IsNotFound(st)) << st;
      } else if (what < 93) {
        absl::Status st = store_->Pin(s.info.id, hash);
        EXPECT_TRUE(st.ok() || absl::IsNotFound(st)) << st;
        if (st.ok()) {
          st = store_->Unpin(s.info.id, hash);
          // Deleted and re-put by another thread meanwhile: the pin went with the old entry.
          EXPECT_TRUE(st.ok() || absl::IsNotFound(st) || absl::IsFailedPrecondition(st)) << st;
        }
      } else if (what < 97) {
        CheckBudget();
      } else {
        store_->ReapExpiredPuts();
      }
    }
    for (auto& [lease, hk, hc, hd] : held) Verify(lease, spaces_[hk], hc, hd);
  }

  const std::vector<Space>& spaces() const { return spaces_; }
  int mismatches() const { return mismatches_.load(); }
  int verified() const { return verified_.load(); }

 private:
  void Add(const NamespaceSpec& spec, uint32_t salt) {
    Space s;
    s.info = *store_->GetNamespace(*store_->RegisterNamespace(spec));
    const std::vector<uint8_t> extras = {static_cast<uint8_t>(salt)};
    for (int c = 0; c < kChains; ++c) {
      std::vector<uint32_t> tokens(kDepth * kBlock);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i + 1);
      tokens[kSharedBlocks * kBlock] = 1000 + c;  // chains share their first blocks
      s.chains.push_back(*base::ChainHashes(tokens, kBlock, extras));
      for (int d = 0; d < kDepth; ++d) {
        // One key, one content: a shared block's checkpoint is chain 0's.
        const int owner = d < kSharedBlocks ? 0 : c;
        s.bytes.push_back(CheckpointBytes(s.info, salt * 1000 + owner * 10 + d,
                                          {0, s.info.spec.model.total_heads}));
      }
    }
    spaces_.push_back(std::move(s));
  }

  void Put(std::mt19937& rng, const Space& s, int chain, int depth, HeadRange heads) {
    const int mode = static_cast<int>(rng() % 100);
    PutRequest req;
    req.ns = s.info.id;
    req.hash = s.chains[chain][depth];
    req.position = Position{(depth + 1) * kBlock, depth + 1};
    req.heads = heads;
    // mode [0, 15): short-lived (a few advances of the clock thread); [0, 5) abandoned after
    // the upload, [5, 8) abandoned before it, the rest committed if still in time. Short-lived
    // puts only ever use Upload: writing spans after the deadline is outside the contract.
    // mode [15, 18): aborted. [18, 60): spans. [60, 100): Upload. [90, 100): a damaged commit
    // first.
    const bool short_lived = mode < 15;
    req.ttl = short_lived ? absl::Milliseconds(20) : absl::Hours(24);
    absl::StatusOr<Reservation> r = store_->Reserve(req);
    if (!r.ok()) {
      const absl::StatusCode c = r.status().code();
      EXPECT_TRUE(c == absl::StatusCode::kAlreadyExists ||
                  c == absl::StatusCode::kFailedPrecondition ||
                  c == absl::StatusCode::kResourceExhausted)
          << r.status();
      return;
    }
    if (short_lived && mode >= 5 && mode < 8) return;  // abandoned: the reaper's job
    if (mode >= 15 && mode < 18) {
      EXPECT_TRUE(store_->Abort(r->id).ok());
      return;
    }
    // This put's bytes, (layer, head) order.
    std::vector<uint8_t> bytes;
    for (int layer = 0; layer < s.info.spec.model.linear_layers; ++layer) {
      for (int h = heads.begin; h < heads.end; ++h) {
        const uint8_t* b = s.Blob(chain, depth, layer, h);
        bytes.insert(bytes.end(), b, b + s.info.blob_bytes);
      }
    }
    const uint32_t crc = Crc(bytes);
    if (!short_lived && mode < 60) {
      for (size_t b = 0; b < r->units.size(); ++b) {
        std::memcpy(r->units[b].data(), bytes.data() + b * s.info.blob_bytes, s.info.blob_bytes);
      }
    } else {
      const size_t half = bytes.size() / 2 + 7;
      for (size_t off : {half, size_t{0}}) {  // second half first
        const size_t n = off == 0 ? half : bytes.size() - half;
        absl::Status st = store_->Upload(r->id, off, std::span(bytes).subspan(off, n));
        if (!st.ok()) {
          EXPECT_TRUE(short_lived && (absl::IsDeadlineExceeded(st) || absl::IsNotFound(st))) << st;
          return;
        }
      }
    }
    if (short_lived && mode < 5) return;  // abandoned after upload: the reaper's job
    if (mode >= 90) {                     // a damaged transfer first: refused, the put stays open
      absl::Status st = store_->Commit(r->id, crc ^ 0x1000);
      EXPECT_TRUE(absl::IsDataLoss(st) || (short_lived && !st.ok())) << st;
    }
    absl::Status st = store_->Commit(r->id, crc);
    if (short_lived) {
      EXPECT_TRUE(st.ok() || absl::IsDeadlineExceeded(st) || absl::IsNotFound(st)) << st;
    } else {
      EXPECT_TRUE(st.ok()) << st;
    }
  }

  CheckpointStore* const store_;
  FakeClock* const clock_;
  std::vector<Space> spaces_;
  std::atomic<int> mismatches_{0};
  std::atomic<int> verified_{0};
};

void ExpectQuiescent(CheckpointStore& store) {
  const StoreStats s = store.Stats();
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.leases, 0u);
  for (size_t t = 0; t < s.tiers.size(); ++t) {
    uint64_t physical = 0;
    for (const FormatMemoryStats& m : s.memory) {
      if (m.tier == s.tiers[t].name) physical += m.physical_bytes;
    }
    EXPECT_EQ(s.tiers[t].reserved_bytes, 0u);
    EXPECT_EQ(physical, s.tiers[t].used_bytes);
    EXPECT_LE(s.tiers[t].used_bytes, s.tiers[t].capacity_bytes);
  }
  // Every checkpoint still indexed reads back exactly (full head range when committed).
  EXPECT_EQ(s.lookup_hits + s.lookup_misses, s.lookups);
  EXPECT_EQ(s.get_hits + s.get_misses, s.gets);
}

void VerifyEverything(CheckpointStore& store, Workload& w) {
  for (size_t k = 0; k < w.spaces().size(); ++k) {
    const Space& s = w.spaces()[k];
    for (int c = 0; c < kChains; ++c) {
      for (int d = 0; d < kDepth; ++d) {
        for (int h = 0; h < s.heads(); ++h) {
          absl::StatusOr<ReadLease> lease = store.Get(s.info.id, s.chains[c][d], {h, h + 1});
          if (lease.ok()) w.Verify(*lease, s, c, d);
        }
      }
    }
  }
}

StoreOptions StressOptions(EvictionPolicyKind policy) {
  StoreOptions o;
  o.eviction.policy = policy;
  o.eviction.half_life_accesses = 64;
  o.max_put_ttl = absl::Hours(48);
  o.reaper_interval = absl::Milliseconds(1);  // a real reaper thread, racing the workers
  return o;
}

void RunConcurrent(EvictionPolicyKind policy, int threads, int ops) {
  FakeClock clock;
  // 48 + 32 pages of different sizes against 144 keys of 1-3 pages: eviction never stops.
  auto store = MakeStore({{"gpu", 48 * 4096, 4096}, {"host", 32 * 8192, 8192}},
                         StressOptions(policy), &clock);
  Workload w(store.get(), &clock);
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done.load()) {
      clock.Advance(absl::Milliseconds(5));  // a short-lived put's 20 ms last 4 ticks
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  std::vector<std::thread> workers;
  std::latch start(threads);  // all workers begin together, so their operations overlap
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&w, &start, t, ops] {
      start.arrive_and_wait();
      w.Run(1234u + static_cast<uint32_t>(t), ops);
    });
  }
  for (std::thread& t : workers) t.join();
  done = true;
  ticker.join();

  clock.Advance(absl::Hours(49));  // past every deadline
  store->ReapExpiredPuts();
  ExpectQuiescent(*store);
  VerifyEverything(*store, w);
  EXPECT_EQ(w.mismatches(), 0) << "of " << w.verified() << " verified reads";
  // Progress, not a rate: refusals (conflicting TP ranges, memory held by leases and
  // reservations) depend on scheduling.
  EXPECT_GT(w.verified(), 500);
  const StoreStats s = store->Stats();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.spills, 0u);
  EXPECT_GT(s.promotions, 0u);
  EXPECT_GT(s.puts_committed, 0u);
  EXPECT_GT(s.puts_expired, 0u);
  EXPECT_GT(s.puts_aborted, 0u);
  EXPECT_GT(s.puts_rejected, 0u);
  std::printf(
      "%d threads x %d ops: %d reads verified; puts %lu committed, %lu refused, %lu "
      "expired; %lu evictions, %lu spills, %lu promotions\n",
      threads, ops, w.verified(), static_cast<unsigned long>(s.puts_committed),
      static_cast<unsigned long>(s.puts_refused), static_cast<unsigned long>(s.puts_expired),
      static_cast<unsigned long>(s.evictions), static_cast<unsigned long>(s.spills),
      static_cast<unsigned long>(s.promotions));
}

TEST(StressTest, EightThreadsStateAware) {
  RunConcurrent(EvictionPolicyKind::kStateAware, 8, 6000);
}

TEST(StressTest, EightThreadsLru) { RunConcurrent(EvictionPolicyKind::kLru, 8, 6000); }

// One thread, invariants after every operation.
TEST(StressTest, SequentialBudgetInvariantAfterEveryOp) {
  FakeClock clock;
  StoreOptions o = StressOptions(EvictionPolicyKind::kStateAware);
  o.reaper_interval = absl::ZeroDuration();
  auto store = MakeStore({{"gpu", 10 * 4096, 4096}, {"host", 6 * 8192, 8192}}, o, &clock);
  Workload w(store.get(), &clock);
  for (int round = 0; round < 400; ++round) {
    w.Run(99u + static_cast<uint32_t>(round), 10);
    w.CheckBudget();
    clock.Advance(absl::Milliseconds(7));
  }
  clock.Advance(absl::Hours(49));
  store->ReapExpiredPuts();
  ExpectQuiescent(*store);
  VerifyEverything(*store, w);
  EXPECT_EQ(w.mismatches(), 0);
}

}  // namespace
}  // namespace leapcache::core
