// Integration tests of the data plane (data_plane.proto) against the real leapcache-server
// binary: UCX transfers between the server and an engine in another process, the inline
// fallback, bad input, and the fault cases (engine killed or stalled mid-transfer: the put never
// becomes visible, the get fails cleanly, leases and reservations are released).
#include "leapcache/data_plane.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/loopback_http.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

using client::DenseEncoding;
using client::DType;
using client::Layout;

client::PutTarget Target(uint32_t ns, const client::BlockHash& key, int64_t blocks) {
  return {ns, key, {blocks * 16, blocks}, {}, absl::ZeroDuration()};
}

class DataPlaneTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=128MiB", "--page-bytes=64KiB"};
  }

  // An engine in this process, attached over `transports` (UCX over loopback tcp).
  absl::StatusOr<std::unique_ptr<client::AttachedEngine>> Attach(
      const std::string& name, std::vector<client::Transport> transports,
      client::TransferChannel channel = client::TransferChannel::kAuto) const {
    client::ClientOptions options;
    options.target = server_->target();
    client::EngineIdentity identity;
    identity.name = name;
    client::AttachOptions attach;
    attach.transports = std::move(transports);
    attach.ucx_transports = "tcp";
    attach.transfer_channel = channel;
    return client::AttachedEngine::Attach(options, identity, attach);
  }

  std::unique_ptr<v1::DataPlane::Stub> Stub() const {
    return v1::DataPlane::NewStub(
        grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  }

  // Waits (bounded) until `predicate` of the server's stats holds; the last stats either way.
  template <typename P>
  client::ServerStats WaitForStats(P predicate) {
    client::ServerStats s = Stats();
    for (int i = 0; i < 200 && !predicate(s); ++i) {
      absl::SleepFor(absl::Milliseconds(50));
      s = Stats();
    }
    return s;
  }

  // An engine process holding a registered host buffer (engine_main.cc, mode hold).
  struct HeldEngine {
    std::unique_ptr<Child> child;
    uint64_t session = 0;
    uint64_t buffer = 0;
  };
  HeldEngine StartHeldEngine(size_t bytes) {
    HeldEngine e;
    auto child = Child::Spawn(
        {LEAPCACHE_TRANSPORT_ENGINE_BIN, server_->target(), "hold", std::to_string(bytes)});
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return e;
    e.child = std::move(child).value();
    absl::StatusOr<std::string> line = e.child->ReadLine(absl::Seconds(30));
    EXPECT_TRUE(line.ok()) << line.status();
    if (!line.ok()) return e;
    const std::vector<std::string> words = absl::StrSplit(*line, ' ');
    EXPECT_EQ(words.size(), 4u) << *line;
    if (words.size() != 4 || words[0] != "session") return e;
    e.session = std::stoull(words[1]);
    e.buffer = std::stoull(words[3]);
    return e;
  }

  v1::TransferGetRequest GetRequest(const HeldEngine& e, uint32_t ns,
                                    const client::BlockHash& key) const {
    v1::TransferGetRequest q;
    q.set_session_id(e.session);
    q.set_namespace_id(ns);
    q.set_hash(std::string(key.begin(), key.end()));
    q.mutable_compact();
    q.set_buffer_id(e.buffer);
    return q;
  }
  v1::TransferPutRequest PutRequest(const HeldEngine& e, uint32_t ns, const client::BlockHash& key,
                                    uint64_t length, uint32_t crc) const {
    v1::TransferPutRequest q;
    q.set_session_id(e.session);
    q.set_namespace_id(ns);
    q.set_hash(std::string(key.begin(), key.end()));
    q.mutable_position()->set_tokens(16);
    q.mutable_position()->set_blocks(1);
    q.mutable_compact();
    q.set_buffer_id(e.buffer);
    q.set_length(length);
    q.set_crc32c(crc);
    return q;
  }
  grpc::StatusCode Keepalive(uint64_t session) const {
    v1::KeepaliveRequest q;
    q.set_session_id(session);
    v1::KeepaliveResponse r;
    grpc::ClientContext c;
    return Stub()->Keepalive(&c, q, &r).error_code();
  }
};

