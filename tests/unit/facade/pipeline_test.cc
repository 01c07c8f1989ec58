// The wire side of puts and gets without gRPC: PutPipeline (compact pass-through, dense encoding
// in order with checksums, expiry of its bookkeeping) and CheckpointReader (chunks of any size,
// compact and dense, a decoder's batches, leases released) over a real CheckpointStore on a host
// tier.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gpu/format/crc32c.h"
#include "gpu/format/half.h"
#include "gpu/reference/codec.h"
#include "service/core/host_tier.h"
#include "service/facade/checkpoint_reader.h"
#include "service/facade/put_pipeline.h"

namespace leapcache::server {
namespace {

constexpr int kLayers = 2, kHeads = 4, kD = 16;

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::unique_ptr<core::MemoryTier>> tiers;
    tiers.push_back(*core::HostTier::Create("host", 1 << 20, 4096));
    core::StoreOptions options;
    options.reaper_interval = absl::ZeroDuration();
    store_ = *core::CheckpointStore::Create(options, std::move(tiers), &clock_);
    core::NamespaceSpec spec;
    spec.tenant = "t";
    spec.model = {kLayers, kHeads, kD, kD, StateKind::kGdn};
    spec.format = BlobSpec::Leap(StateKind::kGdn, 8, kD, kD);
    ns_ = *store_->GetNamespace(*store_->RegisterNamespace(spec));
    puts_ = std::make_unique<PutPipeline>(store_.get(), clock_);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    states_.resize(static_cast<size_t>(kLayers) * kHeads * kD * kD);
    for (float& x : states_) x = normal(rng);
  }

  core::PutRequest Request(uint8_t key) const {
    core::PutRequest r;
    r.ns = ns_.id;
    r.hash[0] = key;
    r.position = {16, 1};
    r.heads = {0, kHeads};
    return r;
  }

  std::span<const uint8_t> Bytes() const {
    return {reinterpret_cast<const uint8_t*>(states_.data()), states_.size() * 4};
  }

  std::vector<uint8_t> ReferenceBlobs() const {
    std::vector<uint8_t> out;
    for (size_t s = 0; s < states_.size() / (kD * kD); ++s) {
      std::vector<uint8_t> b =
          *reference::Encode(ns_.spec.format, states_.data() + s * kD * kD, Orientation::kKV);
      out.insert(out.end(), b.begin(), b.end());
    }
    return out;
  }

  // Everything a reader yields, read `chunk` bytes at a time.
  std::vector<uint8_t> ReadAll(uint8_t key, std::optional<compute::DenseFormat> dense, size_t chunk,
                               core::HeadRange heads = {0, kHeads}) {
    ReadRequest r{ns_.id, {}, heads, dense};
    r.hash[0] = key;
    absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(*store_, r);
    EXPECT_TRUE(reader.ok()) << reader.status();
    if (!reader.ok()) return {};
    std::vector<uint8_t> out((*reader)->shape().total_bytes);
    size_t at = 0;
    while (!(*reader)->done()) {
      const size_t n = std::min(chunk, out.size() - at);
      absl::StatusOr<size_t> got = (*reader)->Read(std::span(out).subspan(at, n));
      EXPECT_TRUE(got.ok());
      EXPECT_EQ(*got, n);
      at += n;
    }
    EXPECT_EQ((*reader)->crc32c(), Crc32c(out.data(), out.size()));
    EXPECT_EQ(store_->Stats().leases, 1u);
    return out;
  }

  core::FakeClock clock_;
  std::unique_ptr<core::CheckpointStore> store_;
  core::NamespaceInfo ns_;
  std::unique_ptr<PutPipeline> puts_;
  std::vector<float> states_;
};

TEST_F(PipelineTest, DensePutStoresWhatTheReferenceEncodes) {
  const compute::DenseFormat f{DType::kFp32, Orientation::kKV};
  absl::StatusOr<PutTicket> t = puts_->Reserve(Request(1), f);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->state_bytes, kD * kD * 4u);
  EXPECT_EQ(t->expected_bytes, Bytes().size());
  EXPECT_EQ(puts_->dense_puts(), 1u);
  // Three chunks of whole states, in order.
  const size_t s = t->state_bytes;
  ASSERT_TRUE(puts_->Upload(t->id, 0, Bytes().first(3 * s)).ok());
  ASSERT_TRUE(puts_->Upload(t->id, 3 * s, Bytes().subspan(3 * s, 4 * s)).ok());
  ASSERT_TRUE(puts_->Upload(t->id, 7 * s, Bytes().subspan(7 * s)).ok());
  ASSERT_TRUE(puts_->Commit(t->id, Crc32c(Bytes().data(), Bytes().size())).ok());
  EXPECT_EQ(puts_->dense_puts(), 0u);
  EXPECT_EQ(ReadAll(1, std::nullopt, 1 << 20), ReferenceBlobs());
}

