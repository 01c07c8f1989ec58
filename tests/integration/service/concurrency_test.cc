// Many clients, mixed operations, memory pressure: 32 clients (each its own connection) run
// 11,200 operations in total (lookups, compact and dense gets, compact, dense and
// tensor-parallel puts, deletes) over a key space four times what the memory budget holds, so
// eviction never stops. Every hit is checked byte for byte against what any put of that key
// stores (content is a pure function of the key); misses are allowed, wrong bytes never. At the
// end no put is pending, no lease is held and memory is within the budget.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr int kClients = 32;
constexpr int kOpsPerClient = 350;  // 11,200 in total
constexpr int kPrompts = 32;
constexpr int kBlocks = 8;        // 256 keys
constexpr int kSharedBlocks = 2;  // prompts share their first blocks in groups of 8
constexpr int64_t kBlockTokens = 16;

class ConcurrencyTest : public ServiceTest {
 protected:
  // 512 KiB in 4 KiB pages: a checkpoint (2 layers x 4 heads of 704-byte blobs) takes 2 pages,
  // so 64 fit; the key space is 4x that.
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=512KiB", "--page-bytes=4KiB", "--put-ttl=5s",
            "--reaper-interval=100ms"};
  }
};

// What any put of a key stores: states and blobs derived from the key's position in the space.
struct Key {
  client::BlockHash hash;
  int prompt = 0;
  int block = 0;  // chain index
  std::vector<float> states;
  std::vector<uint8_t> blobs;
};

struct Tally {
  std::atomic<uint64_t> verified{0};  // hits whose bytes were checked
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> puts{0};
  std::atomic<uint64_t> refused{0};  // puts refused for a documented reason
  std::atomic<uint64_t> failures{0};
  std::mutex mu;
  std::vector<std::string> messages;
  void Fail(std::string m) {
    ++failures;
    std::lock_guard<std::mutex> lock(mu);
    if (messages.size() < 20) messages.push_back(std::move(m));
  }
};

