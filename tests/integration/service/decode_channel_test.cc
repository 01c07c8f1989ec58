// Step channels (decode.proto, OpenStepChannel) against the real server: an engine killed with its
// channel open leaves no channel and no decode session behind; garbled, foreign and misdirected
// requests written into the mailbox get their status and leave the server serving; a server
// with channels off keeps engines on the stream. (decode_test runs whole trajectories through
// the channel and through the stream, bit for bit against the reference.)
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/loopback_http.h"
#include "base/shm_mailbox.h"
#include "leapcache/data_plane.h"
#include "leapcache/decode_session.h"
#include "leapcache/v1/decode.grpc.pb.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

constexpr int kDim = 128;

class DecodeChannelTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=64MiB", "--page-bytes=128KiB", "--compute-backend=cpu",
            "--decode-memory-budget=64MiB", "--decode-idle-timeout=2s"};
  }

  uint32_t RegisterGdn() {
    client::NamespaceSpec spec;
    spec.tenant = "channel";
    spec.model = {1, 2, kDim, kDim, client::StateKind::kGdn};
    spec.format = client::StorageFormat::Leap(8);
    return Register(spec).id;
  }

  // A gauge or counter of the server's /metrics without labels; -1 if absent.
  double Metric(const std::string& name) const {
    absl::StatusOr<base::HttpResponse> r = base::HttpGet(server_->metrics_port(), "/metrics");
    if (!r.ok()) return -1;
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      if (line.substr(0, name.size() + 1) != name + " ") continue;
      double v = 0;
      if (absl::SimpleAtod(line.substr(name.size() + 1), &v)) return v;
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

TEST_F(DecodeChannelTest, AKilledEngineLeavesNoChannelAndNoSession) {
  const uint32_t ns = RegisterGdn();
  absl::StatusOr<std::unique_ptr<Child>> engine =
      Child::Spawn({LEAPCACHE_CHANNEL_ENGINE_BIN, server_->target(), std::to_string(ns)});
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<std::string> stepped = (*engine)->ReadLine(absl::Seconds(60));
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  ASSERT_EQ(stepped->rfind("stepped ", 0), 0u) << *stepped;
  ASSERT_EQ(*(*engine)->ReadLine(absl::Seconds(30)), "ready");
  EXPECT_EQ(Metric("leapcache_decode_step_channels"), 1);
  EXPECT_EQ(Metric("leapcache_decode_sessions"), 1);

  (*engine)->Signal(SIGKILL);
  ASSERT_TRUE((*engine)->Wait(absl::Seconds(10)).ok());
  // The channel ends with the engine's connection; the session after the idle timeout (2 s).
  const absl::Duration channel_gone = Until("leapcache_decode_step_channels", 0, absl::Seconds(20));
  EXPECT_LT(channel_gone, absl::Seconds(20)) << "the killed engine's channel is still open";
  const absl::Duration session_gone = Until("leapcache_decode_sessions", 0, absl::Seconds(20));
  EXPECT_LT(session_gone, absl::Seconds(20)) << "the killed engine's session is still open";
  EXPECT_EQ(Metric("leapcache_decode_sessions_reaped_total"), 1);
  std::printf("killed engine: channel gone after %s, session after %s\n",
              absl::FormatDuration(channel_gone).c_str(),
              absl::FormatDuration(session_gone).c_str());

  // The server serves the next engine as before.
  absl::StatusOr<std::unique_ptr<Child>> next =
      Child::Spawn({LEAPCACHE_CHANNEL_ENGINE_BIN, server_->target(), std::to_string(ns)});
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE((*next)->ReadLine(absl::Seconds(60)).ok());
  EXPECT_EQ(*(*next)->ReadLine(absl::Seconds(30)), "ready");
  (*next)->Signal(SIGKILL);
  (void)(*next)->Wait(absl::Seconds(10));
}

// A raw engine: the channel's call by hand, the mailbox mapped twice (once through ShmMailbox,
// once as plain memory, before the name goes), and requests the client library would never write.
TEST_F(DecodeChannelTest, MisdirectedAndGarbledRequestsGetTheirStatus) {
  const uint32_t ns = RegisterGdn();
  client::ClientOptions options;
  options.target = server_->target();
  client::DecodeSessionOptions open;
  open.namespace_id = ns;
  open.slots = 2;
  open.step_channel = client::StepChannel::kStream;
  auto session = client::DecodeSession::Open(options, open);
  ASSERT_TRUE(session.ok()) << session.status();
  const uint64_t id = (*session)->info().id;

  auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
  auto stub = v1::Decode::NewStub(channel);
  {
    grpc::ClientContext context;
    v1::OpenStepChannelRequest request;
    request.set_session_id(id + 1000);
    auto call = stub->OpenStepChannel(&context, request);
    v1::StepChannelEvent event;
    EXPECT_FALSE(call->Read(&event));
    EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }

  grpc::ClientContext context;
  v1::OpenStepChannelRequest request;
  request.set_session_id(id);
  auto call = stub->OpenStepChannel(&context, request);
  v1::StepChannelEvent event;
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
    auto second = stub->OpenStepChannel(&second_context, request);
    v1::StepChannelEvent second_event;
    EXPECT_FALSE(second->Read(&second_event));
    const grpc::Status refused = second->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << refused.error_message();
    EXPECT_NE(refused.error_message().find("already has a step channel open"), std::string::npos)
        << refused.error_message();
  }

  auto ask = [&](const std::string& bytes) -> v1::StepChannelReply {
    std::vector<uint8_t> reply;
    const absl::Status st =
        (*box)->Call({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, &reply,
                     absl::Milliseconds(1), absl::Now() + absl::Seconds(30));
    EXPECT_TRUE(st.ok()) << st;
    v1::StepChannelReply r;
    EXPECT_TRUE(r.ParseFromArray(reply.data(), static_cast<int>(reply.size())));
    return r;
  };
  v1::StepChannelReply r = ask(std::string("\xff\xff\xff", 3));
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << r.message();
  EXPECT_NE(r.message().find("does not parse"), std::string::npos) << r.message();

  v1::StepRequest step;
  step.set_session_id(id + 1);
  step.add_slot(0);
  step.set_dtype(v1::DTYPE_FP32);
  step.mutable_buffers()->set_data_plane_session_id(12345);
  r = ask(step.SerializeAsString());
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << r.message();
  EXPECT_NE(r.message().find("this channel serves"), std::string::npos) << r.message();

  step.set_session_id(id);
  step.clear_buffers();
  r = ask(step.SerializeAsString());
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument)) << r.message();
  EXPECT_NE(r.message().find("data-plane steps only"), std::string::npos) << r.message();

  step.mutable_buffers()->set_data_plane_session_id(12345);
  r = ask(step.SerializeAsString());
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kNotFound)) << r.message();
  EXPECT_EQ(Metric("leapcache_decode_step_channels"), 1) << "failed steps keep the channel";

  // A sequence number out of turn, written past the library: the server closes the channel.
  auto* request_seq = reinterpret_cast<std::atomic<uint32_t>*>(static_cast<uint8_t*>(raw) + 64);
  request_seq->fetch_add(5);
  grpc::Status ended = call->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << ended.error_message();
  EXPECT_NE(ended.error_message().find("does not follow"), std::string::npos)
      << ended.error_message();
  munmap(raw, map_bytes);
  EXPECT_LT(Until("leapcache_decode_step_channels", 0, absl::Seconds(10)), absl::Seconds(10));

  // The server still serves the session, and closing the session ends a channel open on it.
  grpc::ClientContext again_context;
  auto again = stub->OpenStepChannel(&again_context, request);
  ASSERT_TRUE(again->Read(&event));
  EXPECT_TRUE((*session)->Close().ok());
  ended = again->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::NOT_FOUND) << ended.error_message();
}

