// DataPlaneService: the gRPC handlers of leapcache.v1.DataPlane (proto/leapcache/v1/
// data_plane.proto documents each RPC and its error codes) over the facade's DataPlane
// (service/facade/data_plane.h), which holds the sessions and moves the bytes.
//
// Each handler asks the Authorizer (authorizer.h) for the caller, as StateCache's do, converts
// the request, calls the facade and converts the answer. With bearer tokens every call carries
// one, a session is its attaching tenant's (PERMISSION_DENIED for another's), and transfers touch
// only that tenant's namespaces (another's answers as unknown). Each transfer's phases go to
// leapcache_data_plane_phase_seconds (data_plane_metrics.h).
//
// Transfer channels (OpenTransferChannel): the handler creates the shared-memory mailbox, sends
// its name and then serves the engine's gets and puts from it on its own thread (the call's,
// mailbox_channel.h) until the channel ends, running each exactly as its RPC would (RunGet,
// RunPut), as the caller that opened the channel.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "leapcache/v1/data_plane.grpc.pb.h"
#include "service/core/checkpoint_store.h"
#include "service/facade/data_plane.h"
#include "service/grpc/authorizer.h"
#include "service/grpc/data_plane_metrics.h"
#include "service/grpc/mailbox_channel.h"

namespace leapcache::server {

// The facade's view of a gRPC call of `caller`: its deadline and cancellation. `context` and
// `caller` must outlive the result.
DataPlaneCall DataPlaneCallOf(const grpc::ServerContext& context, std::string_view caller);

struct TransferChannelOptions {
  bool enabled = true;
  // A get or put request takes well under 1 KiB; batches of lookups and gets take what their
  // answers need (kMaxBatchGetResultBytes a get: 128 gets at 64 KiB).
  MailboxChannelOptions mailbox{.capacity = 64 << 10};
};

// The most gets of one TransferGetBatch, and the most bytes one get's result may take in its
// answer (its header, CRC, code and a message cut to kMaxBatchResultMessage bytes), by which a
// channel bounds a batch before running it.
inline constexpr int kMaxGetBatch = 4096;
inline constexpr size_t kMaxBatchResultMessage = 256;
inline constexpr size_t kMaxBatchGetResultBytes = 512;

class DataPlaneService final : public v1::DataPlane::Service {
 public:
  // Every pointer must outlive the service; `metrics` may be null. `store` answers the lookups
  // that come through transfer channels.
  DataPlaneService(DataPlane* plane, core::CheckpointStore* store, const Authorizer* auth,
                   DataPlaneMetrics* metrics = nullptr, const TransferChannelOptions& channels = {})
      : plane_(plane), store_(store), auth_(auth), metrics_(metrics), channels_(channels) {}

  grpc::Status Attach(grpc::ServerContext* context, const v1::AttachRequest* request,
                      v1::AttachResponse* response) override;
  grpc::Status Keepalive(grpc::ServerContext* context, const v1::KeepaliveRequest* request,
                         v1::KeepaliveResponse* response) override;
  grpc::Status Detach(grpc::ServerContext* context, const v1::DetachRequest* request,
                      v1::DetachResponse* response) override;
  grpc::Status RegisterBuffer(grpc::ServerContext* context,
                              const v1::RegisterBufferRequest* request,
                              v1::RegisterBufferResponse* response) override;
  grpc::Status ReleaseBuffer(grpc::ServerContext* context, const v1::ReleaseBufferRequest* request,
                             v1::ReleaseBufferResponse* response) override;
  grpc::Status TransferGet(grpc::ServerContext* context, const v1::TransferGetRequest* request,
                           v1::TransferGetResponse* response) override;
  grpc::Status TransferGetBatch(grpc::ServerContext* context,
                                const v1::TransferGetBatchRequest* request,
                                v1::TransferGetBatchResponse* response) override;
  grpc::Status TransferPut(grpc::ServerContext* context, const v1::TransferPutRequest* request,
                           v1::TransferPutResponse* response) override;
  grpc::Status OpenTransferChannel(grpc::ServerContext* context,
                                   const v1::OpenTransferChannelRequest* request,
                                   grpc::ServerWriter<v1::TransferChannelEvent>* writer) override;

  // One request of a transfer channel of `session_id` opened by `open`'s caller: its bytes as the
  // mailbox carried them (checked here), the serialized TransferChannelReply in `reply`. (The
  // channel handler's body, apart so that it runs without a channel.)
  void AnswerChannelRequest(const DataPlaneCall& open, uint64_t session_id,
                            std::span<const uint8_t> request, std::string* reply);

 private:
  // A transfer of `call`'s caller, as its RPC and a channel's request run it.
  absl::Status RunGet(const DataPlaneCall& call, const v1::TransferGetRequest& request,
                      v1::TransferGetResponse* response);
  // The batch's own checks (INVALID_ARGUMENT for the whole call), then each get as RunGet runs
  // it, its status in its result.
  absl::Status RunGetBatch(const DataPlaneCall& call, const v1::TransferGetBatchRequest& request,
                           v1::TransferGetBatchResponse* response);
  absl::Status RunPut(const DataPlaneCall& call, const v1::TransferPutRequest& request,
                      v1::TransferPutResponse* response);

  DataPlane* const plane_;
  core::CheckpointStore* const store_;
  const Authorizer* const auth_;
  DataPlaneMetrics* const metrics_;
  const TransferChannelOptions channels_;
  OpenChannels open_channels_;  // at most one transfer channel per data-plane session
};

}  // namespace leapcache::server
