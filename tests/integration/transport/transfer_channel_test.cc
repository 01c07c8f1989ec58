// Transfer channels (data_plane.proto, OpenTransferChannel) against the real server: an engine
// on the server's host moves its gets and puts through the shared-memory mailbox instead of the
// Transfer RPCs, byte for byte the same; garbled, misdirected and failing requests get their
// status and keep the channel; an engine's lookups go through it too, answered as LookupBatch
// answers them (over the RPC when they do not fit the mailbox); closing or losing the session,
// or killing the engine, ends the channel; a server with channels off keeps engines on the RPCs.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/loopback_http.h"
#include "base/shm_mailbox.h"
#include "leapcache/data_plane.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

using client::DenseEncoding;
using client::DType;
using client::Layout;
using client::TransferChannel;

client::PutTarget Target(uint32_t ns, const client::BlockHash& key) {
  return {ns, key, {16, 1}, {}, absl::ZeroDuration()};
}

class TransferChannelTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=64MiB", "--page-bytes=64KiB"};
  }

  absl::StatusOr<std::unique_ptr<client::AttachedEngine>> Attach(TransferChannel mode) const {
    client::ClientOptions options;
    options.target = server_->target();
    client::EngineIdentity identity;
    identity.name = "channel-engine";
    client::AttachOptions attach;
    attach.transports = {client::Transport::kUcx};
    attach.ucx_transports = "tcp";
    attach.transfer_channel = mode;
    return client::AttachedEngine::Attach(options, identity, attach);
  }

  // The value of the series `name` whose label set holds every one of `labels` (none: the
  // series without labels); -1 if absent.
  double Metric(const std::string& name, const std::vector<std::string>& labels = {}) const {
    absl::StatusOr<base::HttpResponse> r = base::HttpGet(server_->metrics_port(), "/metrics");
    if (!r.ok()) return -1;
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      const bool plain = labels.empty() && absl::StartsWith(line, name + " ");
      bool labelled = !labels.empty() && absl::StartsWith(line, name + "{");
      for (const std::string& l : labels) labelled = labelled && absl::StrContains(line, l);
      double v = 0;
      if ((plain || labelled) && absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) return v;
    }
    return -1;
  }

  // How long until `name` reads `want` (at most `limit`); the limit if it never does.
  absl::Duration Until(const std::string& name, double want, absl::Duration limit) const {
    const absl::Time start = absl::Now();
    while (absl::Now() - start < limit) {
      if (Metric(name) == want) return absl::Now() - start;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return limit;
  }
};