TEST_F(PipelineTest, DenseUploadRulesAndRestart) {
  const compute::DenseFormat f{DType::kFp32, Orientation::kKV};
  absl::StatusOr<PutTicket> t = puts_->Reserve(Request(2), f);
  ASSERT_TRUE(t.ok());
  const size_t s = t->state_bytes;
  EXPECT_EQ(puts_->Upload(t->id, 0, Bytes().first(s - 4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(puts_->Upload(t->id, s, Bytes().first(s)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(puts_->Upload(t->id, 0, Bytes().first(2 * s)).ok());
  EXPECT_EQ(puts_->Commit(t->id, 0).code(), absl::StatusCode::kFailedPrecondition);
  // Restart from 0 with different data, then finish: the checksum is of the restarted bytes.
  std::vector<float> zeros(states_.size(), 0.0f);
  ASSERT_TRUE(
      puts_->Upload(t->id, 0, {reinterpret_cast<const uint8_t*>(zeros.data()), 2 * s}).ok());
  ASSERT_TRUE(puts_->Upload(t->id, 2 * s, Bytes().subspan(2 * s)).ok());
  std::vector<uint8_t> sent(Bytes().begin(), Bytes().end());
  std::memset(sent.data(), 0, 2 * s);
  EXPECT_EQ(puts_->Commit(t->id, Crc32c(Bytes().data(), Bytes().size())).code(),
            absl::StatusCode::kDataLoss);
  ASSERT_TRUE(puts_->Commit(t->id, Crc32c(sent.data(), sent.size())).ok());
}

TEST_F(PipelineTest, DenseUnitsWithSideStatesAreSplitForTheEncoderAndJoinedForTheReader) {
  core::NamespaceSpec spec = ns_.spec;
  spec.model.conv = {kHeads * 8, 3, DType::kFp32};  // 8 channels x 3 per head
  spec.model.extra_bytes = 4;
  const core::NamespaceInfo ns = *store_->GetNamespace(*store_->RegisterNamespace(spec));
  const size_t side = 8 * 3 * 4 + 4;
  ASSERT_EQ(ns.side_bytes, side);
  const size_t state = kD * kD * 4, units = kLayers * kHeads;
  std::vector<uint8_t> sides(units * side);
  for (size_t i = 0; i < sides.size(); ++i) sides[i] = static_cast<uint8_t>(i % 251 & 0x3f);
  std::vector<uint8_t> dense;  // units: each state, then its side state
  for (size_t u = 0; u < units; ++u) {
    dense.insert(dense.end(), Bytes().begin() + u * state, Bytes().begin() + (u + 1) * state);
    dense.insert(dense.end(), sides.begin() + u * side, sides.begin() + (u + 1) * side);
  }
  core::PutRequest r = Request(20);
  r.ns = ns.id;
  const compute::DenseFormat f{DType::kFp32, Orientation::kKV};
  absl::StatusOr<PutTicket> t = puts_->Reserve(r, f);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->unit_bytes, state + side);
  EXPECT_EQ(t->expected_bytes, dense.size());
  // A chunk of a bare state (no side state) is not a whole unit.
  const absl::Status bare = puts_->Upload(t->id, 0, Bytes().first(state));
  EXPECT_EQ(bare.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bare.message().find("whole units"), std::string::npos) << bare;
  ASSERT_TRUE(puts_->Upload(t->id, 0, std::span(dense).first(3 * (state + side))).ok());
  ASSERT_TRUE(puts_->Upload(t->id, 3 * (state + side),
                            std::span(dense).subspan(3 * (state + side))).ok());
  ASSERT_TRUE(puts_->Commit(t->id, Crc32c(dense.data(), dense.size())).ok());
  // Stored: the reference's blobs, each followed by its side state as sent.
  ReadRequest read{ns.id, r.hash, {0, kHeads}, std::nullopt};
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(*store_, read);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<uint8_t> stored((*reader)->shape().total_bytes);
  ASSERT_EQ(*(*reader)->Read(stored), stored.size());
  const std::vector<uint8_t> blobs = ReferenceBlobs();
  const size_t blob = ns.blob_bytes;
  for (size_t u = 0; u < units; ++u) {
    EXPECT_EQ(std::memcmp(stored.data() + u * (blob + side), blobs.data() + u * blob, blob), 0);
    EXPECT_EQ(std::memcmp(stored.data() + u * (blob + side) + blob, sides.data() + u * side,
                          side),
              0);
  }
  // Decoded: the fp32 states the reference decodes, each followed by its side state, in
  // chunks that split units anywhere.
  read.dense = f;
  reader = CheckpointReader::Open(*store_, read);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->shape().unit_bytes, state + side);
  std::vector<uint8_t> decoded((*reader)->shape().total_bytes);
  for (size_t at = 0; at < decoded.size();) {
    const size_t n = std::min<size_t>(997, decoded.size() - at);
    at += *(*reader)->Read(std::span(decoded).subspan(at, n));
  }
  for (size_t u = 0; u < units; ++u) {
    std::vector<float> want(kD * kD);
    ASSERT_TRUE(reference::Decode(std::span(blobs).subspan(u * blob, blob), want.data(),
                                  Orientation::kKV).ok());
    EXPECT_EQ(std::memcmp(decoded.data() + u * (state + side), want.data(), state), 0) << u;
    EXPECT_EQ(std::memcmp(decoded.data() + u * (state + side) + state, sides.data() + u * side,
                          side),
              0)
        << u;
  }
}

TEST_F(PipelineTest, NonFiniteStatesStoreNothing) {
  absl::StatusOr<PutTicket> t = puts_->Reserve(Request(3), compute::DenseFormat{});
  ASSERT_TRUE(t.ok());
  std::vector<float> bad = states_;
  bad[5 * kD * kD + 3] = NAN;
  absl::Status st =
      puts_->Upload(t->id, 0, {reinterpret_cast<const uint8_t*>(bad.data()), bad.size() * 4});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layer 1 head 1"), absl::string_view::npos) << st;
  // Nothing was accepted: the put still starts at 0.
  EXPECT_EQ(puts_->Upload(t->id, t->state_bytes, Bytes().first(t->state_bytes)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(puts_->Abort(t->id).ok());
  EXPECT_EQ(puts_->dense_puts(), 0u);
}

TEST_F(PipelineTest, Bf16VkInputAndExpiry) {
  const compute::DenseFormat f{DType::kBf16, Orientation::kVK};
  absl::StatusOr<PutTicket> t = puts_->Reserve(Request(4), f);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state_bytes, kD * kD * 2u);
  std::vector<uint8_t> bf16(states_.size() * 2);
  for (size_t i = 0; i < states_.size(); ++i)
    StoreU16(bf16.data() + 2 * i, FloatToBf16(states_[i]));
  ASSERT_TRUE(puts_->Upload(t->id, 0, bf16).ok());
  // Past the deadline: the core refuses the commit and the bookkeeping goes with it.
  clock_.Advance(t->ttl + absl::Seconds(1));
  EXPECT_EQ(puts_->Commit(t->id, Crc32c(bf16.data(), bf16.size())).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(puts_->dense_puts(), 0u);
  // An expired dense put nobody touches again is forgotten at the next reservation.
  ASSERT_TRUE(puts_->Reserve(Request(5), f).ok());
  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(puts_->Reserve(Request(6), std::nullopt).ok());
  EXPECT_EQ(puts_->dense_puts(), 0u);
}

TEST_F(PipelineTest, CompactPutsPassThrough) {
  const std::vector<uint8_t> blobs = ReferenceBlobs();
  absl::StatusOr<PutTicket> t = puts_->Reserve(Request(7), std::nullopt);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state_bytes, 0u);
  EXPECT_EQ(t->expected_bytes, blobs.size());
  ASSERT_TRUE(puts_->Upload(t->id, 100, std::span(blobs).subspan(100)).ok());
  ASSERT_TRUE(puts_->Upload(t->id, 0, std::span(blobs).first(100)).ok());
  ASSERT_TRUE(puts_->Commit(t->id, Crc32c(blobs.data(), blobs.size())).ok());
  EXPECT_EQ(puts_->dense_puts(), 0u);
}

TEST_F(PipelineTest, ReaderChunksSplitBlobsAndStatesAnywhere) {
  const std::vector<uint8_t> blobs = ReferenceBlobs();
  absl::StatusOr<PutTicket> t = puts_->Reserve(Request(8), std::nullopt);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(puts_->Upload(t->id, 0, blobs).ok());
  ASSERT_TRUE(puts_->Commit(t->id, Crc32c(blobs.data(), blobs.size())).ok());
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{1000}, ns_.blob_bytes, size_t{1} << 20}) {
    EXPECT_EQ(ReadAll(8, std::nullopt, chunk), blobs) << chunk;
  }
  EXPECT_EQ(store_->Stats().leases, 0u);  // readers gone, leases released

  // Dense: fp32 [V,K] of heads 1..2 equals the reference decode, in any chunking.
  std::vector<uint8_t> expected;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 1; h < 3; ++h) {
      const size_t b = static_cast<size_t>(l) * kHeads + h;
      std::vector<float> s(kD * kD);
      ASSERT_TRUE(reference::Decode(std::span(blobs).subspan(b * ns_.blob_bytes, ns_.blob_bytes),
                                    s.data(), Orientation::kVK)
                      .ok());
      const auto* p = reinterpret_cast<const uint8_t*>(s.data());
      expected.insert(expected.end(), p, p + s.size() * 4);
    }
  }
  for (size_t chunk : {size_t{3}, size_t{1024}, size_t{1} << 20}) {
    EXPECT_EQ(ReadAll(8, compute::DenseFormat{DType::kFp32, Orientation::kVK}, chunk, {1, 3}),
              expected);
  }
  // A head range that is not committed is NOT_FOUND.
  ReadRequest missing{ns_.id, {}, {0, kHeads}, std::nullopt};
  missing.hash[0] = 99;
  EXPECT_EQ(CheckpointReader::Open(*store_, missing).status().code(), absl::StatusCode::kNotFound);
}