TEST_F(DataPlaneTest, EngineProcessPutsAndGetsOverUcxByteExact) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-transport", 2, 4, 32);
  const client::NamespaceInfo ns = Register(spec);
  absl::StatusOr<RunResult> run = RunProgram({LEAPCACHE_TRANSPORT_ENGINE_BIN, server_->target(),
                                              "roundtrip", std::to_string(ns.id), "2", "4", "32"},
                                             {}, absl::Seconds(120));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0) << run->output;
  EXPECT_EQ(run->output, "ok\n");
  // The engine's compact put is what any other client reads, byte for byte.
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 42));
  absl::StatusOr<client::Checkpoint> got = client_->Get({ns.id, TestHash(1, 7), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);
  const client::ServerStats s = Stats();
  EXPECT_EQ(s.checkpoints, 2u);
  EXPECT_EQ(s.leases, 0u);
  EXPECT_EQ(s.pending_puts, 0u);
}

TEST_F(DataPlaneTest, InlineTransportServesTheSameApi) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-inline", 2, 4, 16);
  const client::NamespaceInfo ns = Register(spec);
  auto engine = Attach("inline", {client::Transport::kInline});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->transport(), client::Transport::kInline);
  const std::vector<float> states = MakeStates(spec, 9);
  std::vector<uint8_t> buffer(states.size() * 4 + 64);
  const auto bytes = AsBytes(states);
  std::copy(bytes.begin(), bytes.end(), buffer.begin() + 64);
  auto id = (*engine)->RegisterBuffer(buffer.data(), buffer.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE((*engine)
                  ->PutFrom(Target(ns.id, TestHash(3), 1), DenseEncoding{DType::kFp32, Layout::kKV},
                            *id, 64, bytes.size())
                  .ok());
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  auto got = (*engine)->GetInto({ns.id, TestHash(3), {}, std::nullopt}, *id, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->total_bytes, blobs.size());
  EXPECT_TRUE(std::equal(blobs.begin(), blobs.end(), buffer.begin()));
  EXPECT_EQ(got->crc32c, client::Crc32c(blobs));
}

