// Put -> lookup -> get through the real server: compact blobs come back byte-exact, dense states
// come back as the CPU reference codec decodes them (bit-exact against a local decode) and within
// the codec's error of what was put, for every dtype and layout, whole and by head range; GetInto
// writes the same bytes into the caller's buffer, or nothing when it is not the checkpoint's size.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <thread>

#include "gpu/format/crc32c.h"
#include "leapcache/v1/state_cache.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

using client::DenseEncoding;
using client::DType;
using client::Layout;

class RoundTripTest : public ServiceTest {};

client::PutTarget Target(uint32_t ns, const client::BlockHash& hash, int64_t blocks,
                         client::HeadRange heads = {}) {
  return client::PutTarget{ns, hash, {blocks * 16, blocks}, heads, absl::ZeroDuration()};
}

TEST_F(RoundTripTest, CompactBlobsComeBackByteExact) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-a");
  const client::NamespaceInfo ns = Register(spec);
  ASSERT_EQ(ns.blob_bytes, ComputeLayout(ToBlobSpec(spec)).blob_bytes());
  EXPECT_EQ(ns.fingerprint.size(), 64u);
  EXPECT_EQ(ns.format_label, "leap8");

  const std::vector<float> states = MakeStates(spec, 1);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  const std::vector<uint32_t> tokens(64, 7);
  absl::StatusOr<std::vector<client::BlockHash>> chain = client::ChainHashes(tokens, 16);
  ASSERT_TRUE(chain.ok());
  ASSERT_EQ(chain->size(), 4u);
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, (*chain)[2], 3), blobs).ok());

  absl::StatusOr<client::LookupResult> hit = client_->Lookup({ns.id, *chain, {}, 0, 16});
  ASSERT_TRUE(hit.ok()) << hit.status();
  ASSERT_TRUE(hit->hit);
  EXPECT_EQ(hit->index, 2);
  EXPECT_EQ(hit->position.blocks, 3);
  EXPECT_EQ(hit->position.tokens, 48);

  absl::StatusOr<client::Checkpoint> got = client_->Get({ns.id, (*chain)[hit->index], {}, {}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes, blobs);
  EXPECT_EQ(got->layers, 2);
  EXPECT_EQ(got->heads.begin, 0);
  EXPECT_EQ(got->heads.end, 4);
  EXPECT_EQ(got->blob_bytes, ns.blob_bytes);
  EXPECT_EQ(got->position.blocks, 3);
  EXPECT_FALSE(got->dense.has_value());

  // A head range of it: the blobs of those heads, in (layer, head) order.
  absl::StatusOr<client::Checkpoint> part =
      client_->Get({ns.id, (*chain)[2], {1, 3}, std::nullopt});
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->bytes, EncodeBlobs(spec, SliceHeads(spec, states, 1, 3)));
}

TEST_F(RoundTripTest, LargeCheckpointMovesInManyChunks) {
  // 8 layers x 8 heads of 128 x 128 at 8 bits: 64 blobs of 19,520 B, 1.2 MiB, with 64 KiB
  // chunks both ways.
  client::ClientOptions options;
  options.chunk_bytes = 64 << 10;
  std::unique_ptr<client::Client> c = Connect(options);
  const client::NamespaceSpec spec = SmallNamespace("tenant-big", 8, 8, 128);
  absl::StatusOr<client::NamespaceInfo> ns = c->RegisterNamespace(spec);
  ASSERT_TRUE(ns.ok()) << ns.status();
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 9));
  ASSERT_EQ(blobs.size(), 64u * 19520u);
  ASSERT_TRUE(c->PutCompact(Target(ns->id, TestHash(1), 1), blobs).ok());
  absl::StatusOr<client::Checkpoint> got = c->Get({ns->id, TestHash(1), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);
}