class ChannelsOffTest : public DecodeChannelTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    std::vector<std::string> args = DecodeChannelTest::ServerArgs();
    args.push_back("--decode-step-channels=false");
    return args;
  }
};

TEST_F(ChannelsOffTest, EnginesKeepToTheStream) {
  const uint32_t ns = RegisterGdn();
  client::ClientOptions options;
  options.target = server_->target();
  client::AttachOptions attach;
  attach.transports = {client::Transport::kUcx};
  attach.ucx_transports = "tcp";
  client::EngineIdentity identity;
  identity.name = "stream-engine";
  auto engine = client::AttachedEngine::Attach(options, identity, attach);
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (client::StepChannel mode :
       {client::StepChannel::kAuto, client::StepChannel::kSharedMemory}) {
    client::DecodeSessionOptions open;
    open.namespace_id = ns;
    open.slots = 1;
    open.step_channel = mode;
    auto session = client::DecodeSession::Open(options, open);
    ASSERT_TRUE(session.ok()) << session.status();
    const std::vector<int32_t> slots = {0};
    const auto& info = (*session)->info();
    const uint64_t in = client::PackedStepInputBytes(info, 1, client::DType::kFp32);
    std::vector<float> buffer(
        (in + client::StepOutputBytes(info, 1, client::DType::kFp32)) / sizeof(float), 0.25f);
    auto id = (*engine)->RegisterBuffer(buffer.data(), buffer.size() * sizeof(float),
                                        client::MemoryKind::kHost);
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*session)->Reset(0).ok());
    client::DecodeBufferStep step;
    step.slot = slots;
    step.buffer = *id;
    step.output_offset = in;
    const absl::Status st = (*session)->StepInBuffer(**engine, step);
    if (mode == client::StepChannel::kAuto) {
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_FALSE((*session)->stepping_through_channel());
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
      EXPECT_NE(st.message().find("decode_step_channels is off"), std::string::npos) << st;
    }
  }
}

}  // namespace
}  // namespace leapcache::testing