// An engine that pages states per layer reads each layer of a checkpoint into its own page, over
// UCX (through the transfer channel and through the RPC) and inline: each page holds exactly
// that layer's units (compact, and dense for a head range) with their CRC-32C, the header names
// the layer, and a range outside the namespace's layers is refused with nothing written.
TEST_F(DataPlaneTest, LayerRangesFillPerLayerPages) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-layer-pages", 4, 4, 16);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<float> states = MakeStates(spec, 17);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, states);
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(8), 1), blobs).ok());
  const size_t layer_bytes = blobs.size() / 4;
  // Dense fp32 [dv][dk] of heads 1..2, layer by layer: the whole get's layer slices.
  auto dense_all =
      client_->Get({ns.id, TestHash(8), {1, 3}, DenseEncoding{DType::kFp32, Layout::kVK}});
  ASSERT_TRUE(dense_all.ok()) << dense_all.status();
  const size_t dense_layer = dense_all->bytes.size() / 4;
  struct Path {
    client::Transport transport;
    client::TransferChannel channel;
  };
  for (const Path path : {Path{client::Transport::kUcx, client::TransferChannel::kSharedMemory},
                          Path{client::Transport::kUcx, client::TransferChannel::kRpc},
                          Path{client::Transport::kInline, client::TransferChannel::kAuto}}) {
    SCOPED_TRACE(absl::StrCat("transport ", static_cast<int>(path.transport), " channel ",
                              static_cast<int>(path.channel)));
    auto engine = Attach("layer-pages", {path.transport}, path.channel);
    ASSERT_TRUE(engine.ok()) << engine.status();
    constexpr size_t kPage = 64 << 10;
    std::vector<uint8_t> pages(4 * kPage, 0xA5);
    auto id = (*engine)->RegisterBuffer(pages.data(), pages.size(), client::MemoryKind::kHost);
    ASSERT_TRUE(id.ok()) << id.status();
    for (int layer : {2, 0, 3, 1}) {
      client::GetRequest q{ns.id, TestHash(8), {}, std::nullopt};
      q.layers = {layer, layer + 1};
      auto got = (*engine)->GetInto(q, *id, layer * kPage);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->first_layer, layer);
      EXPECT_EQ(got->layers, 1);
      ASSERT_EQ(got->total_bytes, layer_bytes);
      const std::vector<uint8_t> want(blobs.begin() + layer * layer_bytes,
                                      blobs.begin() + (layer + 1) * layer_bytes);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), pages.begin() + layer * kPage))
          << "layer " << layer;
      EXPECT_EQ(got->crc32c, client::Crc32c(want));
      EXPECT_EQ(pages[layer * kPage + layer_bytes], 0xA5) << "nothing past the layer";
    }
    client::GetRequest dense{ns.id, TestHash(8), {1, 3}, DenseEncoding{DType::kFp32, Layout::kVK}};
    dense.layers = {1, 3};
    auto got = (*engine)->GetInto(dense, *id, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->total_bytes, 2 * dense_layer);
    EXPECT_TRUE(std::equal(dense_all->bytes.begin() + dense_layer,
                           dense_all->bytes.begin() + 3 * dense_layer, pages.begin()));
    std::fill(pages.begin(), pages.end(), 0xA5);
    for (const client::LayerRange bad : {client::LayerRange{2, 2}, client::LayerRange{3, 5},
                                         client::LayerRange{4, 5}, client::LayerRange{2, 1}}) {
      client::GetRequest q{ns.id, TestHash(8), {}, std::nullopt};
      q.layers = bad;
      auto refused = (*engine)->GetInto(q, *id, 0);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
          << bad.begin << ".." << bad.end << ": " << refused.status();
    }
    EXPECT_TRUE(std::all_of(pages.begin(), pages.end(), [](uint8_t x) { return x == 0xA5; }));
  }
  EXPECT_EQ(Stats().leases, 0u);
}

