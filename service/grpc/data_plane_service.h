// DataPlaneService: the gRPC handlers of leapcache.v1.DataPlane (proto/leapcache/v1/
// data_plane.proto documents each RPC and its error codes).
//
// Transfers reuse the StateCache paths: TransferGet reads through CheckpointReader (compact or
// decoded, under its read lease) and TransferPut goes through PutPipeline (reserve, upload with
// dense encoding, commit), so the two services store and serve exactly the same bytes. Only the
// movement differs: chunks of the session's staging memory go to or come from the engine's
// registered buffer over the session's transport connection instead of gRPC messages.
// Every handler first asks the Authorizer (authorizer.h), as StateCache's do: with bearer tokens
// every call carries one, a session is its attaching tenant's (PERMISSION_DENIED for another's),
// and transfers touch only that tenant's namespaces (another's answers as unknown).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "leapcache/v1/data_plane.grpc.pb.h"
#include "service/core/checkpoint_store.h"
#include "service/facade/data_plane_transports.h"
#include "service/facade/engine_session_table.h"
#include "service/facade/put_pipeline.h"
#include "service/grpc/authorizer.h"
#include "service/facade/state_decoder.h"

namespace leapcache::server {

struct DataPlaneOptions {
  // UCX_TLS of the service's UCX context; empty: UCX's choice.
  std::string ucx_transports;
  // The service's GPU for NCCL sessions (the server's gpu_device).
  int cuda_device = 0;
  // Idle time after which a session ends, when the engine asks for none, and the most it may ask.
  absl::Duration default_session_ttl = absl::Seconds(60);
  absl::Duration max_session_ttl = absl::Hours(1);
  // Longest a transfer call may run when its own deadline is later (a stalled engine must not
  // hold a lease or a reservation for longer).
  absl::Duration max_transfer_time = absl::Seconds(60);
  // Bytes moved per transport operation (the session's staging memory).
  uint64_t chunk_bytes = 16 << 20;
  // Dense gets' codec (state_decoder.h), outliving the service; the CPU reference when null.
  StateDecoder* decoder = nullptr;
  absl::Duration reap_interval = absl::Seconds(1);
};

class DataPlaneService final : public v1::DataPlane::Service {
 public:
  // `store`, `puts` and `auth` must outlive the service.
  DataPlaneService(core::CheckpointStore* store, PutPipeline* puts, const Authorizer* auth,
                   const DataPlaneOptions& options);
  ~DataPlaneService() override;

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
  grpc::Status TransferPut(grpc::ServerContext* context, const v1::TransferPutRequest* request,
                           v1::TransferPutResponse* response) override;

  // A decode step whose vectors travel over an attached engine's data plane (decode.proto,
  // StepRequest.buffers), for the Decode service: under the session's lock, reads `in` from the
  // engine's buffer at `in_offset`, runs `compute`, and writes `out` at `out_offset`. Over a
  // two-sided transport `out` is written whenever `in` was read, even if `compute` failed (the
  // engine posted its receive). Errors: the session's and buffer's as for TransferGet, then
  // `compute`'s.
  absl::Status RunStep(const grpc::ServerContext& context, uint64_t session_id, uint64_t buffer_id,
                       uint64_t in_offset, std::span<uint8_t> in, uint64_t out_offset,
                       std::span<uint8_t> out, absl::FunctionRef<absl::Status()> compute);

  size_t sessions() const { return sessions_.size(); }
  const DataPlaneTransports& transports() const { return *transports_; }

 private:
  absl::Time TransferDeadline(const grpc::ServerContext& context) const;
  // The session for a call of `caller`: NOT_FOUND if unknown, PERMISSION_DENIED if another
  // tenant's.
  absl::StatusOr<EngineSessionTable::Use> SessionFor(const grpc::ServerContext& context,
                                                     uint64_t session_id);

  core::CheckpointStore* const store_;
  PutPipeline* const puts_;
  const Authorizer* const auth_;
  const DataPlaneOptions options_;
  std::unique_ptr<DataPlaneTransports> transports_;
  EngineSessionTable sessions_;
};

}  // namespace leapcache::server
