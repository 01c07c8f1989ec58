// DecodeService: the gRPC handlers of leapcache.v1.Decode (proto/leapcache/v1/decode.proto
// documents each RPC and its error codes) over the attached-decode session table
// (service/decode/decode_session_table.h). Handlers check the request, pass the wire arrays
// (fp32 / bf16, little-endian) to the session as they are, and return the outputs.
//
// With bearer tokens configured (auth_tokens.h) every call must carry a valid token
// (UNAUTHENTICATED otherwise), and a session may be opened and used only by the tenant that owns
// its namespace (PERMISSION_DENIED otherwise), as for StateCache (auth_service.h).
#pragma once

#include <string>

#include "leapcache/v1/decode.grpc.pb.h"
#include "service/decode/decode_session_table.h"
#include "service/server/auth_tokens.h"

namespace leapcache::server {

class DecodeService final : public v1::Decode::Service {
 public:
  // Every pointer must outlive the service; `tokens` null: no authentication.
  DecodeService(decode::DecodeSessionTable* sessions, const core::CheckpointStore* store,
                const TokenTable* tokens)
      : sessions_(sessions), store_(store), tokens_(tokens) {}

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

 private:
  // OK when there are no tokens, or the call's token belongs to the namespace's tenant.
  absl::Status Authorize(const grpc::ServerContext& context, core::NamespaceId ns) const;
  // OK when `tenant` owns the namespace; PERMISSION_DENIED otherwise.
  absl::Status CheckTenant(const std::string& tenant, core::NamespaceId ns) const;
  // The session, if the caller may use it.
  absl::StatusOr<std::shared_ptr<decode::DecodeSession>> FindAuthorized(
      const grpc::ServerContext& context, uint64_t session_id) const;

  decode::DecodeSessionTable* const sessions_;
  const core::CheckpointStore* const store_;
  const TokenTable* const tokens_;
};

}  // namespace leapcache::server
