#include "service/config/config.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "service/config/auth_tokens.h"
#include "service/config/host_port.h"
#include "service/compute/compute.h"
#include "service/config/tls_credentials.h"
#include "service/core/host_tier.h"

namespace leapcache::server {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckPositive(const char* name, absl::Duration d) {
  if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return Invalid(absl::StrCat(name, " must be a positive, finite duration (got ",
                                absl::FormatDuration(d), ")"));
  }
  return absl::OkStatus();
}

// Hosts whose traffic never leaves the machine, where a bearer token may travel without TLS.
bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status ValidateSecurity(const ServerConfig& c) {
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return Invalid(
        absl::StrCat("tls_cert_file and tls_key_file must be set together (got ",
                     c.tls_cert_file.empty() ? "only tls_key_file" : "only tls_cert_file", ")"));
  }
  if (!c.tls_client_ca_file.empty() && c.tls_cert_file.empty()) {
    return Invalid("tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file");
  }
  if (!c.tokens_file.empty() && c.tls_cert_file.empty()) {
    absl::StatusOr<HostPort> listen = ParseHostPort(c.listen);
    if (listen.ok() && !IsLoopbackHost(listen->host)) {
      return Invalid(
          absl::StrCat("tokens_file without TLS is only accepted on a loopback listen "
                       "address (bearer tokens would cross the network in the clear); "
                       "set tls_cert_file and tls_key_file, or listen on 127.0.0.1 "
                       "(got listen = ",
                       c.listen, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConfig(const ServerConfig& c) {
  if (absl::Status st = ParseHostPort(c.listen).status(); !st.ok()) {
    return Invalid(absl::StrCat("listen: ", st.message()));
  }
  if (absl::Status st = ValidateSecurity(c); !st.ok()) return st;
  if (!c.metrics_listen.empty()) {
    if (absl::Status st = ParseHostPort(c.metrics_listen).status(); !st.ok()) {
      return Invalid(absl::StrCat("metrics_listen: ", st.message()));
    }
  }
  if (c.page_bytes == 0 || c.page_bytes % core::kHostPageAlignment != 0) {
    return Invalid(absl::StrCat("page_bytes must be a positive multiple of ",
                                core::kHostPageAlignment, " (got ", c.page_bytes, ")"));
  }
  if (c.memory_budget < c.page_bytes) {
    return Invalid(absl::StrCat("memory_budget (", c.memory_budget,
                                " bytes) must hold at least one page (page_bytes = ", c.page_bytes,
                                ")"));
  }
  if (c.spill_budget != 0 && c.spill_budget < c.page_bytes) {
    return Invalid(absl::StrCat(
        "spill_budget (", c.spill_budget,
        " bytes) must be 0 or hold at least one page (page_bytes = ", c.page_bytes, ")"));
  }
  if (!(c.eviction_half_life > 0)) {
    return Invalid(absl::StrCat("eviction_half_life must be > 0 (got ", c.eviction_half_life, ")"));
  }
  for (auto [name, d] : {std::pair{"put_ttl", c.put_ttl},
                         {"max_put_ttl", c.max_put_ttl},
                         {"reaper_interval", c.reaper_interval},
                         {"keepalive_time", c.keepalive_time},
                         {"keepalive_timeout", c.keepalive_timeout},
                         {"min_client_ping_interval", c.min_client_ping_interval},
                         {"max_connection_idle", c.max_connection_idle},
                         {"handshake_timeout", c.handshake_timeout}}) {
    if (absl::Status st = CheckPositive(name, d); !st.ok()) return st;
  }
  if (c.put_ttl > c.max_put_ttl) {
    return Invalid(absl::StrCat("put_ttl (", absl::FormatDuration(c.put_ttl),
                                ") must not exceed max_put_ttl (",
                                absl::FormatDuration(c.max_put_ttl), ")"));
  }
  // Put TTLs travel as uint32 milliseconds.
  if (c.max_put_ttl > absl::Milliseconds(UINT32_MAX)) {
    return Invalid("max_put_ttl must be at most 49 days (2^32 - 1 ms)");
  }
  if (c.shutdown_grace < absl::ZeroDuration() || c.shutdown_grace == absl::InfiniteDuration()) {
    return Invalid("shutdown_grace must be a finite duration >= 0");
  }
  if (c.max_pending_puts == 0) return Invalid("max_pending_puts must be > 0");
  if (c.stats_scope != "tenant" && c.stats_scope != "store") {
    return Invalid(
        absl::StrCat("stats_scope must be tenant or store (got \"", c.stats_scope, "\")"));
  }
  if (c.tenant_max_bytes > 0 && c.tenant_max_bytes < c.page_bytes) {
    return Invalid(absl::StrCat("tenant_max_bytes must be 0 (no limit) or at least page_bytes (",
                                c.page_bytes, "); got ", c.tenant_max_bytes));
  }
  // gRPC takes message sizes as int.
  if (c.max_message_bytes < kMinMessageBytes || c.max_message_bytes > INT32_MAX) {
    return Invalid(absl::StrCat("max_message_bytes must be in [", kMinMessageBytes, ", ", INT32_MAX,
                                "] (got ", c.max_message_bytes, ")"));
  }
  if (c.chunk_bytes == 0 || c.chunk_bytes > c.max_message_bytes - kMessageOverheadBytes) {
    return Invalid(absl::StrCat(
        "chunk_bytes must be in [1, max_message_bytes - ", kMessageOverheadBytes, "] = [1, ",
        c.max_message_bytes - kMessageOverheadBytes, "] (got ", c.chunk_bytes, ")"));
  }
  if (c.max_concurrent_streams < 1 || c.max_concurrent_streams > INT32_MAX) {
    return Invalid(
        absl::StrCat("max_concurrent_streams must be >= 1 (got ", c.max_concurrent_streams, ")"));
  }
  if (c.grpc_memory_budget < 4 * c.max_message_bytes) {
    return Invalid(absl::StrCat("grpc_memory_budget must hold at least four messages: >= 4 x "
                                "max_message_bytes = ",
                                4 * c.max_message_bytes, " (got ", c.grpc_memory_budget, ")"));
  }
  if (c.max_threads < 2 || c.max_threads > 65536) {
    return Invalid(absl::StrCat("max_threads must be in [2, 65536] (got ", c.max_threads, ")"));
  }
  if (c.max_metadata_bytes < 1024 || c.max_metadata_bytes > INT32_MAX) {
    return Invalid(absl::StrCat("max_metadata_bytes must be in [1024, ", INT32_MAX, "] (got ",
                                c.max_metadata_bytes, ")"));
  }
#ifndef LEAPCACHE_WITH_CUDA
  if (c.gpu_memory_budget > 0) {
    return Invalid("gpu_memory_budget needs a server built with CUDA (this one was not)");
  }
#endif
  if (c.host_tier_mapping != "auto" && c.host_tier_mapping != "on" &&
      c.host_tier_mapping != "off") {
    return Invalid(absl::StrCat("host_tier_mapping must be auto, on or off (got \"",
                                c.host_tier_mapping, "\")"));
  }
#ifndef LEAPCACHE_WITH_CUDA
  if (c.host_tier_mapping == "on") {
    return Invalid("host_tier_mapping: on needs a server built with CUDA (this one was not)");
  }
#endif
  if (absl::Status st = compute::ParseChoice(c.compute_backend).status(); !st.ok()) {
    return Invalid(absl::StrCat("compute_backend: ", st.message()));
  }
  if (c.decode_idle_timeout <= absl::ZeroDuration()) {
    return Invalid("decode_idle_timeout must be positive");
  }
  for (const auto& [name, spin] :
       {std::pair<const char*, absl::Duration>{"decode_step_channel_spin",
                                               c.decode_step_channel_spin},
        {"data_plane_transfer_channel_spin", c.data_plane_transfer_channel_spin}}) {
    if (spin < absl::ZeroDuration() || spin > absl::Seconds(1)) {
      return Invalid(absl::StrCat(name, " must be 0..1s"));
    }
  }
  // The watchdog checks streams every kStreamSweepInterval (server.h); a limit below it would
  // not mean what it says.
  for (const auto& [name, limit] : {std::pair<const char*, absl::Duration>{
                                        "stream_idle_timeout", c.stream_idle_timeout},
                                    {"stream_max_age", c.stream_max_age}}) {
    if (limit < absl::Milliseconds(500) || limit == absl::InfiniteDuration()) {
      return Invalid(absl::StrCat(name, " must be a finite duration >= 500ms (got ",
                                  absl::FormatDuration(limit), ")"));
    }
  }
  if (c.stream_max_age < c.stream_idle_timeout) {
    return Invalid(absl::StrCat("stream_max_age (", absl::FormatDuration(c.stream_max_age),
                                ") must not be below stream_idle_timeout (",
                                absl::FormatDuration(c.stream_idle_timeout), ")"));
  }
  return absl::OkStatus();
}

uint64_t ServerMemoryBound(const ServerConfig& c, int cores) {
  const uint64_t decode = c.compute_backend == "cuda" ? 0 : c.decode_memory_budget;
  return c.memory_budget + c.spill_budget + decode + c.grpc_memory_budget +
         2 * c.max_message_bytes * static_cast<uint64_t>(std::max(1, cores)) +
         kHeapRetainedBytes + kProcessBaseBytes;
}

decode::DecodeOptions ToDecodeOptions(const ServerConfig& c) {
  decode::DecodeOptions o;
  o.memory_budget = c.decode_memory_budget;
  o.max_slots = static_cast<int>(c.decode_max_slots);
  o.max_sessions = static_cast<int>(c.decode_max_sessions);
  o.max_sessions_per_tenant = static_cast<int>(c.tenant_max_decode_sessions);
  o.idle_timeout = c.decode_idle_timeout;
  return o;
}

absl::Status CheckConfigFiles(const ServerConfig& c) {
  if (absl::Status st = LoadServerTls(c).status(); !st.ok()) return st;
  if (!c.tokens_file.empty()) {
    if (absl::Status st = TokenTable::Load(c.tokens_file).status(); !st.ok()) return st;
  }
  return absl::OkStatus();
}

core::StoreOptions ToStoreOptions(const ServerConfig& c) {
  core::StoreOptions o;
  o.eviction.policy = c.eviction_policy;
  o.eviction.half_life_accesses = c.eviction_half_life;
  o.eviction.spill = c.spill_budget > 0;
  o.eviction.promote_on_hit = c.promote_on_hit;
  o.default_put_ttl = c.put_ttl;
  o.max_put_ttl = c.max_put_ttl;
  o.reaper_interval = c.reaper_interval;
  o.max_pending_puts = c.max_pending_puts;
  o.tenant_quota.bytes = c.tenant_max_bytes;
  o.tenant_quota.pinned_bytes = c.tenant_max_pinned_bytes;
  o.tenant_quota.pending_puts = c.tenant_max_pending_puts;
  o.tenant_quota.namespaces = c.tenant_max_namespaces;
  return o;
}

}  // namespace leapcache::server