// A batch of gets answers each exactly as GetInto would, in order, over UCX (the transfer
// channel, split into as many channel calls as its mailbox holds answers for, and the RPC) and
// inline: per-layer pages of one checkpoint, a whole other one, and gets that fail alone (a
// missing key, a bad layer range, an unknown buffer) without touching the others' bytes. The
// RPC refuses a batch of no gets or of another session's get as a whole.
TEST_F(DataPlaneTest, GetBatchesAnswerEachGetAsGetIntoWould) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-get-batch", 4, 2, 16);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> a = EncodeBlobs(spec, MakeStates(spec, 21));
  const std::vector<uint8_t> b = EncodeBlobs(spec, MakeStates(spec, 22));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(30), 1), a).ok());
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(31), 1), b).ok());
  const size_t layer = a.size() / 4;
  struct Path {
    client::Transport transport;
    client::TransferChannel channel;
  };
  for (const Path path : {Path{client::Transport::kUcx, client::TransferChannel::kSharedMemory},
                          Path{client::Transport::kUcx, client::TransferChannel::kRpc},
                          Path{client::Transport::kInline, client::TransferChannel::kAuto}}) {
    SCOPED_TRACE(absl::StrCat("transport ", static_cast<int>(path.transport), " channel ",
                              static_cast<int>(path.channel)));
    auto engine = Attach("get-batch", {path.transport}, path.channel);
    ASSERT_TRUE(engine.ok()) << engine.status();
    // 300 pages of one layer each: more gets than one channel call carries.
    constexpr size_t kPage = 8 << 10;
    constexpr size_t kPages = 300;
    ASSERT_LE(a.size(), 4 * kPage);
    std::vector<uint8_t> pages(kPages * kPage, 0xA5);
    auto id = (*engine)->RegisterBuffer(pages.data(), pages.size(), client::MemoryKind::kHost);
    ASSERT_TRUE(id.ok()) << id.status();
    std::vector<client::GetItem> items;
    for (size_t p = 0; p < kPages - 8; ++p) {  // layer p % 4 of a into page p
      client::GetItem item{{ns.id, TestHash(30), {}, std::nullopt}, *id, p * kPage};
      item.request.layers = {static_cast<int>(p % 4), static_cast<int>(p % 4) + 1};
      items.push_back(item);
    }
    const size_t whole = items.size();
    items.push_back({{ns.id, TestHash(31), {}, std::nullopt}, *id, (kPages - 8) * kPage});
    const size_t missing = items.size();
    items.push_back({{ns.id, TestHash(32), {}, std::nullopt}, *id, (kPages - 3) * kPage});
    const size_t bad_layers = items.size();
    items.push_back({{ns.id, TestHash(30), {}, std::nullopt}, *id, (kPages - 2) * kPage});
    items.back().request.layers = {3, 9};
    const size_t bad_buffer = items.size();
    items.push_back({{ns.id, TestHash(30), {}, std::nullopt}, *id + 100, 0});
    auto got = (*engine)->GetBatch(items);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), items.size());
    EXPECT_EQ((*engine)->transferring_through_channel(),
              path.channel == client::TransferChannel::kSharedMemory);
    for (size_t p = 0; p < whole; ++p) {
      const absl::StatusOr<client::TransferredCheckpoint>& r = (*got)[p];
      ASSERT_TRUE(r.ok()) << p << ": " << r.status();
      const size_t l = p % 4;
      EXPECT_EQ(r->first_layer, static_cast<int>(l));
      ASSERT_EQ(r->total_bytes, layer);
      EXPECT_TRUE(
          std::equal(a.begin() + l * layer, a.begin() + (l + 1) * layer, pages.begin() + p * kPage))
          << "page " << p;
    }
    ASSERT_TRUE((*got)[whole].ok()) << (*got)[whole].status();
    EXPECT_TRUE(std::equal(b.begin(), b.end(), pages.begin() + (kPages - 8) * kPage));
    EXPECT_EQ((*got)[missing].status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ((*got)[bad_layers].status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ((*got)[bad_buffer].status().code(), absl::StatusCode::kNotFound);
    for (size_t p = kPages - 3; p < kPages; ++p) {
      EXPECT_TRUE(std::all_of(pages.begin() + p * kPage, pages.begin() + (p + 1) * kPage,
                              [](uint8_t x) { return x == 0xA5; }))
          << "page " << p << " of a failed get";
    }
    EXPECT_EQ((*engine)->GetBatch({}).status().code(), absl::StatusCode::kInvalidArgument);
    if (path.transport == client::Transport::kUcx) {
      auto stub = Stub();
      v1::TransferGetBatchRequest q;
      q.set_session_id((*engine)->session_id());
      v1::TransferGetBatchResponse r;
      grpc::ClientContext c1;
      EXPECT_EQ(stub->TransferGetBatch(&c1, q, &r).error_code(),
                grpc::StatusCode::INVALID_ARGUMENT);
      q.add_gets()->set_session_id((*engine)->session_id() + 1);
      grpc::ClientContext c2;
      const grpc::Status other = stub->TransferGetBatch(&c2, q, &r);
      EXPECT_EQ(other.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << other.error_message();
      EXPECT_NE(other.error_message().find("names session"), std::string::npos);
    }
  }
  EXPECT_EQ(Stats().leases, 0u);
}

// The value of the series `name` whose label set holds every one of `labels`, from a /metrics
// body; -1 if absent.
double Series(const std::string& body, const std::string& name,
              const std::vector<std::string>& labels) {
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, name + "{")) continue;
    bool all = true;
    for (const std::string& l : labels) all = all && absl::StrContains(line, l);
    double v = 0;
    if (all && absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) return v;
  }
  return -1;
}

