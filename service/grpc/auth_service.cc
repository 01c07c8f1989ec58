#include "service/grpc/auth_service.h"

#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "service/grpc/grpc_status.h"

namespace leapcache::server {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "bearer ";
// Entries of puts past their deadline are dropped this long after it: by then the core has
// expired the put too, so an id the table no longer knows is one the core refuses as well.
constexpr absl::Duration kPutOwnerSlack = absl::Minutes(1);

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(
      absl::StrCat(why, " (with a tokens file every call needs `authorization: Bearer TOKEN` metadata)"));
}

}  // namespace

absl::StatusOr<std::string> AuthenticateCall(const grpc::ServerContext& context,
                                             const TokenTable& tokens) {
  const auto& metadata = context.client_metadata();
  auto [begin, end] = metadata.equal_range(kAuthorization);
  if (begin == end) return Unauthenticated("missing authorization metadata");
  if (std::next(begin) != end) return Unauthenticated("more than one authorization header");
  const absl::string_view value(begin->second.data(), begin->second.size());
  // The scheme is case-insensitive (RFC 7235); the token is everything after one space.
  if (value.size() <= sizeof(kBearer) - 1 ||
      !absl::EqualsIgnoreCase(value.substr(0, sizeof(kBearer) - 1), kBearer)) {
    return Unauthenticated("authorization is not a bearer token");
  }
  std::optional<std::string> tenant = tokens.TenantFor(value.substr(sizeof(kBearer) - 1));
  if (!tenant.has_value()) return Unauthenticated("unknown bearer token");
  return *std::move(tenant);
}

absl::Status AuthenticatedStateCacheService::AuthorizeNamespace(const std::string& tenant,
                                                                uint32_t ns) const {
  absl::StatusOr<core::NamespaceInfo> info = store_->GetNamespace(ns);
  if (!info.ok()) return info.status();
  if (info->spec.tenant != tenant) return core::UnknownNamespaceError(ns);
  return absl::OkStatus();
}

absl::Status AuthenticatedStateCacheService::AuthorizePut(const std::string& tenant,
                                                          uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = put_owners_.find(id);
  if (it == put_owners_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "put_id ", id, ": no such put (never reserved, already committed or aborted, or expired)"));
  }
  if (it->second.tenant != tenant) {
    return absl::PermissionDeniedError(
        absl::StrCat("put_id ", id, " was reserved by another tenant than the caller's token"));
  }
  return absl::OkStatus();
}

void AuthenticatedStateCacheService::ForgetPut(uint64_t id) {
  absl::MutexLock lock(&mu_);
  put_owners_.erase(id);
}

grpc::Status AuthenticatedStateCacheService::RegisterNamespace(
    grpc::ServerContext* context, const v1::RegisterNamespaceRequest* request,
    v1::RegisterNamespaceResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (request->tenant() != *tenant) {
    return ToGrpcStatus(absl::PermissionDeniedError(
        "tenant: the caller's token may only register namespaces of its own tenant"));
  }
  return inner_->RegisterNamespace(context, request, response);
}

grpc::Status AuthenticatedStateCacheService::Lookup(grpc::ServerContext* context,
                                                    const v1::LookupRequest* request,
                                                    v1::LookupResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status st = AuthorizeNamespace(*tenant, request->namespace_id()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  return inner_->Lookup(context, request, response);
}

grpc::Status AuthenticatedStateCacheService::ReservePut(grpc::ServerContext* context,
                                                        const v1::ReservePutRequest* request,
                                                        v1::ReservePutResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status st = AuthorizeNamespace(*tenant, request->namespace_id()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  grpc::Status status = inner_->ReservePut(context, request, response);
  if (!status.ok()) return status;
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  // Forget owners of puts long past their deadline, so the table stays as small as the core's.
  std::vector<uint64_t> expired;
  for (const auto& [id, owner] : put_owners_) {
    if (owner.deadline + kPutOwnerSlack < now) expired.push_back(id);
  }
  for (uint64_t id : expired) put_owners_.erase(id);
  put_owners_[response->put_id()] =
      PutOwner{*std::move(tenant), now + absl::Milliseconds(response->ttl_ms())};
  return status;
}

grpc::Status AuthenticatedStateCacheService::UploadPut(
    grpc::ServerContext* context, grpc::ServerReader<v1::UploadPutRequest>* reader,
    v1::UploadPutResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  // StateCacheService::UploadPut's loop, with each chunk's put checked before it is stored (a
  // stream may name several puts).
  v1::UploadPutRequest chunk;
  uint64_t received = 0;
  while (reader->Read(&chunk)) {
    if (absl::Status st = AuthorizePut(*tenant, chunk.put_id()); !st.ok()) {
      return ToGrpcStatus(st);
    }
    const std::string& data = chunk.data();
    absl::Status st = puts_->Upload(
        chunk.put_id(), chunk.offset(),
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
    if (!st.ok()) return ToGrpcStatus(st);
    received += data.size();
  }
  response->set_bytes_received(received);
  return grpc::Status::OK;
}

grpc::Status AuthenticatedStateCacheService::CommitPut(grpc::ServerContext* context,
                                                       const v1::CommitPutRequest* request,
                                                       v1::CommitPutResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status st = AuthorizePut(*tenant, request->put_id()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  grpc::Status status = inner_->CommitPut(context, request, response);
  // A failed commit may leave the put open (DATA_LOSS: upload again), so only success forgets.
  if (status.ok()) ForgetPut(request->put_id());
  return status;
}

grpc::Status AuthenticatedStateCacheService::AbortPut(grpc::ServerContext* context,
                                                      const v1::AbortPutRequest* request,
                                                      v1::AbortPutResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status st = AuthorizePut(*tenant, request->put_id()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  grpc::Status status = inner_->AbortPut(context, request, response);
  if (status.ok()) ForgetPut(request->put_id());
  return status;
}

grpc::Status AuthenticatedStateCacheService::Get(grpc::ServerContext* context,
                                                 const v1::GetRequest* request,
                                                 grpc::ServerWriter<v1::GetResponse>* writer) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status st = AuthorizeNamespace(*tenant, request->namespace_id()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  return inner_->Get(context, request, writer);
}

grpc::Status AuthenticatedStateCacheService::Delete(grpc::ServerContext* context,
                                                    const v1::DeleteRequest* request,
                                                    v1::DeleteResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status st = AuthorizeNamespace(*tenant, request->namespace_id()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  return inner_->Delete(context, request, response);
}

grpc::Status AuthenticatedStateCacheService::Pin(grpc::ServerContext* context,
                                                 const v1::PinRequest* request,
                                                 v1::PinResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status st = AuthorizeNamespace(*tenant, request->namespace_id()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  return inner_->Pin(context, request, response);
}

grpc::Status AuthenticatedStateCacheService::Unpin(grpc::ServerContext* context,
                                                   const v1::UnpinRequest* request,
                                                   v1::UnpinResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  if (absl::Status st = AuthorizeNamespace(*tenant, request->namespace_id()); !st.ok()) {
    return ToGrpcStatus(st);
  }
  return inner_->Unpin(context, request, response);
}

grpc::Status AuthenticatedStateCacheService::Stats(grpc::ServerContext* context,
                                                   const v1::StatsRequest* request,
                                                   v1::StatsResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*context, tokens_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  return inner_->Stats(context, request, response);
}

}  // namespace leapcache::server
