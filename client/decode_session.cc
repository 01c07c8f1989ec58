#include "leapcache/decode_session.h"

#include <grpcpp/grpcpp.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/channel.h"
#include "client/grpc_status_conversion.h"
#include "client/mailbox_channel.h"
#include "client/wire_convert.h"
#include "leapcache/v1/decode.grpc.pb.h"

namespace leapcache::client {
namespace {

v1::DType ToProto(DType d) { return d == DType::kBf16 ? v1::DTYPE_BF16 : v1::DTYPE_FP32; }
size_t ElementBytes(DType d) { return d == DType::kBf16 ? 2 : 4; }

}  // namespace

uint64_t PackedStepInputBytes(const DecodeSessionInfo& info, size_t batch, DType dtype) {
  const uint64_t bh = batch * static_cast<uint64_t>(info.heads.size());
  return bh * (2 * info.dk + info.dv) * ElementBytes(dtype) +
         bh * (info.gate_size() + 1) * sizeof(float);
}

uint64_t StepOutputBytes(const DecodeSessionInfo& info, size_t batch, DType out_dtype) {
  return batch * static_cast<uint64_t>(info.heads.size()) * info.dv * ElementBytes(out_dtype);
}

struct DecodeSession::Impl {
  ClientOptions options;
  DecodeSessionInfo info;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Decode::Stub> stub;
  bool closed = false;
  // The step stream, open from the first Step until a failure or Close.
  std::unique_ptr<grpc::ClientContext> stream_context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StepRequest, v1::StepResponse>> stream;
  v1::StepRequest request;
  v1::StepResponse response;
  // The step channel (its OpenStepChannel call and mailbox), from the first StepInBuffer that
  // got one until a failure or Close. `no_channel`: kAuto found none to be had, so steps keep to
  // the stream.
  std::unique_ptr<MailboxChannel> step_channel_call;
  bool no_channel = false;
  bool last_through_channel = false;
  std::string request_bytes;
  std::vector<uint8_t> reply_bytes;

  void Unary(grpc::ClientContext* context) const {
    context->set_deadline(DeadlineAfter(options.rpc_timeout));
  }
  // Sends `request` on the step stream (opened on first use) and reads its answer.
  absl::Status Exchange() {
    if (stream == nullptr) {
      stream_context = std::make_unique<grpc::ClientContext>();
      stream = stub->Step(stream_context.get());
    }
    if (!stream->Write(request) || !stream->Read(&response)) return FinishStream();
    return absl::OkStatus();
  }
  // Ends the stream and returns its status (the server's reason when it ended it).
  absl::Status FinishStream() {
    stream->WritesDone();
    grpc::Status st = stream->Finish();
    stream.reset();
    stream_context.reset();
    if (st.ok()) return absl::UnavailableError("the decode stream ended");
    return FromGrpcStatus(st);
  }

  // Asks for a step channel and maps its mailbox.
  absl::Status OpenChannel() {
    absl::StatusOr<std::unique_ptr<MailboxChannel>> opened =
        MailboxChannel::Open<v1::StepChannelEvent>([&](grpc::ClientContext* c) {
          v1::OpenStepChannelRequest open;
          open.set_session_id(info.id);
          return stub->OpenStepChannel(c, open);
        });
    if (!opened.ok()) return opened.status();
    step_channel_call = *std::move(opened);
    return absl::OkStatus();
  }
  bool channel_open() const { return step_channel_call != nullptr && step_channel_call->open(); }
  // Ends the channel (the service's side then ends the call).
  void EndChannel() { step_channel_call.reset(); }
  // One step through the channel: `request` serialized into the mailbox, its reply's status.
  absl::Status ChannelStep() {
    request.SerializeToString(&request_bytes);
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(request_bytes.data()),
                                         request_bytes.size());
    // While the channel's call is up, its connection is READY; a service that died takes it down.
    const auto alive = [this] { return channel->GetState(false) == GRPC_CHANNEL_READY; };
    if (absl::Status st = step_channel_call->Call(bytes, &reply_bytes, channel_spin,
                                                  absl::Now() + options.rpc_timeout, alive);
        !st.ok()) {
      EndChannel();
      return st;
    }
    v1::StepChannelReply reply;
    if (!reply.ParseFromArray(reply_bytes.data(), static_cast<int>(reply_bytes.size()))) {
      EndChannel();
      return absl::DataLossError("the step channel's reply does not parse");
    }
    std::optional<absl::Status> st = ReplyStatus(reply.code(), reply.message());
    if (!st.has_value()) {
      EndChannel();
      return absl::DataLossError(absl::StrCat("the step channel replied code ", reply.code()));
    }
    return *st;
  }
  absl::Duration channel_spin;
  StepChannel step_channel = StepChannel::kAuto;
};