TEST_F(DataPlaneTest, TransfersAreCountedAndTimedPhaseByPhaseInTheMetrics) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-phases", 2, 4, 16);
  const client::NamespaceInfo ns = Register(spec);
  // Through the RPCs, so that their own metrics count them (transfer_channel_test counts the
  // channel's).
  auto engine = Attach("phases", {client::Transport::kUcx}, client::TransferChannel::kRpc);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 5));
  std::vector<uint8_t> buffer(blobs);
  auto id = (*engine)->RegisterBuffer(buffer.data(), buffer.size(), client::MemoryKind::kHost);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(
      (*engine)->PutFrom(Target(ns.id, TestHash(4), 1), std::nullopt, *id, 0, blobs.size()).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*engine)->GetInto({ns.id, TestHash(4), {}, std::nullopt}, *id, 0).ok());
  }
  auto missing = (*engine)->GetInto({ns.id, TestHash(99), {}, std::nullopt}, *id, 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<base::HttpResponse> r = base::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->status, 200);
  const std::string& m = r->body;
  EXPECT_EQ(Series(m, "leapcache_data_plane_transfers_total", {"op=\"get\"", "code=\"OK\""}), 3);
  EXPECT_EQ(Series(m, "leapcache_data_plane_transfers_total", {"op=\"get\"", "code=\"NOT_FOUND\""}),
            1);
  EXPECT_EQ(Series(m, "leapcache_data_plane_transfers_total", {"op=\"put\"", "code=\"OK\""}), 1);
  // Host memory over UCX: nothing moved device to device.
  EXPECT_EQ(Series(m, "leapcache_data_plane_device_transfers_total", {"op=\"get\""}), 0);
  EXPECT_EQ(Series(m, "leapcache_data_plane_device_transfers_total", {"op=\"put\""}), 0);
  // Successful transfers only, every phase of the op once per transfer; none of the other op's.
  for (const char* phase : {"session", "open", "list", "move"}) {
    const std::string label = absl::StrCat("phase=\"", phase, "\"");
    EXPECT_EQ(Series(m, "leapcache_data_plane_phase_seconds_count", {"op=\"get\"", label}), 3)
        << phase;
  }
  for (const char* phase : {"session", "open", "move", "commit"}) {
    const std::string label = absl::StrCat("phase=\"", phase, "\"");
    EXPECT_EQ(Series(m, "leapcache_data_plane_phase_seconds_count", {"op=\"put\"", label}), 1)
        << phase;
  }
  EXPECT_EQ(
      Series(m, "leapcache_data_plane_phase_seconds_count", {"op=\"get\"", "phase=\"commit\""}),
      -1);
  // Moving the bytes takes time; the RPCs are labelled by their method.
  EXPECT_GT(Series(m, "leapcache_data_plane_phase_seconds_sum", {"op=\"get\"", "phase=\"move\""}),
            0);
  EXPECT_EQ(Series(m, "leapcache_rpcs_total", {"method=\"DataPlane/TransferGet\"", "code=\"OK\""}),
            3);
}