TEST_F(TransferChannelTest, GetsAndPutsGoThroughTheChannelByteExact) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-channel", 2, 4, 32);
  const client::NamespaceInfo ns = Register(spec);
  auto engine = Attach(TransferChannel::kAuto);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<float> states = MakeStates(spec, 17);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  const auto dense = AsBytes(states);
  std::vector<uint8_t> buffer(blobs.size() + dense.size() + 64, 0);
  std::copy(blobs.begin(), blobs.end(), buffer.begin());
  std::copy(dense.begin(), dense.end(), buffer.begin() + blobs.size());
  auto id = (*engine)->RegisterBuffer(buffer.data(), buffer.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(id.ok()) << id.status();

  // A compact put and a dense one, then both read back compact into the buffer's tail.
  ASSERT_TRUE(
      (*engine)->PutFrom(Target(ns.id, TestHash(1)), std::nullopt, *id, 0, blobs.size()).ok());
  EXPECT_TRUE((*engine)->transferring_through_channel());
  ASSERT_TRUE((*engine)
                  ->PutFrom(Target(ns.id, TestHash(2)), DenseEncoding{DType::kFp32, Layout::kKV},
                            *id, blobs.size(), dense.size())
                  .ok());
  for (int key : {1, 2}) {
    std::fill(buffer.begin(), buffer.end(), 0xEE);
    auto got = (*engine)->GetInto({ns.id, TestHash(key), {}, std::nullopt}, *id, 64);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE((*engine)->transferring_through_channel());
    EXPECT_EQ(got->total_bytes, blobs.size());
    EXPECT_EQ(got->crc32c, client::Crc32c(blobs));
    EXPECT_TRUE(std::equal(blobs.begin(), blobs.end(), buffer.begin() + 64)) << key;
    EXPECT_EQ(buffer[63], 0xEE) << "nothing written before the offset";
  }
  // Every other client reads the same bytes.
  absl::StatusOr<client::Checkpoint> other = client_->Get({ns.id, TestHash(2), {}, std::nullopt});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(other->bytes == blobs);

  // A failed transfer keeps the channel: its status, and the next call goes through it too.
  auto missing = (*engine)->GetInto({ns.id, TestHash(99), {}, std::nullopt}, *id, 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  const absl::Status too_long =
      (*engine)->PutFrom(Target(ns.id, TestHash(3)), std::nullopt, *id, 0, blobs.size() - 4);
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument) << too_long;
  ASSERT_TRUE((*engine)->GetInto({ns.id, TestHash(1), {}, std::nullopt}, *id, 0).ok());

  EXPECT_EQ(Metric("leapcache_data_plane_transfer_channels"), 1);
  EXPECT_EQ(Metric("leapcache_data_plane_channel_transfers_total", {"op=\"get\""}), 4);
  EXPECT_EQ(Metric("leapcache_data_plane_channel_transfers_total", {"op=\"put\""}), 3);
  EXPECT_EQ(Metric("leapcache_data_plane_transfers_total", {"op=\"get\"", "code=\"OK\""}), 3);
  EXPECT_EQ(Metric("leapcache_data_plane_transfers_total", {"op=\"put\"", "code=\"OK\""}), 2);
  // None of them was an RPC.
  EXPECT_LE(Metric("leapcache_rpcs_total", {"method=\"DataPlane/TransferGet\""}), 0);
  EXPECT_LE(Metric("leapcache_rpcs_total", {"method=\"DataPlane/TransferPut\""}), 0);
  const client::ServerStats s = Stats();
  EXPECT_EQ(s.checkpoints, 2u);
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.leases, 0u);

  // Detach ends the channel with the session.
  ASSERT_TRUE((*engine)->Detach().ok());
  EXPECT_LT(Until("leapcache_data_plane_transfer_channels", 0, absl::Seconds(10)),
            absl::Seconds(10));
}

TEST_F(TransferChannelTest, LookupsGoThroughTheChannelAsLookupBatchAnswersThem) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-channel-lookup", 1, 2, 16);
  const client::NamespaceInfo ns = Register(spec);
  auto engine = Attach(TransferChannel::kAuto);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<uint32_t> tokens(16 * 8);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 + 1);
  absl::StatusOr<std::vector<client::BlockHash>> chain = client::ChainHashes(tokens, 16);
  ASSERT_TRUE(chain.ok());
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 5));
  ASSERT_TRUE(client_->PutCompact({ns.id, (*chain)[4], {80, 5}, {}, {}}, blobs).ok());
  const std::vector<client::BlockHash> other(chain->begin() + 1, chain->end());
  const std::vector<client::BlockHash> empty;
  const std::vector<client::LookupRequest> batch = {
      {ns.id, *chain, {}, 0, 16},       // hit at 4
      {ns.id, *chain, {}, 3, 16},       // capped: miss
      {ns.id, other, {}, 0, 16},        // shifted: miss
      {ns.id, empty, {}, 0, 16},        // INVALID_ARGUMENT
      {ns.id + 1000, *chain, {}, 0, 16}  // NOT_FOUND
  };
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> got =
      (*engine)->LookupBatch(batch);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE((*engine)->transferring_through_channel());
  ASSERT_EQ(got->size(), batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const absl::StatusOr<client::LookupResult> alone = client_->Lookup(batch[i]);
    ASSERT_EQ((*got)[i].status(), alone.status()) << i;
    if (!alone.ok()) continue;
    EXPECT_EQ((*got)[i]->hit, alone->hit) << i;
    EXPECT_EQ((*got)[i]->index, alone->index) << i;
    EXPECT_EQ((*got)[i]->position.tokens, alone->position.tokens) << i;
  }
  EXPECT_EQ((*got)[0]->index, 4);
  absl::StatusOr<client::LookupResult> one = (*engine)->Lookup(batch[0]);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->index, 4);
  EXPECT_TRUE((*engine)->transferring_through_channel());
  EXPECT_EQ(Metric("leapcache_data_plane_channel_transfers_total", {"op=\"lookup\""}), 2);
  EXPECT_LE(Metric("leapcache_rpcs_total", {"method=\"StateCache/LookupBatch\""}), 0);

  // A batch larger than the mailbox goes over LookupBatch, answered the same.
  const std::vector<client::LookupRequest> large(2048, batch[0]);
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> by_rpc =
      (*engine)->LookupBatch(large);
  ASSERT_TRUE(by_rpc.ok()) << by_rpc.status();
  EXPECT_FALSE((*engine)->transferring_through_channel());
  ASSERT_EQ(by_rpc->size(), large.size());
  for (const auto& r : *by_rpc) EXPECT_EQ(r->index, 4);
  EXPECT_EQ(Metric("leapcache_rpcs_total", {"method=\"StateCache/LookupBatch\"", "code=\"OK\""}),
            1);
  // A small batch whose answers (each a refusal with its message) outgrow the mailbox: the
  // channel answers RESOURCE_EXHAUSTED, and the engine asks over LookupBatch.
  const std::vector<client::LookupRequest> refused(4096, batch[3]);
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> all_refused =
      (*engine)->LookupBatch(refused);
  ASSERT_TRUE(all_refused.ok()) << all_refused.status();
  EXPECT_FALSE((*engine)->transferring_through_channel());
  for (const auto& r : *all_refused) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  EXPECT_EQ(Metric("leapcache_rpcs_total", {"method=\"StateCache/LookupBatch\"", "code=\"OK\""}),
            2);
  // The channel stayed open: the next small batch goes through it again.
  ASSERT_TRUE((*engine)->LookupBatch(batch).ok());
  EXPECT_TRUE((*engine)->transferring_through_channel());
  EXPECT_EQ(Metric("leapcache_data_plane_transfer_channels"), 1);
}