DecodeSession::DecodeSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DecodeSession::~DecodeSession() { (void)Close(); }

const DecodeSessionInfo& DecodeSession::info() const { return impl_->info; }

absl::StatusOr<std::unique_ptr<DecodeSession>> DecodeSession::Open(
    const ClientOptions& client, const DecodeSessionOptions& options) {
  if (options.slots <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots must be positive (got ", options.slots, ")"));
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectChannel(client);
  if (!channel.ok()) return channel.status();
  auto impl = std::make_unique<Impl>();
  impl->options = client;
  impl->channel = *std::move(channel);
  impl->stub = v1::Decode::NewStub(impl->channel);
  impl->step_channel = options.step_channel;
  impl->channel_spin = options.channel_spin;
  impl->no_channel = options.step_channel == StepChannel::kStream;

  v1::OpenDecodeSessionRequest request;
  request.set_namespace_id(options.namespace_id);
  request.set_namespace_tag(options.namespace_tag);
  bool present = false;
  client::ToProto(options.heads, &present, request.mutable_heads());
  if (!present) request.clear_heads();
  request.set_slots(static_cast<uint32_t>(options.slots));
  request.set_l2norm_qk(options.l2norm_qk);
  request.set_scale(options.scale);
  v1::OpenDecodeSessionResponse response;
  grpc::ClientContext context;
  impl->Unary(&context);
  if (grpc::Status st = impl->stub->OpenSession(&context, request, &response); !st.ok()) {
    return FromGrpcStatus(st);
  }
  DecodeSessionInfo& info = impl->info;
  info.id = response.session_id();
  info.layers = static_cast<int>(response.layers());
  info.heads = FromProto(response.heads());
  info.dk = static_cast<int>(response.dk());
  info.dv = static_cast<int>(response.dv());
  info.kind = response.kind() == v1::STATE_KIND_KDA ? StateKind::kKda : StateKind::kGdn;
  info.backend = response.backend();
  info.state_bytes = response.state_bytes();
  return std::unique_ptr<DecodeSession>(new DecodeSession(std::move(impl)));
}

absl::Status DecodeSession::Step(const DecodeStep& step, std::span<uint8_t> o) {
  Impl& m = *impl_;
  if (m.closed) return absl::FailedPreconditionError("the decode session is closed");
  const size_t bh = step.slot.size() * static_cast<size_t>(m.info.heads.size());
  const size_t want_o = bh * m.info.dv * ElementBytes(step.out_dtype);
  if (o.size() != want_o) {
    return absl::InvalidArgumentError(
        absl::StrCat("o holds ", o.size(), " bytes, the step writes ", want_o));
  }
  v1::StepRequest& r = m.request;
  r.clear_buffers();
  r.set_session_id(m.info.id);
  r.set_layer(static_cast<uint32_t>(step.layer));
  r.mutable_slot()->Assign(step.slot.begin(), step.slot.end());
  r.set_dtype(ToProto(step.dtype));
  r.set_out_dtype(ToProto(step.out_dtype));
  r.set_q(step.q.data(), step.q.size());
  r.set_k(step.k.data(), step.k.size());
  r.set_v(step.v.data(), step.v.size());
  r.set_g(step.g.data(), step.g.size_bytes());
  r.set_beta(step.beta.data(), step.beta.size_bytes());
  if (absl::Status st = m.Exchange(); !st.ok()) return st;
  if (m.response.o().size() != o.size()) {
    (void)m.FinishStream();
    return absl::DataLossError(absl::StrCat("the server returned ", m.response.o().size(),
                                            " output bytes, expected ", o.size()));
  }
  std::memcpy(o.data(), m.response.o().data(), o.size());
  return absl::OkStatus();
}

absl::Status DecodeSession::StepInBuffer(AttachedEngine& engine, const DecodeBufferStep& step) {
  Impl& m = *impl_;
  if (m.closed) return absl::FailedPreconditionError("the decode session is closed");
  const uint64_t in_bytes = PackedStepInputBytes(m.info, step.slot.size(), step.dtype);
  const uint64_t out_bytes = StepOutputBytes(m.info, step.slot.size(), step.out_dtype);
  return engine.RunStepTransfer(
      step.buffer, step.input_offset, in_bytes, step.output_offset, out_bytes,
      [&](uint64_t session, uint64_t remote_buffer) -> absl::Status {
        v1::StepRequest& r = m.request;
        r.Clear();
        r.set_session_id(m.info.id);
        r.set_layer(static_cast<uint32_t>(step.layer));
        r.mutable_slot()->Assign(step.slot.begin(), step.slot.end());
        r.set_dtype(ToProto(step.dtype));
        r.set_out_dtype(ToProto(step.out_dtype));
        v1::StepBuffers* b = r.mutable_buffers();
        b->set_data_plane_session_id(session);
        b->set_buffer_id(remote_buffer);
        b->set_input_offset(step.input_offset);
        b->set_output_offset(step.output_offset);
        if (!m.channel_open() && !m.no_channel) {
          if (absl::Status st = m.OpenChannel(); !st.ok()) {
            if (m.step_channel == StepChannel::kSharedMemory) {
              return absl::Status(st.code(), absl::StrCat("no step channel: ", st.message()));
            }
            m.no_channel = true;  // kAuto: another host, or a server that serves none
          }
        }
        m.last_through_channel = m.channel_open();
        return m.last_through_channel ? m.ChannelStep() : m.Exchange();
      });
}

bool DecodeSession::stepping_through_channel() const { return impl_->last_through_channel; }

absl::Status DecodeSession::Reset(int slot) {
  v1::ResetSlotRequest request;
  request.set_session_id(impl_->info.id);
  request.set_slot(static_cast<uint32_t>(slot));
  v1::ResetSlotResponse response;
  grpc::ClientContext context;
  impl_->Unary(&context);
  return FromGrpcStatus(impl_->stub->ResetSlot(&context, request, &response));
}

absl::StatusOr<Position> DecodeSession::Load(int slot, const BlockHash& hash) {
  v1::LoadSlotRequest request;
  request.set_session_id(impl_->info.id);
  request.set_slot(static_cast<uint32_t>(slot));
  request.set_hash(HashBytes(hash));
  v1::LoadSlotResponse response;
  grpc::ClientContext context;
  impl_->Unary(&context);
  if (grpc::Status st = impl_->stub->LoadSlot(&context, request, &response); !st.ok()) {
    return FromGrpcStatus(st);
  }
  return FromProto(response.position());
}

absl::Status DecodeSession::Commit(int slot, const BlockHash& hash, const Position& position) {
  v1::CommitSlotRequest request;
  request.set_session_id(impl_->info.id);
  request.set_slot(static_cast<uint32_t>(slot));
  request.set_hash(HashBytes(hash));
  client::ToProto(position, request.mutable_position());
  v1::CommitSlotResponse response;
  grpc::ClientContext context;
  impl_->Unary(&context);
  return FromGrpcStatus(impl_->stub->CommitSlot(&context, request, &response));
}

absl::Status DecodeSession::Close() {
  Impl& m = *impl_;
  if (m.closed) return absl::OkStatus();
  m.closed = true;
  m.EndChannel();
  if (m.stream != nullptr) {
    m.stream->WritesDone();
    (void)m.stream->Finish();
    m.stream.reset();
    m.stream_context.reset();
  }
  v1::CloseDecodeSessionRequest request;
  request.set_session_id(m.info.id);
  v1::CloseDecodeSessionResponse response;
  grpc::ClientContext context;
  m.Unary(&context);
  return FromGrpcStatus(m.stub->CloseSession(&context, request, &response));
}

}  // namespace leapcache::client