TEST_F(RoundTripTest, GetIntoWritesTheBytesIntoTheCallersBuffer) {
  // Many chunks, so the bytes land in the buffer chunk by chunk.
  client::ClientOptions options;
  options.chunk_bytes = 64 << 10;
  std::unique_ptr<client::Client> c = Connect(options);
  const client::NamespaceSpec spec = SmallNamespace("tenant-into", 8, 8, 128);
  absl::StatusOr<client::NamespaceInfo> ns = c->RegisterNamespace(spec);
  ASSERT_TRUE(ns.ok()) << ns.status();
  const std::vector<float> states = MakeStates(spec, 11);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  ASSERT_TRUE(c->PutCompact(Target(ns->id, TestHash(1), 2), blobs).ok());

  std::vector<uint8_t> into(blobs.size(), 0xEE);
  absl::StatusOr<client::Checkpoint> got = c->GetInto({ns->id, TestHash(1), {}, std::nullopt}, into);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(into == blobs);
  EXPECT_TRUE(got->bytes.empty());
  EXPECT_EQ(got->position.blocks, 2);
  EXPECT_EQ(got->blob_bytes, ns->blob_bytes);
  EXPECT_EQ(got->layers, 8);

  // Dense, as Get decodes it.
  const DenseEncoding bf16{DType::kBf16, Layout::kVK};
  absl::StatusOr<client::Checkpoint> dense = c->Get({ns->id, TestHash(1), {2, 5}, bf16});
  ASSERT_TRUE(dense.ok()) << dense.status();
  std::vector<uint8_t> dense_into(dense->bytes.size(), 0xEE);
  ASSERT_TRUE(c->GetInto({ns->id, TestHash(1), {2, 5}, bf16}, dense_into).ok());
  EXPECT_TRUE(dense_into == dense->bytes);

  // A buffer of another size: OUT_OF_RANGE, nothing written, the store unchanged.
  for (const size_t size : {blobs.size() - 1, blobs.size() + 1, size_t{0}}) {
    std::vector<uint8_t> wrong(size, 0xEE);
    absl::StatusOr<client::Checkpoint> refused =
        c->GetInto({ns->id, TestHash(1), {}, std::nullopt}, wrong);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kOutOfRange) << refused.status();
    EXPECT_TRUE(std::all_of(wrong.begin(), wrong.end(), [](uint8_t b) { return b == 0xEE; }));
  }
  // A missing key is NOT_FOUND, nothing written; the checkpoint still reads back whole.
  std::fill(into.begin(), into.end(), 0xEE);
  EXPECT_EQ(c->GetInto({ns->id, TestHash(2), {}, std::nullopt}, into).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(std::all_of(into.begin(), into.end(), [](uint8_t b) { return b == 0xEE; }));
  ASSERT_TRUE(c->GetInto({ns->id, TestHash(1), {}, std::nullopt}, into).ok());
  EXPECT_TRUE(into == blobs);
  // The refused gets' streams were cancelled: their read leases come back.
  uint64_t leases = 1;
  for (int i = 0; i < 100 && leases != 0; ++i) {
    leases = Stats().leases;
    if (leases != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(leases, 0u);
}

struct DenseCase {
  DType put_dtype;
  Layout put_layout;
  DType get_dtype;
  Layout get_layout;
};

TEST_F(RoundTripTest, DenseStatesInEveryDtypeAndLayout) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-dense", 2, 4, 32);
  const client::NamespaceInfo ns = Register(spec);
  const std::array<DenseCase, 4> cases = {{{DType::kFp32, Layout::kKV, DType::kFp32, Layout::kVK},
                                           {DType::kFp32, Layout::kVK, DType::kBf16, Layout::kKV},
                                           {DType::kBf16, Layout::kKV, DType::kFp32, Layout::kKV},
                                           {DType::kBf16, Layout::kVK, DType::kBf16, Layout::kVK}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const DenseCase& c = cases[i];
    SCOPED_TRACE(i);
    const std::vector<float> states = MakeStates(spec, 100 + i);
    const std::vector<float> sent = ToLayout(spec, states, c.put_layout);
    std::vector<uint8_t> bytes;
    if (c.put_dtype == DType::kFp32) {
      const auto b = AsBytes(sent);
      bytes.assign(b.begin(), b.end());
    } else {
      bytes = ToBf16Bytes(sent);
    }
    const client::BlockHash key = TestHash(i, 1);
    ASSERT_TRUE(client_->PutDense(Target(ns.id, key, 1), {c.put_dtype, c.put_layout}, bytes).ok());

    // What the service stored is what the reference codec makes of the states as it received
    // them (bf16-rounded when sent as bf16).
    const std::vector<float> received_kv =
        FromLayout(spec, c.put_dtype == DType::kFp32 ? sent : FromBf16Bytes(bytes), c.put_layout);
    const std::vector<uint8_t> expected_blobs = EncodeBlobs(spec, received_kv);
    absl::StatusOr<client::Checkpoint> compact = client_->Get({ns.id, key, {}, std::nullopt});
    ASSERT_TRUE(compact.ok()) << compact.status();
    EXPECT_TRUE(compact->bytes == expected_blobs) << "server encoding differs from the reference";

    absl::StatusOr<client::Checkpoint> dense =
        client_->Get({ns.id, key, {}, DenseEncoding{c.get_dtype, c.get_layout}});
    ASSERT_TRUE(dense.ok()) << dense.status();
    ASSERT_TRUE(dense->dense.has_value());
    EXPECT_EQ(dense->state_bytes, 32u * 32u * (c.get_dtype == DType::kFp32 ? 4 : 2));
    const std::vector<float> decoded =
        c.get_dtype == DType::kFp32 ? FloatsOf(dense->bytes) : FromBf16Bytes(dense->bytes);
    std::vector<float> expected = DecodeBlobs(spec, expected_blobs, c.get_layout);
    if (c.get_dtype == DType::kBf16) expected = FromBf16Bytes(ToBf16Bytes(expected));
    EXPECT_TRUE(decoded == expected) << "server decoding differs from the reference";
    // Within the codec's error of the original states: 8-bit LeapQuant on Gaussian states is
    // ~0.5% (README), bf16 adds ~0.3%.
    EXPECT_LT(RelativeError(ToLayout(spec, states, c.get_layout), decoded), 0.02);
  }
}

TEST_F(RoundTripTest, LosslessCodecIsExact) {
  client::NamespaceSpec spec = SmallNamespace("tenant-fp32", 1, 2, 16);
  spec.format = {client::Codec::kFp32, 32, 1, 0, false};
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<float> states = MakeStates(spec, 5);
  ASSERT_TRUE(
      client_->PutDense(Target(ns.id, TestHash(5), 1), {DType::kFp32, Layout::kKV}, AsBytes(states))
          .ok());
  absl::StatusOr<client::Checkpoint> got =
      client_->Get({ns.id, TestHash(5), {}, DenseEncoding{DType::kFp32, Layout::kKV}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(FloatsOf(got->bytes) == states);
}

TEST_F(RoundTripTest, TensorParallelHalvesServeAWholeRead) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-tp");
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<float> states = MakeStates(spec, 3);
  const client::BlockHash key = TestHash(3);
  ASSERT_TRUE(client_
                  ->PutCompact(Target(ns.id, key, 1, {0, 2}),
                               EncodeBlobs(spec, SliceHeads(spec, states, 0, 2)))
                  .ok());
  // Half the heads: a lookup for all of them misses, for the half it hits.
  const std::array<client::BlockHash, 1> chain = {key};
  EXPECT_FALSE(client_->Lookup({ns.id, chain, {}, 0, 16})->hit);
  EXPECT_TRUE(client_->Lookup({ns.id, chain, {0, 2}, 0, 16})->hit);
  EXPECT_EQ(client_->Get({ns.id, key, {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(client_
                  ->PutCompact(Target(ns.id, key, 1, {2, 4}),
                               EncodeBlobs(spec, SliceHeads(spec, states, 2, 4)))
                  .ok());
  absl::StatusOr<client::Checkpoint> whole = client_->Get({ns.id, key, {}, std::nullopt});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->bytes == EncodeBlobs(spec, states));
}

TEST_F(RoundTripTest, PhasesByHandAndAbort) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-phases");
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 4));
  absl::StatusOr<client::Reservation> put = client_->ReservePut(Target(ns.id, TestHash(4), 1), {});
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->expected_bytes, blobs.size());
  EXPECT_GT(put->ttl, absl::ZeroDuration());
  // Out of order, over two streams.
  const size_t half = blobs.size() / 2;
  ASSERT_TRUE(client_->Upload(*put, half, std::span(blobs).subspan(half)).ok());
  ASSERT_TRUE(client_->Upload(*put, 0, std::span(blobs).first(half)).ok());
  EXPECT_EQ(Stats().pending_puts, 1u);
  ASSERT_TRUE(client_->AbortPut(put->put_id).ok());
  EXPECT_EQ(Stats().pending_puts, 0u);
  EXPECT_EQ(client_->CommitPut(put->put_id, client::Crc32c(blobs)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Get({ns.id, TestHash(4), {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
  // Again, committed this time.
  put = client_->ReservePut(Target(ns.id, TestHash(4), 1), {});
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_TRUE(client_->Upload(*put, 0, blobs).ok());
  ASSERT_TRUE(client_->CommitPut(put->put_id, client::Crc32c(blobs)).ok());
  EXPECT_TRUE(client_->Get({ns.id, TestHash(4), {}, std::nullopt})->bytes == blobs);
}

TEST_F(RoundTripTest, DeletePinUnpinHealthAndStats) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-admin");
  const client::NamespaceInfo ns = Register(spec);
  // Registration is idempotent; another tenant gets another namespace with the same fingerprint.
  EXPECT_EQ(Register(spec).id, ns.id);
  const client::NamespaceInfo other = Register(SmallNamespace("tenant-other"));
  EXPECT_NE(other.id, ns.id);
  EXPECT_EQ(other.fingerprint, ns.fingerprint);

  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 6));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(6), 1), blobs).ok());
  // Keys never match across namespaces.
  EXPECT_EQ(client_->Get({other.id, TestHash(6), {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(client_->Pin(ns.id, TestHash(6)).ok());
  EXPECT_EQ(Stats().pinned, 1u);
  ASSERT_TRUE(client_->Unpin(ns.id, TestHash(6)).ok());
  EXPECT_EQ(client_->Unpin(ns.id, TestHash(6)).code(), absl::StatusCode::kFailedPrecondition);

  const client::ServerStats s = Stats();
  EXPECT_EQ(s.checkpoints, 1u);
  EXPECT_EQ(s.puts_committed, 1u);
  EXPECT_EQ(s.bytes_in, blobs.size());
  ASSERT_EQ(s.tiers.size(), 1u);
  EXPECT_EQ(s.tiers[0].capacity_bytes, 64u << 20);
  ASSERT_EQ(s.memory.size(), 1u);
  EXPECT_EQ(s.memory[0].format, "leap8");
  EXPECT_EQ(s.memory[0].stored_bytes, blobs.size());
  EXPECT_EQ(s.memory[0].fp32_equivalent_bytes, 8u * 16 * 16 * 4);

  ASSERT_TRUE(client_->Delete(ns.id, TestHash(6)).ok());
  EXPECT_EQ(client_->Delete(ns.id, TestHash(6)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Stats().checkpoints, 0u);

  absl::StatusOr<bool> serving = client_->CheckHealth();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  serving = client_->CheckHealth("leapcache.v1.StateCache");
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
}

TEST_F(RoundTripTest, SigtermDrainsAGetInFlight) {
  // A get stream is open, its first chunk read and the rest held back by flow control, when
  // SIGTERM arrives: the drain lets it finish byte-exact (grace 10 s), calls started after the
  // signal are refused, and the server exits 0.
  // 16.8 MB of fp32 blobs, far more than the stream's flow-control window (kept at its initial
  // size: no bandwidth-delay probing on this channel).
  client::NamespaceSpec spec = SmallNamespace("tenant-drain", 32, 32, 64);
  spec.format = {client::Codec::kFp32, 32, 1, 0, false};
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 8));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(8), 1), blobs).ok());

  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetMaxReceiveMessageSize(8 << 20);
  auto channel =
      grpc::CreateCustomChannel(server_->target(), grpc::InsecureChannelCredentials(), args);
  auto stub = v1::StateCache::NewStub(channel);
  v1::GetRequest request;
  request.set_namespace_id(ns.id);
  request.set_hash(std::string(reinterpret_cast<const char*>(TestHash(8).data()), 32));
  request.set_max_chunk_bytes(16 << 10);  // 1,028 chunks
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GetResponse>> reader = stub->Get(&context, request);
  v1::GetResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  std::string received = chunk.data();
  EXPECT_EQ(Stats().leases, 1u);  // the stream holds its lease

  server_->child().Signal(SIGTERM);
  absl::SleepFor(absl::Milliseconds(300));  // the server is draining now
  EXPECT_FALSE(client_->Stats().ok());      // new calls are refused
  while (reader->Read(&chunk)) received += chunk.data();
  const grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(received == std::string(blobs.begin(), blobs.end()));

  absl::StatusOr<int> code = server_->child().Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  server_.reset();  // already stopped
}

class DrainDeadlineTest : public RoundTripTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=64MiB", "--page-bytes=64KiB", "--shutdown-grace=1s"};
  }
};