TEST_F(ConcurrencyTest, ManyClientsMixedOperationsUnderMemoryPressure) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-stress");
  const client::NamespaceInfo ns = Register(spec);
  ASSERT_EQ(ns.blob_bytes, 704u);

  // The key space: kPrompts chains of kBlocks blocks; the checkpoint of (prompt, block) is a
  // function of its hash, so shared-prefix keys have one content whoever puts them.
  std::vector<std::vector<client::BlockHash>> chains(kPrompts);
  std::map<client::BlockHash, size_t> index;
  std::vector<Key> keys;
  for (int p = 0; p < kPrompts; ++p) {
    std::vector<uint32_t> tokens(kBlocks * kBlockTokens);
    for (size_t t = 0; t < tokens.size(); ++t) {
      const int owner = static_cast<int>(t / kBlockTokens) < kSharedBlocks ? p / 8 : 100 + p;
      tokens[t] = static_cast<uint32_t>(owner * 100000 + t);
    }
    chains[p] = *client::ChainHashes(tokens, kBlockTokens);
    for (int b = 0; b < kBlocks; ++b) {
      if (index.count(chains[p][b]) > 0) continue;
      Key k;
      k.hash = chains[p][b];
      k.prompt = p;
      k.block = b;
      uint64_t seed = 0;
      std::memcpy(&seed, k.hash.data(), sizeof(seed));
      k.states = MakeStates(spec, seed);
      k.blobs = EncodeBlobs(spec, k.states);
      index[k.hash] = keys.size();
      keys.push_back(std::move(k));
    }
  }

  Tally tally;
  auto check_bytes = [&](const Key& k, const client::Checkpoint& got, const std::string& what) {
    if (got.bytes != k.blobs) {
      tally.Fail(absl::StrCat(what, ": wrong bytes for key ", client::HashToHex(k.hash)));
    } else {
      ++tally.verified;
    }
  };
  auto target = [&](const Key& k, client::HeadRange heads = {}) {
    return client::PutTarget{
        ns.id, k.hash, {(k.block + 1) * kBlockTokens, k.block + 1}, heads, absl::ZeroDuration()};
  };
  // Puts may lose to another writer or find no memory; nothing else is acceptable.
  auto check_put = [&](const absl::Status& st, const char* what) {
    if (st.ok()) {
      ++tally.puts;
    } else if (absl::IsAlreadyExists(st) || absl::IsFailedPrecondition(st) ||
               absl::IsResourceExhausted(st)) {
      ++tally.refused;
    } else {
      tally.Fail(absl::StrCat(what, ": ", st.ToString()));
    }
  };

  auto worker = [&](int id) {
    std::unique_ptr<client::Client> c = Connect();
    if (c == nullptr) {
      tally.Fail("cannot connect");
      return;
    }
    std::mt19937 rng(static_cast<uint32_t>(id) * 7919u + 1);
    std::uniform_int_distribution<int> pct(0, 99);
    auto pick = [&] { return std::uniform_int_distribution<size_t>(0, keys.size() - 1)(rng); };
    for (int op = 0; op < kOpsPerClient; ++op) {
      const int roll = pct(rng);
      const Key& k = keys[pick()];
      if (roll < 28) {  // lookup along a prompt, then read the hit
        const int p = std::uniform_int_distribution<int>(0, kPrompts - 1)(rng);
        const int cap = std::uniform_int_distribution<int>(0, kBlocks)(rng);
        absl::StatusOr<client::LookupResult> r =
            c->Lookup({ns.id, chains[p], {}, cap, kBlockTokens});
        if (!r.ok()) {
          tally.Fail(absl::StrCat("lookup: ", r.status().ToString()));
          continue;
        }
        if (!r->hit) {
          ++tally.misses;
          continue;
        }
        if (r->position.blocks != r->index + 1 ||
            r->position.tokens != (r->index + 1) * kBlockTokens || (cap > 0 && r->index >= cap)) {
          tally.Fail(absl::StrCat("lookup: hit at index ", r->index, " with position ",
                                  r->position.blocks, " blocks, cap ", cap));
          continue;
        }
        const Key& hit = keys[index.at(chains[p][r->index])];
        absl::StatusOr<client::Checkpoint> got = c->Get({ns.id, hit.hash, {}, std::nullopt});
        if (got.ok()) {
          check_bytes(hit, *got, "get after lookup");
        } else if (absl::IsNotFound(got.status())) {
          ++tally.misses;  // evicted between the two calls
        } else {
          tally.Fail(absl::StrCat("get: ", got.status().ToString()));
        }
      } else if (roll < 50) {  // compact get
        absl::StatusOr<client::Checkpoint> got = c->Get({ns.id, k.hash, {}, std::nullopt});
        if (got.ok()) {
          check_bytes(k, *got, "compact get");
          if (got->position.blocks != k.block + 1) tally.Fail("get: wrong position");
        } else if (absl::IsNotFound(got.status())) {
          ++tally.misses;
        } else {
          tally.Fail(absl::StrCat("get: ", got.status().ToString()));
        }
      } else if (roll < 60) {  // dense get of some heads
        const int h0 = std::uniform_int_distribution<int>(0, 3)(rng);
        const int h1 = std::uniform_int_distribution<int>(h0 + 1, 4)(rng);
        const client::Layout layout = pct(rng) < 50 ? client::Layout::kKV : client::Layout::kVK;
        absl::StatusOr<client::Checkpoint> got =
            c->Get({ns.id, k.hash, {h0, h1}, client::DenseEncoding{client::DType::kFp32, layout}});
        if (got.ok()) {
          const std::vector<float> expected =
              DecodeBlobs(spec, EncodeBlobs(spec, SliceHeads(spec, k.states, h0, h1)), layout);
          if (FloatsOf(got->bytes) != expected) {
            tally.Fail(absl::StrCat("dense get: wrong states for ", client::HashToHex(k.hash)));
          } else {
            ++tally.verified;
          }
        } else if (absl::IsNotFound(got.status())) {
          ++tally.misses;
        } else {
          tally.Fail(absl::StrCat("dense get: ", got.status().ToString()));
        }
      } else if (roll < 82) {  // compact put
        check_put(c->PutCompact(target(k), k.blobs), "compact put");
      } else if (roll < 91) {  // dense put: the server's encoding must equal the local one
        check_put(
            c->PutDense(target(k), {client::DType::kFp32, client::Layout::kKV}, AsBytes(k.states)),
            "dense put");
      } else if (roll < 96) {  // two tensor-parallel ranks' halves
        check_put(
            c->PutCompact(target(k, {0, 2}), EncodeBlobs(spec, SliceHeads(spec, k.states, 0, 2))),
            "tp put");
        check_put(
            c->PutCompact(target(k, {2, 4}), EncodeBlobs(spec, SliceHeads(spec, k.states, 2, 4))),
            "tp put");
      } else {  // delete
        const absl::Status st = c->Delete(ns.id, k.hash);
        if (!st.ok() && !absl::IsNotFound(st)) tally.Fail(absl::StrCat("delete: ", st.ToString()));
      }
    }
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) threads.emplace_back(worker, i);
  for (std::thread& t : threads) t.join();

  for (const std::string& m : tally.messages) ADD_FAILURE() << m;
  EXPECT_EQ(tally.failures.load(), 0u);
  EXPECT_GT(tally.verified.load(), 1000u);
  EXPECT_GT(tally.puts.load(), 1000u);
  const client::ServerStats s = Stats();
  EXPECT_GT(s.evictions, 0u) << "the test must run under memory pressure";
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.leases, 0u);
  ASSERT_EQ(s.tiers.size(), 1u);
  EXPECT_LE(s.tiers[0].used_bytes, s.tiers[0].capacity_bytes);
  EXPECT_EQ(s.tiers[0].reserved_bytes, 0u);
  std::printf("verified hits %llu, misses %llu, puts %llu, refused puts %llu, evictions %llu\n",
              static_cast<unsigned long long>(tally.verified.load()),
              static_cast<unsigned long long>(tally.misses.load()),
              static_cast<unsigned long long>(tally.puts.load()),
              static_cast<unsigned long long>(tally.refused.load()),
              static_cast<unsigned long long>(s.evictions));
}

}  // namespace
}  // namespace leapcache::testing