TEST_F(TransferChannelTest, RpcModeKeepsToTheRpcs) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-rpc", 1, 2, 16);
  const client::NamespaceInfo ns = Register(spec);
  auto engine = Attach(TransferChannel::kRpc);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<uint8_t> buffer = EncodeBlobs(spec, MakeStates(spec, 3));
  auto id = (*engine)->RegisterBuffer(buffer.data(), buffer.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(
      (*engine)->PutFrom(Target(ns.id, TestHash(1)), std::nullopt, *id, 0, buffer.size()).ok());
  ASSERT_TRUE((*engine)->GetInto({ns.id, TestHash(1), {}, std::nullopt}, *id, 0).ok());
  EXPECT_FALSE((*engine)->transferring_through_channel());
  EXPECT_EQ(Metric("leapcache_rpcs_total", {"method=\"DataPlane/TransferGet\"", "code=\"OK\""}), 1);
  EXPECT_EQ(Metric("leapcache_rpcs_total", {"method=\"DataPlane/TransferPut\"", "code=\"OK\""}), 1);
  const client::BlockHash key = TestHash(1);
  absl::StatusOr<client::LookupResult> hit = (*engine)->Lookup({ns.id, std::span(&key, 1), {}, 0, 16});
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_TRUE(hit->hit);
  EXPECT_FALSE((*engine)->transferring_through_channel());
  EXPECT_EQ(Metric("leapcache_rpcs_total", {"method=\"StateCache/LookupBatch\"", "code=\"OK\""}),
            1);
  EXPECT_EQ(Metric("leapcache_data_plane_transfer_channels"), 0);
}