// A compute backend decoding `batch` states per call (the CPU reference underneath), recording
// every decode call, so that the reader's batching runs without a GPU.
class BatchingDecoder final : public compute::Compute {
 public:
  explicit BatchingDecoder(size_t batch) : batch_(batch) {}
  const char* name() const override { return "cpu"; }
  bool takes_device_memory() const override { return false; }
  const char* EncoderFor(const BlobSpec&) const override { return "cpu"; }
  absl::Status Encode(const BlobSpec& spec, const compute::DenseFormat& format,
                      compute::ConstBytes states, absl::FunctionRef<std::string(size_t)> describe,
                      std::vector<std::vector<uint8_t>>* blobs) override {
    return compute::CpuCompute().Encode(spec, format, states, describe, blobs);
  }
  const char* DecoderFor(const BlobSpec&) const override { return "cpu"; }
  size_t DecodeBatch(const BlobSpec&) const override { return batch_; }
  absl::Status Decode(const BlobSpec& spec, const compute::DenseFormat& format, size_t n,
                      absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                      absl::FunctionRef<std::string(size_t)> describe,
                      compute::MutableBytes out) override {
    EXPECT_LE(n, batch_);
    std::vector<std::string> names;
    for (size_t i = 0; i < n; ++i) names.push_back(describe(i));
    calls.push_back(names);
    return compute::CpuCompute().Decode(spec, format, n, blob, describe, out);
  }
  absl::StatusOr<std::unique_ptr<compute::LiveStates>> OpenLiveStates(
      const compute::DecodeShape& shape) override {
    return compute::CpuCompute().OpenLiveStates(shape);
  }
  std::vector<std::vector<std::string>> calls;

