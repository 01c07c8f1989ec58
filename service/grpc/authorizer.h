// Authorizer: the one authentication and authorization check at the top of every handler of the
// three services (StateCache, DataPlane, Decode), shared by all of them.
//
// With the server's tokens_file, every call must carry `authorization: Bearer TOKEN` metadata
// with a token of the table (UNAUTHENTICATED otherwise, before the request is looked at); the
// token's tenant is the caller's identity, and a request reaches only that tenant's namespaces
// and puts:
//  - a namespace of another tenant answers as an unknown one (NOT_FOUND, the same words), so a
//    tenant cannot tell which namespaces others have;
//  - a put must have been reserved by the caller's tenant (PERMISSION_DENIED otherwise). Put ids
//    are sequential, so ownership is recorded at ReservePut and forgotten at commit, abort or
//    the put's deadline; an id the table does not know is NOT_FOUND.
// A refusal happens before the store is touched, so it changes nothing. Without tokens every
// call acts for tenant "" and every check passes (the handlers' own checks still apply).
//
// Why in the handlers rather than grpc::AuthMetadataProcessor: the processor runs only on secure
// listeners, but a loopback deployment may use tokens without TLS; and authorization needs the
// request body (namespace ids, put ids), which only a handler sees.
//
// The table can be replaced while the server runs (ReplaceTokens: the server rereads the tokens
// file on SIGHUP and when it changes), so a token is added or revoked without a restart; calls
// already authenticated keep their tenant. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "service/config/auth_tokens.h"
#include "service/core/checkpoint_store.h"
#include "service/core/clock.h"

namespace leapcache::server {

// The tenant a call acts for, from its `authorization` metadata; UNAUTHENTICATED for a missing,
// repeated or malformed header or an unknown token (the message never repeats the token).
absl::StatusOr<std::string> AuthenticateCall(const grpc::ServerContextBase& context,
                                             const TokenTable& tokens);

class Authorizer {
 public:
  // `store` and `clock` (the store's) must outlive the authorizer. No tokens: open.
  Authorizer(std::optional<TokenTable> tokens, const core::CheckpointStore* store,
             const core::Clock& clock)
      : enabled_(tokens.has_value()),
        tokens_(tokens.has_value() ? std::make_shared<const TokenTable>(*std::move(tokens))
                                   : nullptr),
        store_(store),
        clock_(clock) {}

  bool enabled() const { return enabled_; }
  // Calls from now on are checked against `tokens`. REQUIRES: enabled() (a server started
  // without tokens stays open).
  void ReplaceTokens(TokenTable tokens);

  // The calling tenant ("" when open).
  absl::StatusOr<std::string> Caller(const grpc::ServerContextBase& context) const;
  // OK if `tenant` may register a namespace for `requested` (its own tenant only).
  absl::Status Register(const std::string& tenant, const std::string& requested) const;
  // OK if namespace `ns` is `tenant`'s; the store's NOT_FOUND for an unknown one, and the same
  // for another tenant's.
  absl::Status Namespace(const std::string& tenant, core::NamespaceId ns) const;
  // The caller, authorized for namespace `ns`: Caller and Namespace in one.
  absl::StatusOr<std::string> CallerFor(const grpc::ServerContextBase& context,
                                        core::NamespaceId ns) const;

  // Put ownership (only recorded when enabled): `tenant` reserved put `id`, valid for `ttl`.
  void RecordPut(const std::string& tenant, uint64_t id, absl::Duration ttl);
  // OK if `tenant` reserved put `id`.
  absl::Status Put(const std::string& tenant, uint64_t id) const;
  // The put was committed or aborted.
  void ForgetPut(uint64_t id);

 private:
  struct PutOwner {
    std::string tenant;
    absl::Time deadline;
  };
  const bool enabled_;
  mutable absl::Mutex tokens_mu_;
  std::shared_ptr<const TokenTable> tokens_ ABSL_GUARDED_BY(tokens_mu_);  // null when open
  const core::CheckpointStore* const store_;
  const core::Clock& clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, PutOwner> put_owners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::server