// A raw engine: the channel's call by hand, the mailbox mapped twice (once through ShmMailbox,
// once as plain memory, before the name goes), and requests the client library never writes.
TEST_F(TransferChannelTest, MisdirectedAndGarbledRequestsGetTheirStatus) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-raw", 1, 2, 16);
  const client::NamespaceInfo ns = Register(spec);
  auto engine = Attach(TransferChannel::kRpc);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const uint64_t id = (*engine)->session_id();
  auto stub = v1::DataPlane::NewStub(
      grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    v1::OpenTransferChannelRequest request;
    request.set_session_id(id + 1000);
    auto call = stub->OpenTransferChannel(&context, request);
    v1::TransferChannelEvent event;
    EXPECT_FALSE(call->Read(&event));
    EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }

  grpc::ClientContext context;
  v1::OpenTransferChannelRequest request;
  request.set_session_id(id);
  auto call = stub->OpenTransferChannel(&context, request);
  v1::TransferChannelEvent event;
  ASSERT_TRUE(call->Read(&event));
  EXPECT_EQ(event.name().rfind("/leapcache-", 0), 0u) << event.name();
  const int fd = shm_open(event.name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  const size_t map_bytes = 256 + 2 * event.capacity();
  void* raw = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(raw, MAP_FAILED);
  auto box = base::ShmMailbox::Open(event.name());
  ASSERT_TRUE(box.ok()) << box.status();
  EXPECT_EQ((*box)->capacity(), event.capacity());
  {  // One channel per session: a second one while this one is open is refused.
    grpc::ClientContext second_context;
    auto second = stub->OpenTransferChannel(&second_context, request);
    v1::TransferChannelEvent second_event;
    EXPECT_FALSE(second->Read(&second_event));
    const grpc::Status refused = second->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << refused.error_message();
    EXPECT_NE(refused.error_message().find("already has a transfer channel open"),
              std::string::npos)
        << refused.error_message();
  }

  auto ask = [&](const std::string& bytes) -> v1::TransferChannelReply {
    std::vector<uint8_t> reply;
    const absl::Status st =
        (*box)->Call({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, &reply,
                     absl::Milliseconds(1), absl::Now() + absl::Seconds(30));
    EXPECT_TRUE(st.ok()) << st;
    v1::TransferChannelReply r;
    EXPECT_TRUE(r.ParseFromArray(reply.data(), static_cast<int>(reply.size())));
    return r;
  };
  const auto code = [](absl::StatusCode c) { return static_cast<int>(c); };
  v1::TransferChannelReply r = ask(std::string("\xff\xff\xff", 3));
  EXPECT_EQ(r.code(), code(absl::StatusCode::kInvalidArgument)) << r.message();
  EXPECT_NE(r.message().find("does not parse"), std::string::npos) << r.message();

  v1::TransferChannelRequest q;
  r = ask(q.SerializeAsString());
  EXPECT_EQ(r.code(), code(absl::StatusCode::kInvalidArgument)) << r.message();
  EXPECT_NE(r.message().find("names no get, gets, put or lookups"), std::string::npos)
      << r.message();

  v1::TransferGetRequest* get = q.mutable_get();
  get->set_session_id(id + 1);
  get->set_namespace_id(ns.id);
  const client::BlockHash key = TestHash(1);
  get->set_hash(std::string(key.begin(), key.end()));
  get->mutable_compact();
  get->set_buffer_id(1);
  r = ask(q.SerializeAsString());
  EXPECT_EQ(r.code(), code(absl::StatusCode::kInvalidArgument)) << r.message();
  EXPECT_NE(r.message().find("this channel serves"), std::string::npos) << r.message();

  // The channel's own session: an unknown buffer, then an unknown checkpoint.
  get->set_session_id(id);
  get->set_buffer_id(99);
  r = ask(q.SerializeAsString());
  EXPECT_EQ(r.code(), code(absl::StatusCode::kNotFound)) << r.message();
  EXPECT_FALSE(r.has_get());
  v1::TransferPutRequest* put = q.mutable_put();
  put->set_session_id(id);
  put->set_namespace_id(ns.id + 100);
  put->set_hash(std::string(key.begin(), key.end()));
  put->mutable_position()->set_tokens(16);
  put->mutable_position()->set_blocks(1);
  put->mutable_compact();
  put->set_buffer_id(99);
  r = ask(q.SerializeAsString());
  EXPECT_EQ(r.code(), code(absl::StatusCode::kNotFound)) << r.message();
  // Batches of gets: another session's, then more gets than the channel has room to answer
  // (refused before any runs), then one whose get fails alone.
  v1::TransferGetRequest one;  // the channel's session, an unknown buffer
  one.set_session_id(id);
  one.set_namespace_id(ns.id);
  one.set_hash(std::string(key.begin(), key.end()));
  one.mutable_compact();
  one.set_buffer_id(99);
  v1::TransferGetBatchRequest* batch = q.mutable_gets();
  batch->set_session_id(id + 1);
  r = ask(q.SerializeAsString());
  EXPECT_EQ(r.code(), code(absl::StatusCode::kInvalidArgument)) << r.message();
  EXPECT_NE(r.message().find("this channel serves"), std::string::npos) << r.message();
  batch->set_session_id(id);
  for (int i = 0; i < 200; ++i) *batch->add_gets() = one;
  r = ask(q.SerializeAsString());
  EXPECT_EQ(r.code(), code(absl::StatusCode::kResourceExhausted)) << r.message();
  EXPECT_NE(r.message().find("TransferGetBatch"), std::string::npos) << r.message();
  batch->mutable_gets()->DeleteSubrange(1, 199);
  r = ask(q.SerializeAsString());
  EXPECT_EQ(r.code(), 0) << r.message();
  ASSERT_EQ(r.gets().results_size(), 1);
  EXPECT_EQ(r.gets().results(0).code(), code(absl::StatusCode::kNotFound));
  EXPECT_FALSE(r.gets().results(0).has_get());
  EXPECT_EQ(Metric("leapcache_data_plane_transfer_channels"), 1) << "failed calls keep it";

  // A sequence number out of turn, written past the library: the server closes the channel.
  auto* request_seq = reinterpret_cast<std::atomic<uint32_t>*>(static_cast<uint8_t*>(raw) + 64);
  request_seq->fetch_add(5);
  grpc::Status ended = call->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << ended.error_message();
  EXPECT_NE(ended.error_message().find("does not follow"), std::string::npos)
      << ended.error_message();
  munmap(raw, map_bytes);
  EXPECT_LT(Until("leapcache_data_plane_transfer_channels", 0, absl::Seconds(10)),
            absl::Seconds(10));

  // The session still serves, and detaching it ends a channel open on it.
  grpc::ClientContext again_context;
  auto again = stub->OpenTransferChannel(&again_context, request);
  ASSERT_TRUE(again->Read(&event));
  EXPECT_TRUE((*engine)->Detach().ok());
  ended = again->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::NOT_FOUND) << ended.error_message();
  const client::ServerStats s = Stats();
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.leases, 0u);
}