TEST_F(DrainDeadlineTest, AStalledStreamIsCancelledAtTheGraceDeadline) {
  // The reader stops reading; after SIGTERM the server waits its 1 s grace, cancels the stream,
  // releases the lease and exits 0.
  client::NamespaceSpec spec = SmallNamespace("tenant-stall", 32, 32, 64);
  spec.format = {client::Codec::kFp32, 32, 1, 0, false};
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 9));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(9), 1), blobs).ok());
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto channel =
      grpc::CreateCustomChannel(server_->target(), grpc::InsecureChannelCredentials(), args);
  auto stub = v1::StateCache::NewStub(channel);
  v1::GetRequest request;
  request.set_namespace_id(ns.id);
  request.set_hash(std::string(reinterpret_cast<const char*>(TestHash(9).data()), 32));
  request.set_max_chunk_bytes(16 << 10);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GetResponse>> reader = stub->Get(&context, request);
  v1::GetResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk));

  const absl::Time signalled = absl::Now();
  server_->child().Signal(SIGTERM);
  absl::StatusOr<int> code = server_->child().Wait(absl::Seconds(60));
  const absl::Duration drain = absl::Now() - signalled;
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_GE(drain, absl::Milliseconds(900));
  EXPECT_LT(drain, absl::Seconds(10));
  uint64_t more = 0;
  while (reader->Read(&chunk)) more += chunk.data().size();
  EXPECT_FALSE(reader->Finish().ok());  // cut short, never completed
  EXPECT_LT(more, blobs.size());
  server_.reset();
}

}  // namespace
}  // namespace leapcache::testing
