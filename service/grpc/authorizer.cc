#include "service/grpc/authorizer.h"

#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "base/check.h"
#include "absl/strings/str_cat.h"
#include "service/core/namespace_registry.h"

namespace leapcache::server {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr char kBearer[] = "bearer ";
// Entries of puts past their deadline are dropped this long after it: by then the core has
// expired the put too, so an id the table no longer knows is one the core refuses as well.
constexpr absl::Duration kPutOwnerSlack = absl::Minutes(1);

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat(
      why, " (with a tokens file every call needs `authorization: Bearer TOKEN` metadata)"));
}

}  // namespace

absl::StatusOr<std::string> AuthenticateCall(const grpc::ServerContextBase& context,
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

absl::StatusOr<std::string> Authorizer::Caller(const grpc::ServerContextBase& context) const {
  if (!enabled_) return std::string();
  std::shared_ptr<const TokenTable> tokens;
  {
    absl::ReaderMutexLock lock(&tokens_mu_);
    tokens = tokens_;
  }
  return AuthenticateCall(context, *tokens);
}

void Authorizer::ReplaceTokens(TokenTable tokens) {
  LC_CHECK(enabled_, "ReplaceTokens on an authorizer without tokens");
  auto fresh = std::make_shared<const TokenTable>(std::move(tokens));
  absl::MutexLock lock(&tokens_mu_);
  tokens_ = std::move(fresh);
}

absl::Status Authorizer::Register(const std::string& tenant, const std::string& requested) const {
  if (!enabled_ || requested == tenant) return absl::OkStatus();
  return absl::PermissionDeniedError(
      "tenant: the caller's token may only register namespaces of its own tenant");
}

absl::Status Authorizer::Namespace(const std::string& tenant, core::NamespaceId ns) const {
  if (!enabled_) return absl::OkStatus();
  absl::StatusOr<core::NamespaceInfo> info = store_->GetNamespace(ns);
  if (!info.ok()) return info.status();
  if (info->spec.tenant != tenant) return core::UnknownNamespaceError(ns);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Authorizer::CallerFor(const grpc::ServerContextBase& context,
                                                  core::NamespaceId ns) const {
  absl::StatusOr<std::string> tenant = Caller(context);
  if (!tenant.ok()) return tenant.status();
  if (absl::Status st = Namespace(*tenant, ns); !st.ok()) return st;
  return tenant;
}

void Authorizer::RecordPut(const std::string& tenant, uint64_t id, absl::Duration ttl) {
  if (!enabled_) return;
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  // Forget owners of puts long past their deadline, so the table stays as small as the core's.
  std::vector<uint64_t> expired;
  for (const auto& [put, owner] : put_owners_) {
    if (owner.deadline + kPutOwnerSlack < now) expired.push_back(put);
  }
  for (uint64_t put : expired) put_owners_.erase(put);
  put_owners_[id] = PutOwner{tenant, now + ttl};
}

absl::Status Authorizer::Put(const std::string& tenant, uint64_t id) const {
  if (!enabled_) return absl::OkStatus();
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

void Authorizer::ForgetPut(uint64_t id) {
  if (!enabled_) return;
  absl::MutexLock lock(&mu_);
  put_owners_.erase(id);
}

}  // namespace leapcache::server
