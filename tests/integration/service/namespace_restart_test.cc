// A namespace id kept across a server restart never reads another namespace's checkpoint. Two
// tenants whose namespaces want the same id (found by a birthday search over tenant names):
// before the restart x registers first and holds the id; after it y registers first, takes that
// id and stores its own 1-layer checkpoint under the hash of x's 2-layer one. x's engine, still
// holding its old id, is refused (FAILED_PRECONDITION naming the tag) rather than served y's
// blobs (alone and within a LookupBatch), and its client registers again, gets the new id and
// sees a miss (alone and in a batch); its next put and get
// go to its own namespace, byte for byte. The real server both times, on the same port.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "leapcache/v1/state_cache.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/process.h"
#include "tests/unit/core/test_util.h"

namespace leapcache::testing {
namespace {

const std::vector<std::string> kServerArgs = {"--memory-budget=64MiB", "--page-bytes=64KiB"};

core::NamespaceSpec CoreSpec(const client::NamespaceSpec& s) {
  core::NamespaceSpec c;
  c.tenant = s.tenant;
  c.model = {s.model.linear_layers, s.model.total_heads, s.model.dk, s.model.dv,
             s.model.kind == client::StateKind::kGdn ? StateKind::kGdn : StateKind::kKda};
  c.format = ToBlobSpec(s);
  return c;
}

std::unique_ptr<client::Client> Connect(const std::string& target) {
  client::ClientOptions options;
  options.target = target;
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Until the client's channel is up again after the restart.
void AwaitServing(client::Client& c) {
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<bool> serving = c.CheckHealth();
    if (serving.ok() && *serving) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL() << "the client did not reach the restarted server";
}

TEST(NamespaceRestartTest, AnIdKeptAcrossARestartNeverReadsAnotherNamespace) {
  // x: 2 layers, y: 1 layer; both want the same id.
  auto x_spec = [](const std::string& t) { return SmallNamespace(t, 2); };
  auto y_spec = [](const std::string& t) { return SmallNamespace(t, 1); };
  const auto [x, y] = core::testing::TenantsWithCollidingIds(
      [&](const std::string& t) { return CoreSpec(x_spec(t)); },
      [&](const std::string& t) { return CoreSpec(y_spec(t)); });
  const client::NamespaceSpec xs = x_spec(x), ys = y_spec(y);
  const client::BlockHash hash = TestHash(1);

  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(kServerArgs);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = (*server)->target();
  const int port = (*server)->grpc_port();
  std::unique_ptr<client::Client> engine_x = Connect(target);
  ASSERT_NE(engine_x, nullptr);
  absl::StatusOr<client::NamespaceInfo> nx = engine_x->RegisterNamespace(xs);
  ASSERT_TRUE(nx.ok()) << nx.status();
  EXPECT_EQ(nx->tag, core::NamespaceTag(CoreSpec(xs)));  // the server's tag is the core's
  const std::vector<uint8_t> x_blobs = EncodeBlobs(xs, MakeStates(xs, 1));
  ASSERT_TRUE(engine_x->PutCompact({nx->id, hash, {16, 1}, {}, absl::ZeroDuration()}, x_blobs).ok());

  absl::StatusOr<int> code = (*server)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  std::vector<std::string> args = kServerArgs;
  args.push_back(absl::StrCat("--listen=127.0.0.1:", port));
  server = ServerProcess::Start(args);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ((*server)->target(), target);

  // y registers first, takes x's old id and stores its checkpoint under x's hash.
  std::unique_ptr<client::Client> engine_y = Connect(target);
  ASSERT_NE(engine_y, nullptr);
  absl::StatusOr<client::NamespaceInfo> ny = engine_y->RegisterNamespace(ys);
  ASSERT_TRUE(ny.ok()) << ny.status();
  ASSERT_EQ(ny->id, nx->id);
  const std::vector<uint8_t> y_blobs = EncodeBlobs(ys, MakeStates(ys, 2));
  ASSERT_TRUE(engine_y->PutCompact({ny->id, hash, {16, 1}, {}, absl::ZeroDuration()}, y_blobs).ok());

  // x's old (id, tag) on the wire: refused, never y's checkpoint.
  auto stub = v1::StateCache::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  {
    v1::LookupRequest q;
    q.set_namespace_id(nx->id);
    q.set_namespace_tag(nx->tag);
    q.set_chain(std::string(reinterpret_cast<const char*>(hash.data()), hash.size()));
    q.set_block_tokens(16);
    v1::LookupResponse r;
    grpc::ClientContext ctx;
    const grpc::Status st = stub->Lookup(&ctx, q, &r);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    EXPECT_NE(st.error_message().find("namespace_tag"), std::string::npos) << st.error_message();
    EXPECT_FALSE(r.hit());
  }
  {
    v1::GetRequest q;
    q.set_namespace_id(nx->id);
    q.set_namespace_tag(nx->tag);
    q.set_hash(std::string(reinterpret_cast<const char*>(hash.data()), hash.size()));
    grpc::ClientContext ctx;
    auto reader = stub->Get(&ctx, q);
    v1::GetResponse r;
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }

  {
    // In a batch: the lookup's own result is refused, the call is not.
    v1::LookupBatchRequest q;
    v1::LookupRequest* one = q.add_lookups();
    one->set_namespace_id(nx->id);
    one->set_namespace_tag(nx->tag);
    one->set_chain(std::string(reinterpret_cast<const char*>(hash.data()), hash.size()));
    one->set_block_tokens(16);
    v1::LookupBatchResponse r;
    grpc::ClientContext ctx;
    const grpc::Status st = stub->LookupBatch(&ctx, q, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(r.results_size(), 1);
    EXPECT_EQ(r.results(0).code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(r.results(0).message().find("namespace_tag"), std::string::npos);
    EXPECT_FALSE(r.results(0).has_lookup());
  }

  // x's client notices, registers again (a new id: y holds the old one) and sees a miss, in a
  // batch (both lookups stale, one registration) and alone.
  AwaitServing(*engine_x);
  const client::LookupRequest stale{nx->id, std::span(&hash, 1), {}, 0, 16};
  const std::vector<client::LookupRequest> twice = {stale, stale};
  absl::StatusOr<std::vector<absl::StatusOr<client::LookupResult>>> misses =
      engine_x->LookupBatch(twice);
  ASSERT_TRUE(misses.ok()) << misses.status();
  ASSERT_EQ(misses->size(), 2u);
  for (const absl::StatusOr<client::LookupResult>& m : *misses) {
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_FALSE(m->hit);
  }
  absl::StatusOr<client::LookupResult> miss =
      engine_x->Lookup({nx->id, std::span(&hash, 1), {}, 0, 16});
  ASSERT_TRUE(miss.ok()) << miss.status();
  EXPECT_FALSE(miss->hit);
  // Its put and get under the id it holds go to its own namespace.
  ASSERT_TRUE(engine_x->PutCompact({nx->id, hash, {16, 1}, {}, absl::ZeroDuration()}, x_blobs).ok());
  absl::StatusOr<client::Checkpoint> got = engine_x->Get({nx->id, hash, {}, std::nullopt});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == x_blobs);
  EXPECT_EQ(got->layers, 2);
  absl::StatusOr<client::Checkpoint> theirs = engine_y->Get({ny->id, hash, {}, std::nullopt});
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_TRUE(theirs->bytes == y_blobs);

  engine_x.reset();
  engine_y.reset();
  code = (*server)->Stop();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace leapcache::testing