 private:
  const size_t batch_;
};

TEST_F(PipelineTest, ReaderDecodesInTheDecodersBatches) {
  const std::vector<uint8_t> blobs = ReferenceBlobs();
  absl::StatusOr<PutTicket> t = puts_->Reserve(Request(9), std::nullopt);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(puts_->Upload(t->id, 0, blobs).ok());
  ASSERT_TRUE(puts_->Commit(t->id, Crc32c(blobs.data(), blobs.size())).ok());
  const compute::DenseFormat bf16{DType::kBf16, Orientation::kKV};
  const std::vector<uint8_t> one_by_one = ReadAll(9, bf16, 1000);
  for (size_t chunk : {size_t{5}, size_t{1} << 20}) {
    BatchingDecoder decoder(3);
    ReadRequest r{ns_.id, {}, {0, kHeads}, bf16};
    r.hash[0] = 9;
    absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
        CheckpointReader::Open(*store_, r, &decoder);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<uint8_t> out((*reader)->shape().total_bytes);
    for (size_t at = 0; !(*reader)->done();) {
      absl::StatusOr<size_t> got =
          (*reader)->Read(std::span(out).subspan(at, std::min(chunk, out.size() - at)));
      ASSERT_TRUE(got.ok()) << got.status();
      at += *got;
    }
    EXPECT_EQ(out, one_by_one) << chunk;
    // 8 states in (layer, head) order: batches of 3, 3 and the last 2, each state named right.
    const std::vector<std::vector<std::string>> want = {
        {"stored blob of layer 0 head 0", "stored blob of layer 0 head 1",
         "stored blob of layer 0 head 2"},
        {"stored blob of layer 0 head 3", "stored blob of layer 1 head 0",
         "stored blob of layer 1 head 1"},
        {"stored blob of layer 1 head 2", "stored blob of layer 1 head 3"}};
    EXPECT_EQ(decoder.calls, want) << chunk;
  }
  EXPECT_EQ(store_->Stats().leases, 0u);
}