TEST_F(DataPlaneTest, BadInputGetsPreciseErrorsAndChangesNothing) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-bad", 2, 4, 16);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 1));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(1), 1), blobs).ok());
  HeldEngine e = StartHeldEngine(blobs.size());
  ASSERT_NE(e.session, 0u);
  auto stub = Stub();

  {  // A checkpoint that does not fit at the offset: nothing written, lease released.
    v1::TransferGetRequest q = GetRequest(e, ns.id, TestHash(1));
    q.set_offset(1);
    v1::TransferGetResponse r;
    grpc::ClientContext c;
    EXPECT_EQ(stub->TransferGet(&c, q, &r).error_code(), grpc::StatusCode::OUT_OF_RANGE);
  }
  {  // Unknown buffer, unknown session, unknown checkpoint.
    v1::TransferGetRequest q = GetRequest(e, ns.id, TestHash(1));
    q.set_buffer_id(99);
    v1::TransferGetResponse r;
    grpc::ClientContext c;
    EXPECT_EQ(stub->TransferGet(&c, q, &r).error_code(), grpc::StatusCode::NOT_FOUND);
    q = GetRequest(e, ns.id, TestHash(2));
    grpc::ClientContext c2;
    EXPECT_EQ(stub->TransferGet(&c2, q, &r).error_code(), grpc::StatusCode::NOT_FOUND);
    q = GetRequest(e, ns.id, TestHash(1));
    q.set_session_id(e.session + 1000);
    grpc::ClientContext c3;
    EXPECT_EQ(stub->TransferGet(&c3, q, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {  // A put whose checksum does not match the engine's bytes: DATA_LOSS, never visible.
    v1::TransferPutRequest q = PutRequest(e, ns.id, TestHash(5), blobs.size(), 12345);
    v1::TransferPutResponse r;
    grpc::ClientContext c;
    EXPECT_EQ(stub->TransferPut(&c, q, &r).error_code(), grpc::StatusCode::DATA_LOSS);
    // A length that is not the put's size: INVALID_ARGUMENT; past the buffer: OUT_OF_RANGE.
    q = PutRequest(e, ns.id, TestHash(5), blobs.size() - 1, 0);
    grpc::ClientContext c2;
    EXPECT_EQ(stub->TransferPut(&c2, q, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    q = PutRequest(e, ns.id, TestHash(5), blobs.size(), 0);
    q.set_offset(8);
    grpc::ClientContext c3;
    EXPECT_EQ(stub->TransferPut(&c3, q, &r).error_code(), grpc::StatusCode::OUT_OF_RANGE);
  }
  {  // Descriptors of another transport or memory kind.
    v1::RegisterBufferRequest q;
    q.set_session_id(e.session);
    q.mutable_buffer()->set_transport(v1::TRANSPORT_KIND_CUDA_IPC);
    q.mutable_buffer()->set_memory(v1::MEMORY_KIND_HOST);
    q.mutable_buffer()->set_address(4096);
    q.mutable_buffer()->set_bytes(4096);
    q.mutable_buffer()->set_remote_key("x");
    v1::RegisterBufferResponse r;
    grpc::ClientContext c;
    EXPECT_EQ(stub->RegisterBuffer(&c, q, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    q.mutable_buffer()->set_transport(v1::TRANSPORT_KIND_UCX);
    q.mutable_buffer()->set_memory(v1::MEMORY_KIND_UNSPECIFIED);
    grpc::ClientContext c2;
    EXPECT_EQ(stub->RegisterBuffer(&c2, q, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {  // Attach: no name, no offers, no common transport.
    v1::AttachRequest q;
    v1::AttachResponse r;
    q.add_offers()->set_kind(v1::TRANSPORT_KIND_INLINE);
    grpc::ClientContext c;
    EXPECT_EQ(stub->Attach(&c, q, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    q.mutable_identity()->set_name("e");
    q.clear_offers();
    grpc::ClientContext c2;
    EXPECT_EQ(stub->Attach(&c2, q, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    q.add_offers()->set_kind(v1::TRANSPORT_KIND_NCCL);
    grpc::ClientContext c3;
    EXPECT_EQ(stub->Attach(&c3, q, &r).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  const client::ServerStats s = Stats();
  EXPECT_EQ(s.checkpoints, 1u);
  EXPECT_EQ(s.pending_puts, 0u);
  EXPECT_EQ(s.leases, 0u);
  EXPECT_EQ(client_->Get({ns.id, TestHash(5), {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
  // The session survived the bad calls.
  EXPECT_EQ(Keepalive(e.session), grpc::StatusCode::OK);
}

TEST_F(DataPlaneTest, EngineKilledMidPutLeavesNothingVisible) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-killed-put", 4, 8, 128);
  const client::NamespaceInfo ns = Register(spec);
  const uint64_t bytes = 4u * 8u * ns.blob_bytes;
  HeldEngine e = StartHeldEngine(bytes);
  ASSERT_NE(e.session, 0u);
  // Stopped, the engine cannot progress its worker: over tcp the service's reads stall.
  e.child->Signal(SIGSTOP);
  grpc::Status put_status;
  std::thread put([&] {
    v1::TransferPutRequest q = PutRequest(e, ns.id, TestHash(1), bytes, 0);
    v1::TransferPutResponse r;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    put_status = Stub()->TransferPut(&c, q, &r);
  });
  const client::ServerStats mid = WaitForStats([](const auto& s) { return s.pending_puts == 1; });
  EXPECT_EQ(mid.pending_puts, 1u);
  e.child->Signal(SIGKILL);
  put.join();
  EXPECT_EQ(put_status.error_code(), grpc::StatusCode::UNAVAILABLE) << put_status.error_message();
  const client::ServerStats after = Stats();
  EXPECT_EQ(after.pending_puts, 0u);
  EXPECT_EQ(after.checkpoints, 0u);
  EXPECT_EQ(after.puts_committed, 0u);
  EXPECT_EQ(client_->Get({ns.id, TestHash(1), {}, std::nullopt}).status().code(),
            absl::StatusCode::kNotFound);
  // The failed transport ended the session.
  EXPECT_EQ(Keepalive(e.session), grpc::StatusCode::NOT_FOUND);
}

TEST_F(DataPlaneTest, EngineKilledMidGetFailsCleanlyAndReleasesTheLease) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-killed-get", 4, 8, 128);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 3));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(1), 1), blobs).ok());
  HeldEngine e = StartHeldEngine(blobs.size());
  ASSERT_NE(e.session, 0u);
  e.child->Signal(SIGSTOP);
  grpc::Status get_status;
  std::thread get([&] {
    v1::TransferGetRequest q = GetRequest(e, ns.id, TestHash(1));
    v1::TransferGetResponse r;
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    get_status = Stub()->TransferGet(&c, q, &r);
  });
  const client::ServerStats mid = WaitForStats([](const auto& s) { return s.leases == 1; });
  EXPECT_EQ(mid.leases, 1u);
  e.child->Signal(SIGKILL);
  get.join();
  EXPECT_EQ(get_status.error_code(), grpc::StatusCode::UNAVAILABLE) << get_status.error_message();
  EXPECT_EQ(Stats().leases, 0u);
  EXPECT_EQ(Keepalive(e.session), grpc::StatusCode::NOT_FOUND);
  // The checkpoint itself is intact for everyone else.
  absl::StatusOr<client::Checkpoint> got = client_->Get({ns.id, TestHash(1), {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == blobs);
}

TEST_F(DataPlaneTest, StalledEngineGetTimesOutAndReleasesTheLease) {
  const client::NamespaceSpec spec = SmallNamespace("tenant-stalled", 4, 8, 128);
  const client::NamespaceInfo ns = Register(spec);
  const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 4));
  ASSERT_TRUE(client_->PutCompact(Target(ns.id, TestHash(1), 1), blobs).ok());
  HeldEngine e = StartHeldEngine(blobs.size());
  ASSERT_NE(e.session, 0u);
  e.child->Signal(SIGSTOP);
  v1::TransferGetRequest q = GetRequest(e, ns.id, TestHash(1));
  v1::TransferGetResponse r;
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  EXPECT_EQ(Stub()->TransferGet(&c, q, &r).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The service gives up at the same deadline; its handler then releases the lease and ends
  // the session (the transfer could not be recalled).
  EXPECT_EQ(WaitForStats([](const auto& s) { return s.leases == 0; }).leases, 0u);
  for (int i = 0; i < 100 && Keepalive(e.session) != grpc::StatusCode::NOT_FOUND; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(Keepalive(e.session), grpc::StatusCode::NOT_FOUND);
  e.child->Signal(SIGKILL);
}

TEST_F(DataPlaneTest, DetachEndsTheSession) {
  auto engine = Attach("d", {client::Transport::kUcx});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->transport(), client::Transport::kUcx);
  const uint64_t session = (*engine)->session_id();
  EXPECT_EQ(Keepalive(session), grpc::StatusCode::OK);
  ASSERT_TRUE((*engine)->Detach().ok());
  EXPECT_EQ(Keepalive(session), grpc::StatusCode::NOT_FOUND);
  std::vector<uint8_t> buf(64);
  EXPECT_EQ(
      (*engine)->RegisterBuffer(buf.data(), buf.size(), client::MemoryKind::kHost).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace leapcache::testing
