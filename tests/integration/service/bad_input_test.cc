// Bad input through the real server gets a precise gRPC status and changes nothing: unknown
// namespaces and puts, wrong shapes and sizes, non-finite values, oversized messages, empty,
// ragged and over-long chains, unknown formats and enum values, damaged uploads. After every
// case the store is compared with its state before: same checkpoints, same memory, nothing
// pending, and the known checkpoint still reads back byte-exact.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>

#include "leapcache/v1/state_cache.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

using absl::StatusCode;

class BadInputTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    spec_ = SmallNamespace("tenant-bad");
    ns_ = Register(spec_);
    blobs_ = EncodeBlobs(spec_, MakeStates(spec_, 1));
    ASSERT_TRUE(client_->PutCompact(Target(TestHash(1)), blobs_).ok());
    before_ = Stats();
    channel_ = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
    stub_ = v1::StateCache::NewStub(channel_);
  }

  // The store is as SetUp left it (request counters aside).
  void ExpectUnchanged() {
    const client::ServerStats s = Stats();
    EXPECT_EQ(s.checkpoints, before_.checkpoints);
    EXPECT_EQ(s.pending_puts, 0u);
    EXPECT_EQ(s.namespaces, before_.namespaces);
    EXPECT_EQ(s.puts_committed, before_.puts_committed);
    ASSERT_EQ(s.tiers.size(), 1u);
    EXPECT_EQ(s.tiers[0].used_bytes, before_.tiers[0].used_bytes);
    absl::StatusOr<client::Checkpoint> got = client_->Get({ns_.id, TestHash(1), {}, std::nullopt});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->bytes == blobs_);
  }

  client::PutTarget Target(const client::BlockHash& h, client::HeadRange heads = {}) const {
    return {ns_.id, h, {16, 1}, heads, absl::ZeroDuration()};
  }

  // A reservation the test completes by hand; aborted by the caller.
  client::Reservation Reserve(const client::BlockHash& h,
                              std::optional<client::DenseEncoding> dense = std::nullopt) {
    absl::StatusOr<client::Reservation> r = client_->ReservePut(Target(h), dense);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : client::Reservation{};
  }

  client::NamespaceSpec spec_;
  client::NamespaceInfo ns_;
  std::vector<uint8_t> blobs_;
  client::ServerStats before_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::StateCache::Stub> stub_;
};

