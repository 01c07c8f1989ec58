// DecodeService: the gRPC handlers of leapcache.v1.Decode (proto/leapcache/v1/decode.proto
// documents each RPC and its error codes) over the attached-decode session table
// (service/decode/decode_session_table.h). Handlers check the request, pass the wire arrays
// (fp32 / bf16, little-endian) to the session as they are, and return the outputs. A step may
// instead name a buffer of the engine's data-plane session: its vectors then move over that
// session's transport (DataPlane::Step), not in the messages.
//
// Step channels (OpenStepChannel): the handler creates the shared-memory mailbox, sends its name
// and then serves the engine's steps from it on its own thread (the call's, mailbox_channel.h)
// until the channel ends, running each through StepOnce exactly as the stream would.
//
// Every handler first asks the Authorizer (authorizer.h): with bearer tokens every call must
// carry a valid token (UNAUTHENTICATED otherwise), a session is opened only on the caller's
// namespaces (NOT_FOUND, as unknown, otherwise) and used only by its tenant (PERMISSION_DENIED
// otherwise).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "leapcache/v1/decode.grpc.pb.h"
#include "service/decode/decode_session_table.h"
#include "service/facade/data_plane.h"
#include "service/grpc/authorizer.h"
#include "service/grpc/mailbox_channel.h"

namespace leapcache::server {

struct StepChannelOptions {
  bool enabled = true;
  // A request is a serialized StepRequest: B slots take about 1 byte each below 64, 2 below 8K,
  // so the default 64 KiB carries any batch of 16K slots.
  MailboxChannelOptions mailbox;
};

class DecodeService final : public v1::Decode::Service {
 public:
  // Every pointer must outlive the service; `data_plane` null: steps over the data plane
  // (StepRequest.buffers) are FAILED_PRECONDITION.
  DecodeService(decode::DecodeSessionTable* sessions, const core::CheckpointStore* store,
                const Authorizer* auth, DataPlane* data_plane = nullptr,
                const StepChannelOptions& channels = {})
      : sessions_(sessions),
        store_(store),
        auth_(auth),
        data_plane_(data_plane),
        channels_(channels) {}

  grpc::Status OpenSession(grpc::ServerContext* context,
                           const v1::OpenDecodeSessionRequest* request,
                           v1::OpenDecodeSessionResponse* response) override;
  grpc::Status CloseSession(grpc::ServerContext* context,
                            const v1::CloseDecodeSessionRequest* request,
                            v1::CloseDecodeSessionResponse* response) override;
  grpc::Status ResetSlot(grpc::ServerContext* context, const v1::ResetSlotRequest* request,
                         v1::ResetSlotResponse* response) override;
  grpc::Status LoadSlot(grpc::ServerContext* context, const v1::LoadSlotRequest* request,
                        v1::LoadSlotResponse* response) override;
  grpc::Status CommitSlot(grpc::ServerContext* context, const v1::CommitSlotRequest* request,
                          v1::CommitSlotResponse* response) override;
  grpc::Status Step(grpc::ServerContext* context,
                    grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream) override;
  grpc::Status OpenStepChannel(grpc::ServerContext* context,
                               const v1::OpenStepChannelRequest* request,
                               grpc::ServerWriter<v1::StepChannelEvent>* writer) override;

  // Step channels open now.
  int open_channels() const { return open_channels_.count(); }

  // What a Step stream keeps between its requests: the session it last named (found and
  // authorized once) and staging reused across steps.
  struct StepStream {
    std::shared_ptr<decode::DecodeSession> session;
    std::vector<int32_t> slot;
    std::vector<float> g, beta;
    std::vector<uint8_t> in, out;  // a data-plane step's packed inputs and outputs
  };
  // One request of a Step stream: the step, its outputs in `response`. An error ends the
  // stream with it. (The stream handler's body, apart so that it runs without a stream.)
  absl::Status StepOnce(const grpc::ServerContext& context, const v1::StepRequest& request,
                        StepStream* stream, v1::StepResponse* response);

 private:
  // One step whose vectors move over the caller's data-plane session (StepRequest.buffers).
  absl::Status StepOverDataPlane(const grpc::ServerContext& context, const v1::StepRequest& request,
                                 decode::DecodeSession& session, DType in_dtype, DType out_dtype,
                                 StepStream* stream);
  // The session, if the caller may use it.
  absl::StatusOr<std::shared_ptr<decode::DecodeSession>> FindAuthorized(
      const grpc::ServerContext& context, uint64_t session_id) const;

  decode::DecodeSessionTable* const sessions_;
  const core::CheckpointStore* const store_;
  const Authorizer* const auth_;
  DataPlane* const data_plane_;
  const StepChannelOptions channels_;
  OpenChannels open_channels_;  // at most one step channel per decode session
};

}  // namespace leapcache::server