// Host memory presented as device memory of CUDA device 0: not host-addressable, but with
// "device addresses" this test can read, so that the reader's device path runs without a GPU.
class DeviceLikeTier final : public core::MemoryTier {
 public:
  explicit DeviceLikeTier(std::unique_ptr<core::HostTier> memory) : memory_(std::move(memory)) {}
  const std::string& name() const override { return memory_->name(); }
  size_t page_bytes() const override { return memory_->page_bytes(); }
  size_t capacity_pages() const override { return memory_->capacity_pages(); }
  size_t used_pages() const override { return memory_->used_pages(); }
  absl::Status Allocate(size_t n, std::vector<core::PageId>* pages) override {
    return memory_->Allocate(n, pages);
  }
  void Free(std::span<const core::PageId> pages) override { memory_->Free(pages); }
  absl::Status CopyIn(core::PageId page, size_t offset, std::span<const uint8_t> src) override {
    ++copies_in;
    return memory_->CopyIn(page, offset, src);
  }
  absl::Status CopyOut(core::PageId page, size_t offset, std::span<uint8_t> dst) const override {
    ++copies_out;
    return memory_->CopyOut(page, offset, dst);
  }
  uint8_t* HostAddress(core::PageId) const override { return nullptr; }
  int cuda_device() const override { return 0; }
  const uint8_t* DeviceAddress(core::PageId page) const override {
    return memory_->HostAddress(page);
  }
  mutable int copies_in = 0, copies_out = 0;

 private:
  std::unique_ptr<core::HostTier> memory_;
};

TEST_F(PipelineTest, CompactReadsOfDeviceMemoryHandOutTheBlobsInPlace) {
  // The host tier of the fixture: nothing on a device, the reader streams as before.
  const std::vector<uint8_t> blobs = ReferenceBlobs();
  absl::StatusOr<PutTicket> t = puts_->Reserve(Request(5), std::nullopt);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(puts_->Upload(t->id, 0, blobs).ok());
  ASSERT_TRUE(puts_->Commit(t->id, Crc32c(blobs.data(), blobs.size())).ok());
  ReadRequest r{ns_.id, {}, {1, 3}, std::nullopt};
  r.hash[0] = 5;
  auto host_reader = std::move(CheckpointReader::Open(*store_, r)).value();
  EXPECT_TRUE(host_reader->TakeDeviceUnits(0).empty());
  EXPECT_FALSE(host_reader->done());
  host_reader.reset();

  // A store whose only tier is "device 0".
  std::vector<std::unique_ptr<core::MemoryTier>> tiers;
  tiers.push_back(std::make_unique<DeviceLikeTier>(*core::HostTier::Create("gpu", 1 << 20, 4096)));
  core::StoreOptions options;
  options.reaper_interval = absl::ZeroDuration();
  auto store = std::move(core::CheckpointStore::Create(options, std::move(tiers), &clock_)).value();
  core::NamespaceSpec spec;
  spec.tenant = "t";
  spec.model = {kLayers, kHeads, kD, kD, StateKind::kGdn};
  spec.format = ns_.spec.format;
  const core::NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(spec));
  PutPipeline puts(store.get(), clock_);
  core::PutRequest put = Request(5);
  put.ns = ns.id;
  t = puts.Reserve(put, std::nullopt);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(puts.Upload(t->id, 0, blobs).ok());
  ASSERT_TRUE(puts.Commit(t->id, Crc32c(blobs.data(), blobs.size())).ok());

  r.ns = ns.id;
  auto reader = std::move(CheckpointReader::Open(*store, r)).value();
  EXPECT_TRUE(reader->TakeDeviceUnits(1).empty()) << "another device";
  const std::vector<const uint8_t*> on_device = reader->TakeDeviceUnits(0);
  ASSERT_EQ(on_device.size(), size_t{kLayers} * 2);
  EXPECT_TRUE(reader->done());
  // Heads 1..2 of each layer, in place, and the CRC folded from the recorded ones equals the
  // CRC of those bytes in order.
  std::vector<uint8_t> want, got;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 1; h < 3; ++h) {
      const size_t b = (static_cast<size_t>(l) * kHeads + h) * ns.blob_bytes;
      want.insert(want.end(), blobs.begin() + b, blobs.begin() + b + ns.blob_bytes);
    }
  }
  for (const uint8_t* p : on_device) got.insert(got.end(), p, p + ns.blob_bytes);
  EXPECT_EQ(got, want);
  EXPECT_EQ(reader->crc32c(), Crc32c(want.data(), want.size()));
  EXPECT_EQ(store->Stats().leases, 1u) << "the lease lives with the reader";
  // A dense read of device memory decodes as before.
  reader =
      std::move(CheckpointReader::Open(
                    *store,
                    {ns.id, r.hash, {1, 3}, compute::DenseFormat{DType::kFp32, Orientation::kKV}}))
          .value();
  EXPECT_TRUE(reader->TakeDeviceUnits(0).empty());
  reader.reset();
  EXPECT_EQ(store->Stats().leases, 0u);
}