TEST_F(BadInputTest, UnknownNamespace) {
  const uint32_t unknown = ns_.id + 100;
  const std::array<client::BlockHash, 1> chain = {TestHash(1)};
  EXPECT_EQ(client_->Lookup({unknown, chain, {}, 0, 16}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->ReservePut({unknown, TestHash(2), {16, 1}, {}, {}}, {}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(client_->Get({unknown, TestHash(1), {}, std::nullopt}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(client_->Delete(unknown, TestHash(1)).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Pin(0, TestHash(1)).code(), StatusCode::kNotFound);
  ExpectUnchanged();
}

TEST_F(BadInputTest, BadNamespaceSpecs) {
  struct Case {
    const char* what;
    client::NamespaceSpec spec;
  };
  std::vector<Case> cases;
  auto base = [&] { return SmallNamespace("tenant-new"); };
  cases.push_back({"empty tenant", base()});
  cases.back().spec.tenant = "";
  cases.push_back({"tenant with a NUL", base()});
  cases.back().spec.tenant = std::string("ten\0ant", 7);
  cases.push_back({"tenant with a newline", base()});
  cases.back().spec.tenant = "tenant\nroot";
  cases.push_back({"tenant with a space", base()});
  cases.back().spec.tenant = "tenant a";
  cases.push_back({"no layers", base()});
  cases.back().spec.model.linear_layers = 0;
  cases.push_back({"too many heads", base()});
  cases.back().spec.model.total_heads = 5000;
  cases.push_back({"dk not a multiple of 16", base()});
  cases.back().spec.model.dk = 100;
  cases.push_back({"unknown codec", base()});
  cases.back().spec.format.codec = static_cast<client::Codec>(99);
  cases.push_back({"unknown kind", base()});
  cases.back().spec.model.kind = static_cast<client::StateKind>(7);
  cases.push_back({"bits the codec lacks", base()});
  cases.back().spec.format.bits = 5;
  cases.push_back({"compensators on a codec without them", base()});
  cases.back().spec.format = {client::Codec::kIntCol, 8, 1, 4, false};
  cases.push_back({"non-finite flops hint", base()});
  cases.back().spec.flops_per_token = NAN;
  cases.push_back({"blob larger than a page (64 KiB)", base()});
  cases.back().spec.model.dk = cases.back().spec.model.dv = 256;
  cases.back().spec.format = {client::Codec::kFp32, 32, 1, 0, false};
  for (const Case& c : cases) {
    absl::StatusOr<client::NamespaceInfo> r = client_->RegisterNamespace(c.spec);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what << ": " << r.status();
  }
  ExpectUnchanged();
}

TEST_F(BadInputTest, MalformedChains) {
  auto lookup = [&](const std::string& chain, uint32_t block_tokens = 16) {
    v1::LookupRequest q;
    q.set_namespace_id(ns_.id);
    q.set_chain(chain);
    q.set_block_tokens(block_tokens);
    v1::LookupResponse r;
    grpc::ClientContext context;
    return stub_->Lookup(&context, q, &r);
  };
  EXPECT_EQ(lookup("").error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // empty
  EXPECT_EQ(lookup(std::string(33, 'x')).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(lookup(std::string(32, 'x'), 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // One hash more than the longest chain allowed (65,536): 2 MiB, within the message limit.
  EXPECT_EQ(lookup(std::string(32 * 65537, 'x')).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(lookup(std::string(32 * 65536, 'x')).error_code(), grpc::StatusCode::OK);
  // Hashes that are not 32 bytes.
  v1::GetRequest get;
  get.set_namespace_id(ns_.id);
  get.set_hash(std::string(31, 'h'));
  grpc::ClientContext context;
  auto reader = stub_->Get(&context, get);
  v1::GetResponse response;
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::DeleteRequest del;
  del.set_namespace_id(ns_.id);
  del.set_hash(std::string(64, 'h'));
  v1::DeleteResponse del_response;
  grpc::ClientContext del_context;
  EXPECT_EQ(stub_->Delete(&del_context, del, &del_response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ExpectUnchanged();
}

TEST_F(BadInputTest, BadReservations) {
  EXPECT_EQ(client_->ReservePut(Target(TestHash(2), {0, 5}), {}).status().code(),
            StatusCode::kInvalidArgument);  // heads beyond the model's 4
  EXPECT_EQ(client_->ReservePut(Target(TestHash(2), {3, 2}), {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->ReservePut({ns_.id, TestHash(2), {16, 0}, {}, {}}, {}).status().code(),
            StatusCode::kInvalidArgument);  // position at block 0
  EXPECT_EQ(
      client_->ReservePut({ns_.id, TestHash(2), {16, 1}, {}, absl::Hours(24)}, {}).status().code(),
      StatusCode::kInvalidArgument);  // TTL beyond max_put_ttl
  EXPECT_EQ(
      client_
          ->ReservePut(Target(TestHash(2)),
                       client::DenseEncoding{static_cast<client::DType>(9), client::Layout::kKV})
          .status()
          .code(),
      StatusCode::kInvalidArgument);  // unknown dtype
  EXPECT_EQ(client_->ReservePut(Target(TestHash(1)), {}).status().code(),
            StatusCode::kAlreadyExists);  // committed already
  ExpectUnchanged();
}

TEST_F(BadInputTest, DamagedCompactUploads) {
  const client::Reservation put = Reserve(TestHash(2));
  EXPECT_EQ(client_->Upload(put, put.expected_bytes - 10, std::vector<uint8_t>(20, 1)).code(),
            StatusCode::kOutOfRange);
  // Wrong checksum (also: an incomplete upload).
  ASSERT_TRUE(client_->Upload(put, 0, blobs_).ok());
  EXPECT_EQ(client_->CommitPut(put.put_id, client::Crc32c(blobs_) ^ 1).code(),
            StatusCode::kDataLoss);
  // Garbage with a matching checksum fails the blob checks.
  std::vector<uint8_t> garbage(blobs_.size(), 0x5C);
  ASSERT_TRUE(client_->Upload(put, 0, garbage).ok());
  EXPECT_EQ(client_->CommitPut(put.put_id, client::Crc32c(garbage)).code(), StatusCode::kDataLoss);
  EXPECT_EQ(client_->Upload(put, 0, {}).code(), StatusCode::kOk);  // an empty stream is fine
  EXPECT_EQ(client_->AbortPut(put.put_id).code(), StatusCode::kOk);
  EXPECT_EQ(client_->AbortPut(put.put_id).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->CommitPut(987654, 0).code(), StatusCode::kNotFound);
  ExpectUnchanged();
}

TEST_F(BadInputTest, WrongFormatBlobsOfTheRightSize) {
  // bf16 and fp16 blobs of 16 x 16 are both 64 + 512 bytes: intact blobs of the wrong format
  // fit the reservation exactly, and the header check refuses them by name.
  client::NamespaceSpec fp16 = SmallNamespace("tenant-bad", 2, 4, 16);
  fp16.format = {client::Codec::kFp16, 16, 1, 0, false};
  client::NamespaceSpec bf16 = fp16;
  bf16.format.codec = client::Codec::kBf16;
  const client::NamespaceInfo ns16 = Register(fp16);
  before_ = Stats();
  const std::vector<uint8_t> wrong = EncodeBlobs(bf16, MakeStates(fp16, 3));
  absl::StatusOr<client::Reservation> put =
      client_->ReservePut({ns16.id, TestHash(9), {16, 1}, {}, {}}, {});
  ASSERT_TRUE(put.ok());
  ASSERT_EQ(put->expected_bytes, wrong.size());
  ASSERT_TRUE(client_->Upload(*put, 0, wrong).ok());
  EXPECT_EQ(client_->CommitPut(put->put_id, client::Crc32c(wrong)).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(client_->AbortPut(put->put_id).ok());
  ExpectUnchanged();
}

TEST_F(BadInputTest, NonFiniteFloatBlobsAreRefusedAtCommit) {
  // Sealed fp32 blobs whose checksums hold but whose elements are NaN or infinite: the put's own
  // bad content, as unusable scales are (INVALID_ARGUMENT).
  client::NamespaceSpec fp32 = SmallNamespace("tenant-bad", 2, 4, 16);
  fp32.format = {client::Codec::kFp32, 32, 1, 0, false};
  const client::NamespaceInfo ns32 = Register(fp32);
  before_ = Stats();
  const BlobSpec spec = ToBlobSpec(fp32);
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<uint8_t> blobs = EncodeBlobs(fp32, MakeStates(fp32, 4));
    const size_t blob = blobs.size() / 8;
    std::memcpy(blobs.data() + 3 * blob + kHeaderBytes + 4 * 11, &bad, 4);  // blob 3, element 11
    SealBlob(spec, std::span<uint8_t>(blobs.data() + 3 * blob, blob));
    const absl::Status st =
        client_->PutCompact({ns32.id, TestHash(11), {16, 1}, {}, absl::ZeroDuration()}, blobs);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad << ": " << st;  // the put's content
    EXPECT_NE(st.message().find("element 11 is not finite"), std::string::npos) << st;
  }
  ExpectUnchanged();
}

TEST_F(BadInputTest, BadDenseUploads) {
  const client::DenseEncoding fp32{client::DType::kFp32, client::Layout::kKV};
  const client::Reservation put = Reserve(TestHash(2), fp32);
  ASSERT_EQ(put.state_bytes, 16u * 16 * 4);
  std::vector<float> states = MakeStates(spec_, 2);
  // Non-finite values, in the third state: the whole chunk is refused.
  std::vector<float> bad = states;
  bad[2 * 256 + 17] = NAN;
  EXPECT_EQ(client_->Upload(put, 0, AsBytes(bad)).code(), StatusCode::kInvalidArgument);
  bad[2 * 256 + 17] = INFINITY;
  EXPECT_EQ(client_->Upload(put, 0, AsBytes(bad)).code(), StatusCode::kInvalidArgument);
  bad[2 * 256 + 17] = 1e30f;  // beyond the codec's range of 2^64
  EXPECT_EQ(client_->Upload(put, 0, AsBytes(bad)).code(), StatusCode::kOutOfRange);
  // Not whole states; out of order; too many.
  EXPECT_EQ(client_->Upload(put, 0, AsBytes(states).first(1000)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Upload(put, put.state_bytes, AsBytes(states).first(put.state_bytes)).code(),
            StatusCode::kInvalidArgument);
  std::vector<float> too_many = states;
  too_many.resize(states.size() + 256);
  EXPECT_EQ(client_->Upload(put, 0, AsBytes(too_many)).code(), StatusCode::kOutOfRange);
  // Incomplete, then a wrong checksum: refused, the put stays open.
  ASSERT_TRUE(client_->Upload(put, 0, AsBytes(states).first(2 * put.state_bytes)).ok());
  EXPECT_EQ(client_->CommitPut(put.put_id, client::Crc32c(AsBytes(states))).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(
      client_->Upload(put, 2 * put.state_bytes, AsBytes(states).subspan(2 * put.state_bytes)).ok());
  EXPECT_EQ(client_->CommitPut(put.put_id, client::Crc32c(AsBytes(states)) + 1).code(),
            StatusCode::kDataLoss);
  EXPECT_TRUE(client_->AbortPut(put.put_id).ok());
  // PutDense with the wrong number of bytes never reserves for long.
  EXPECT_EQ(
      client_->PutDense(Target(TestHash(4)), fp32, AsBytes(states).first(put.state_bytes)).code(),
      StatusCode::kInvalidArgument);
  ExpectUnchanged();
}

TEST_F(BadInputTest, OversizedMessages) {
  // The server accepts at most 8 MiB per message: a 9 MiB upload chunk and a 9 MiB lookup are
  // refused by gRPC itself before any handler runs.
  client::ClientOptions big;
  big.max_message_bytes = 32 << 20;
  big.chunk_bytes = 9 << 20;
  std::unique_ptr<client::Client> c = Connect(big);
  ASSERT_NE(c, nullptr);
  // 16 layers x 32 heads of 64 x 64 fp32 states: 8.03 MiB of blobs, sent as one 9 MiB chunk.
  client::NamespaceSpec large = SmallNamespace("tenant-bad", 16, 32, 64);
  large.format = {client::Codec::kFp32, 32, 1, 0, false};
  absl::StatusOr<client::NamespaceInfo> ns = c->RegisterNamespace(large);
  ASSERT_TRUE(ns.ok()) << ns.status();
  before_ = Stats();
  absl::StatusOr<client::Reservation> put =
      c->ReservePut({ns->id, TestHash(5), {16, 1}, {}, {}}, std::nullopt);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_GT(put->expected_bytes, 8u << 20);
  {
    // Raw: the client library cuts chunks to the server's advertised limit.
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(32 << 20);
    std::unique_ptr<v1::StateCache::Stub> stub = v1::StateCache::NewStub(grpc::CreateCustomChannel(
        server_->target(), grpc::InsecureChannelCredentials(), args));
    v1::UploadPutRequest chunk;
    chunk.set_put_id(put->put_id);
    chunk.set_data(std::string(put->expected_bytes, '\0'));
    grpc::ClientContext context;
    v1::UploadPutResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::UploadPutRequest>> writer =
        stub->UploadPut(&context, &response);
    writer->Write(chunk);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  ASSERT_TRUE(c->AbortPut(put->put_id).ok());
  const std::vector<client::BlockHash> chain(300000, TestHash(1));  // 9.6 MiB
  EXPECT_EQ(c->Lookup({ns_.id, chain, {}, 0, 16}).status().code(), StatusCode::kResourceExhausted);
  ExpectUnchanged();
}

TEST_F(BadInputTest, AnUploadChunkOverTheAdvertisedLimitEndsTheStreamWithInvalidArgument) {
  // 1.2 MiB of blobs in one chunk, against the 1 MiB the server advertises: refused, nothing
  // stored (once, 7 MiB chunks passed while ReservePut said 1 MiB).
  const client::NamespaceSpec big = SmallNamespace("tenant-bad", 4, 16, 128);
  const client::NamespaceInfo ns = Register(big);
  const std::vector<uint8_t> blobs = EncodeBlobs(big, MakeStates(big, 2));
  absl::StatusOr<client::Reservation> put =
      client_->ReservePut({ns.id, TestHash(30), {16, 1}, {}, absl::ZeroDuration()}, std::nullopt);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_GT(blobs.size(), put->max_chunk_bytes);
  v1::UploadPutRequest chunk;
  chunk.set_put_id(put->put_id);
  chunk.set_data(std::string(blobs.begin(), blobs.end()));
  grpc::ClientContext c;
  v1::UploadPutResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadPutRequest>> writer =
      stub_->UploadPut(&c, &response);
  writer->Write(chunk);
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("chunk limit"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(client_->CommitPut(put->put_id, client::Crc32c(blobs)).code(), StatusCode::kDataLoss);
  ASSERT_TRUE(client_->AbortPut(put->put_id).ok());
  // The client library cuts its chunks to the advertised limit, so the same put goes through.
  ASSERT_TRUE(client_->PutCompact({ns.id, TestHash(30), {16, 1}, {}, absl::ZeroDuration()}, blobs)
                  .ok());
}

TEST_F(BadInputTest, AnUnparsableUploadMessageEndsTheStreamWithInvalidArgument) {
  // A raw stream: a good chunk, bytes that are no UploadPutRequest (a field of wire type 7),
  // then the rest of the put. The stream ends at the bad message with its status, not OK, and
  // the chunk after it is not stored: the put does not commit.
  const client::Reservation put = Reserve(TestHash(9));
  const size_t half = blobs_.size() / 2;
  auto chunk = [&](size_t begin, size_t end) {
    v1::UploadPutRequest q;
    q.set_put_id(put.put_id);
    q.set_offset(begin);
    q.set_data(std::string(blobs_.begin() + begin, blobs_.begin() + end));
    grpc::Slice bytes(q.SerializeAsString());
    return grpc::ByteBuffer(&bytes, 1);
  };
  grpc::GenericStub generic(channel_);
  grpc::ClientContext c;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream =
      generic.PrepareCall(&c, "/leapcache.v1.StateCache/UploadPut", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](int want) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, reinterpret_cast<void*>(want));
  };
  stream->StartCall(reinterpret_cast<void*>(1));
  step(1);
  const grpc::ByteBuffer first = chunk(0, half);
  stream->Write(first, reinterpret_cast<void*>(2));
  step(2);
  const std::string garbage = "\x0f\xff\xff";
  grpc::Slice bad_slice(garbage);
  const grpc::ByteBuffer bad(&bad_slice, 1);
  stream->Write(bad, reinterpret_cast<void*>(3));
  step(3);
  const grpc::ByteBuffer second = chunk(half, blobs_.size());
  stream->Write(second, reinterpret_cast<void*>(4));
  step(4);  // may fail once the server has ended the stream
  stream->WritesDone(reinterpret_cast<void*>(5));
  step(5);
  grpc::Status status;
  stream->Finish(&status, reinterpret_cast<void*>(6));
  step(6);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("does not parse"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(client_->CommitPut(put.put_id, client::Crc32c(blobs_)).code(), StatusCode::kDataLoss);
  ASSERT_TRUE(client_->AbortPut(put.put_id).ok());
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  ExpectUnchanged();
}

TEST_F(BadInputTest, ConnectionStaysUsableAfterErrors) {
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(client_->Get({ns_.id, TestHash(100 + i), {}, std::nullopt}).status().code(),
              StatusCode::kNotFound);
  }
  ExpectUnchanged();
}

}  // namespace
}  // namespace leapcache::testing