TEST_F(TransferChannelTest, AKilledEngineLeavesNoChannel) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-killed", 1, 2, 16);
  const client::NamespaceInfo ns = Register(spec);
  absl::StatusOr<std::unique_ptr<Child>> engine = Child::Spawn(
      {LEAPCACHE_TRANSPORT_ENGINE_BIN, server_->target(), "channel", std::to_string(ns.id)});
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<std::string> line = (*engine)->ReadLine(absl::Seconds(60));
  ASSERT_TRUE(line.ok()) << line.status();
  ASSERT_EQ(*line, "ready");
  EXPECT_EQ(Metric("leapcache_data_plane_transfer_channels"), 1);
  EXPECT_EQ(Metric("leapcache_data_plane_channel_transfers_total", {"op=\"put\""}), 1);
  (*engine)->Signal(SIGKILL);
  EXPECT_LT(Until("leapcache_data_plane_transfer_channels", 0, absl::Seconds(20)),
            absl::Seconds(20));
  // Its put is there and nothing of it is pending; the server serves on.
  const client::ServerStats s = Stats();
  EXPECT_EQ(s.checkpoints, 1u);
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_TRUE(client_->Get({ns.id, TestHash(1), {}, std::nullopt}).ok());
}

class ChannelsOffTest : public TransferChannelTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    std::vector<std::string> args = TransferChannelTest::ServerArgs();
    args.push_back("--data-plane-transfer-channels=false");
    return args;
  }
};

TEST_F(ChannelsOffTest, EnginesKeepToTheRpcs) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-off", 1, 2, 16);
  const client::NamespaceInfo ns = Register(spec);
  for (TransferChannel mode : {TransferChannel::kAuto, TransferChannel::kSharedMemory}) {
    auto engine = Attach(mode);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<uint8_t> buffer = EncodeBlobs(spec, MakeStates(spec, 4));
    auto id = (*engine)->RegisterBuffer(buffer.data(), buffer.size(), client::MemoryKind::kHost);
    ASSERT_TRUE(id.ok()) << id.status();
    const absl::Status st =
        (*engine)->PutFrom(Target(ns.id, TestHash(7)), std::nullopt, *id, 0, buffer.size());
    if (mode == TransferChannel::kAuto) {
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_FALSE((*engine)->transferring_through_channel());
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
      EXPECT_NE(st.message().find("data_plane_transfer_channels is off"), std::string::npos) << st;
    }
  }
  EXPECT_EQ(Stats().checkpoints, 1u);
}

}  // namespace
}  // namespace leapcache::testing