TEST(DeviceMemoryPutTest, PutsAndReadsCopyWholePageRunsOfBlobs) {
  // 128 x 128 8-bit blobs fill their 64-byte slots exactly, so a page's blobs are one run: a
  // put into memory where each copy has a fixed cost (a device) copies a run at a time, in
  // both its upload and its commit's check, not a blob at a time.
  core::FakeClock clock;
  std::vector<std::unique_ptr<core::MemoryTier>> tiers;
  auto tier = std::make_unique<DeviceLikeTier>(*core::HostTier::Create("gpu", 1 << 20, 65536));
  DeviceLikeTier* const device = tier.get();
  tiers.push_back(std::move(tier));
  core::StoreOptions options;
  options.reaper_interval = absl::ZeroDuration();
  auto store = std::move(core::CheckpointStore::Create(options, std::move(tiers), &clock)).value();
  core::NamespaceSpec spec;
  spec.tenant = "t";
  spec.model = {2, 4, 128, 128, StateKind::kGdn};
  spec.format = BlobSpec::Leap(StateKind::kGdn, 8);
  const core::NamespaceInfo ns = *store->GetNamespace(*store->RegisterNamespace(spec));
  ASSERT_EQ(ns.slot_bytes, ns.blob_bytes);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> state(128 * 128);
  std::vector<uint8_t> blobs;
  for (int i = 0; i < 8; ++i) {
    for (float& x : state) x = normal(rng);
    std::vector<uint8_t> b = *reference::Encode(spec.format, state.data(), Orientation::kKV);
    blobs.insert(blobs.end(), b.begin(), b.end());
  }
  PutPipeline puts(store.get(), clock);
  core::PutRequest put;
  put.ns = ns.id;
  put.hash[0] = 1;
  put.position = {16, 1};
  put.heads = {0, 4};
  absl::StatusOr<PutTicket> t = puts.Reserve(put, std::nullopt);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(puts.Upload(t->id, 0, blobs).ok());
  const int blobs_per_page = 65536 / static_cast<int>(ns.slot_bytes);  // 3
  const int pages = (8 + blobs_per_page - 1) / blobs_per_page;
  EXPECT_EQ(device->copies_in, pages);
  ASSERT_TRUE(puts.Commit(t->id, Crc32c(blobs.data(), blobs.size())).ok());
  EXPECT_EQ(device->copies_out, pages) << "the check reads each run once";
  // What was stored is what was put, wherever the runs were cut, and a read copies it out a
  // run at a time too.
  ReadRequest r{ns.id, put.hash, {0, 4}, std::nullopt};
  auto reader = std::move(CheckpointReader::Open(*store, r)).value();
  std::vector<uint8_t> got(blobs.size());
  ASSERT_EQ(*reader->Read(got), got.size());
  EXPECT_EQ(got, blobs);
  EXPECT_EQ(device->copies_out, 2 * pages);
}

}  // namespace
}  // namespace leapcache::server
