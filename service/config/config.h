// ServerConfig: every setting of leapcache-server, with its default and the reason for it.
//
// One struct, filled in one place (config_loader.h) from, in increasing precedence: these
// defaults, a YAML file, LEAPCACHE_* environment variables and command-line flags. Each field's
// key is its name: memory_budget is `memory_budget:` in YAML, LEAPCACHE_MEMORY_BUDGET in the
// environment and --memory-budget on the command line. ValidateConfig checks what single values
// cannot (relations between fields) before anything is allocated or bound.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "service/core/options.h"
#include "service/decode/decode_session_table.h"

namespace leapcache::server {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// Room in a message for everything but the payload (field tags, offsets, a Get header); chunks
// are at most max_message_bytes - kMessageOverheadBytes.
inline constexpr uint64_t kMessageOverheadBytes = 64 * kKiB;
// The largest dense state (256 x 256 fp32) must fit in one message with its framing.
inline constexpr uint64_t kMinMessageBytes = 256 * kKiB + kMessageOverheadBytes;

struct ServerConfig {
  // --- Network ---
  // gRPC address, host:port ("[::]:port" for IPv6). Port 0 binds a free port, printed on stdout
  // ("leapcache-server listening on HOST:PORT") and written to port_file. Loopback by default:
  // exposing the service must be a deliberate choice, with TLS and tokens (below).
  std::string listen = "127.0.0.1:7470";
  // If set, the bound gRPC port is written here (decimal, newline), atomically, once listening.
  std::string port_file;
  // HTTP address of /metrics (Prometheus text format), /healthz and /readyz; empty disables.
  // Port 0 binds a free port (printed on stdout). Loopback by default: it is an admin surface.
  std::string metrics_listen = "127.0.0.1:9470";

  // --- Security (gRPC port only; the metrics port is an admin surface, kept on loopback) ---
  // PEM certificate chain and private key of the gRPC listener. Both set: TLS on, plaintext
  // refused; both empty: plaintext. A missing, unreadable, unparsable, expired or mismatched
  // pair fails start-up (and --check-config). Read again on SIGHUP and whenever a file changes
  // (checked every second): new connections get the new certificate, connections already up
  // keep theirs, and files that fail the same checks leave the certificate in force (logged,
  // leapcache_tls_reloads_total{result="error"}). Rotation needs no restart.
  std::string tls_cert_file;
  std::string tls_key_file;
  // PEM CA bundle for mutual TLS: when set, every client must present a certificate signed by
  // it (handshake refused otherwise). Needs tls_cert_file. Reloaded with the pair; whether it
  // is set at all is fixed at start.
  std::string tls_client_ca_file;
  // Bearer tokens, one "TOKEN TENANT" line each (auth_tokens.h); when set, every StateCache call
  // needs `authorization: Bearer TOKEN` and may only touch namespaces of the token's tenant.
  // Health checks stay open. Read at start, and again on SIGHUP and whenever the file changes
  // (checked every second), so tokens are added and revoked without a restart; a file that does
  // not load leaves the tokens in force (and is logged). Tokens travel in the clear
  // without TLS, so a tokens file without TLS is accepted only on a loopback listen address.
  std::string tokens_file;

  // --- Memory (pools allocated once at start) ---
  // The primary tier's pool. The CPU backend keeps it in host memory. Written as bytes with an
  // optional unit (512MiB, 8GiB, 10GB) or as a share of physical memory (25%).
  uint64_t memory_budget = 1 * kGiB;
  // A GPU tier in front of the host tier (servers built with CUDA): checkpoints land in device
  // memory first and spill to the host tier when it is full; 0 disables it. Device memory the
  // engines do not use is the point of the product, so size it from what they leave free.
  uint64_t gpu_memory_budget = 0;
  // CUDA device of the GPU tier, of the compute backend's kernels (codec and attached decode) and
  // of NCCL data-plane sessions.
  int64_t gpu_device = 0;
  // Whether the host and spill tiers are pinned and mapped for gpu_device (servers built with
  // CUDA): then a get from them into an engine's GPU buffer (CUDA IPC, NCCL) is one device-side
  // gather over PCIe instead of staged copies. auto: where gpu_device exists; on: start-up fails
  // without it; off: never. Pinning takes the budget out of swap for the server's lifetime, and a
  // failure to pin (a locked-memory limit) fails start-up, naming this setting.
  std::string host_tier_mapping = "auto";
  // Who computes on states (service/compute): encodes dense puts, decodes dense gets and holds
  // and steps the live states of attached-decode sessions. cpu: the reference codec and
  // recurrence everywhere (the reference's bytes on every server). cuda: the kernels on
  // gpu_device, start-up fails without them; formats they do not build (they build the window
  // format at 8, 6 and 4 bits and fp32 live states, dk = dv = 128) are encoded and decoded by
  // the reference, and a decode session of one is refused (UNIMPLEMENTED) rather than held in
  // host memory. auto: the kernels where built, present and able to serve the format, else the
  // reference. The kernels round like the reference up to one-code ties when encoding and
  // decode in fp32 in another order, so their states equal the reference's to within that.
  std::string compute_backend = "auto";
  // A second, slower host tier that evictions spill into (a spilled checkpoint is still a hit,
  // promoted back on use); 0 disables it.
  uint64_t spill_budget = 0;
  // Allocation unit of the tiers; a multiple of 4 KiB no smaller than one blob. 1 MiB wastes
  // < 2% per page on 8-bit 128x128 blobs (see service/core/residency_table.h) and keeps page
  // tables small; smaller pages waste less per checkpoint for small models.
  uint64_t page_bytes = 1 * kMiB;

  // --- Store ---
  // lru, or state-aware (compute saved per byte with recency decay, the default).
  core::EvictionPolicyKind eviction_policy = core::EvictionPolicyKind::kStateAware;
  // State-aware only: accesses after which an untouched checkpoint's worth halves.
  double eviction_half_life = 4096;
  // Move a checkpoint hit in the spill tier back to the primary tier.
  bool promote_on_hit = true;
  // Time a put may stay uncommitted when the client does not say. A crashed writer's memory
  // comes back after at most this long (Mooncake uses 30 s for its put lease).
  absl::Duration put_ttl = absl::Seconds(30);
  // Longest TTL a client may ask for: a reservation cannot pin memory indefinitely.
  absl::Duration max_put_ttl = absl::Minutes(10);
  // How often expired puts are reclaimed. Bounds how long past its TTL a dead put holds memory.
  absl::Duration reaper_interval = absl::Seconds(1);
  // Uncommitted puts at once; each holds memory until commit or expiry.
  uint64_t max_pending_puts = 4096;

  // --- Tenant quotas (the same for every tenant; 0: no limit beyond the server's own) ---
  // Where several tenants share a server (tokens_file), set these so that none can evict, pin
  // or reserve the others out: the sum of tenant_max_bytes over the tenants at or below the
  // budget keeps each within its share. A tenant at tenant_max_bytes evicts its own coldest
  // checkpoints, never another's; any quota passed is RESOURCE_EXHAUSTED naming it
  // (service/core/options.h, TenantQuota). Per-tenant metrics carry a tenant label when
  // tokens_file is set (tenant names are then the tokens file's, a bounded set).
  // Memory of the tenant's checkpoints and reservations in every tier, whole pages.
  uint64_t tenant_max_bytes = 0;
  // Of which in pinned checkpoints.
  uint64_t tenant_max_pinned_bytes = 0;
  uint64_t tenant_max_pending_puts = 0;
  uint64_t tenant_max_namespaces = 0;
  int64_t tenant_max_decode_sessions = 0;
  // What StateCache.Stats shows a caller where tenants are authenticated: tenant (its own
  // usage and the tiers' capacities; no tenant learns another's traffic or memory) or store
  // (the store-wide numbers to everyone, as without a tokens file). The metrics port always has
  // everything: it is the operator's.
  std::string stats_scope = "tenant";

  // --- gRPC limits ---
  // Largest message either side of a call may send or receive. 8 MiB holds a 4 MiB chunk and the
  // longest legal lookup chain (65,536 x 32 B = 2 MiB) with room to spare; larger checkpoints
  // always move as streams of chunks.
  uint64_t max_message_bytes = 8 * kMiB;
  // Data bytes per Get response message and the upload chunk the server advertises. 1 MiB
  // amortises per-message costs (measured in the service benchmark) while keeping the memory a
  // slow reader can hold in flight per stream small.
  uint64_t chunk_bytes = 1 * kMiB;
  // Concurrent calls per client connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); gRPC's
  // default is unlimited.
  int64_t max_concurrent_streams = 256;
  // Memory gRPC may hold for its connections and messages in flight (its resource quota): past
  // it gRPC shrinks read buffers and stops reading, so a flood of large messages waits instead of
  // growing the heap. One term of the memory bound (ServerMemoryBound); 48 uploaders of 7 MiB
  // chunks once took the server to 5.7x its budget without it.
  uint64_t grpc_memory_budget = 256 * kMiB;
  // Threads serving unary calls. Each unary call in progress holds one (the Get and UploadPut
  // streams hold none while they wait for their client); calls beyond it fail with
  // RESOURCE_EXHAUSTED rather than queue without bound, and health turns NOT_SERVING while they
  // do (service/server/serving_probe.h).
  int64_t max_threads = 512;
  // Server-initiated HTTP/2 pings on idle connections, to detect dead clients holding streams.
  absl::Duration keepalive_time = absl::Seconds(60);
  // A ping unanswered for this long closes the connection (and cancels its calls).
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // Clients may ping at most this often (more often gets the connection closed with
  // too_many_pings); the client library pings every 30 s.
  absl::Duration min_client_ping_interval = absl::Seconds(10);
  // Connections idle (no calls) this long are closed; clients reconnect transparently.
  absl::Duration max_connection_idle = absl::Minutes(30);
  // A connection must finish its handshake (TLS and HTTP/2 settings) within this long, so idle
  // sockets that never send a hello are closed; gRPC's default is 120 s.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Largest metadata (headers) a call may carry; gRPC's default is 8 KiB, kept explicit.
  uint64_t max_metadata_bytes = 16 * kKiB;
  // A Get whose client takes no message for this long, or an UploadPut that sends none, is
  // cancelled (DEADLINE_EXCEEDED in the server's log and metrics, CANCELLED to the client) and
  // what it held (a read lease: the checkpoint's memory) is released. A stream holds no thread
  // while it waits, but an unread Get holds its lease, which Delete cannot free.
  absl::Duration stream_idle_timeout = absl::Seconds(30);
  // A Get stream open this long is cancelled whatever its progress, so a client that takes a
  // byte at a time cannot keep a checkpoint leased: no read lease of a stream lives longer. At
  // the lowest rate worth serving (1 MiB/s) this passes a 600 MiB checkpoint.
  absl::Duration stream_max_age = absl::Minutes(10);

  // --- Attached decode (decode.proto) ---
  // Live-state memory of all decode sessions together (host memory on the CPU backend, device
  // memory of gpu_device on the CUDA backend; compute_backend chooses). 0 disables attached
  // decode (OpenSession: RESOURCE_EXHAUSTED).
  uint64_t decode_memory_budget = 1 * kGiB;
  // Live requests one session may hold.
  int64_t decode_max_slots = 4096;
  int64_t decode_max_sessions = 1024;
  // A session without any call for this long is closed and its memory returned: an engine
  // that died holds memory no longer than this.
  absl::Duration decode_idle_timeout = absl::Minutes(5);
  // Step channels (decode.proto, OpenStepChannel): same-host engines step through a
  // shared-memory mailbox instead of gRPC. Off: OpenStepChannel is FAILED_PRECONDITION and
  // engines keep to the Step stream.
  bool decode_step_channels = true;
  // How long a channel's thread polls for the next step before it sleeps (0: it always sleeps,
  // and every step pays a futex wake). Polling costs a core per channel while it lasts.
  absl::Duration decode_step_channel_spin = absl::Milliseconds(1);
  // Transfer channels (data_plane.proto, OpenTransferChannel): same-host engines' gets and puts
  // through a shared-memory mailbox instead of the Transfer RPCs. Off: OpenTransferChannel is
  // FAILED_PRECONDITION and engines keep to the RPCs.
  bool data_plane_transfer_channels = true;
  // How long a transfer channel's thread polls for the next transfer before it sleeps (as
  // decode_step_channel_spin).
  absl::Duration data_plane_transfer_channel_spin = absl::Milliseconds(1);

  // --- Lifecycle ---
  // On SIGTERM/SIGINT: stop accepting calls, let calls in flight finish for this long, then
  // cancel the rest. Kubernetes' default grace period is 30 s, so stay well below it.
  absl::Duration shutdown_grace = absl::Seconds(10);
};

// Cross-field checks: INVALID_ARGUMENT naming the fields, e.g. chunk_bytes must leave room for
// framing within max_message_bytes, put_ttl <= max_put_ttl, the budget holds at least a page.
absl::Status ValidateConfig(const ServerConfig& config);

// The files the config names (TLS certificate, key and CA; tokens) can be read, parse and
// agree with each other. INVALID_ARGUMENT naming the setting and the file. Separate from
// ValidateConfig, which checks values only, so that --check-config reports both.
absl::Status CheckConfigFiles(const ServerConfig& config);

// What the server's resident memory stays below, as a formula of the settings (the README's
// "Memory" section): the host tiers (memory_budget + spill_budget), decode_memory_budget unless
// compute_backend is cuda (live states in host memory otherwise), grpc_memory_budget, two
// max_message_bytes per core for messages being parsed and built outside gRPC's quota,
// kHeapRetainedBytes of freed heap the allocator keeps mapped (large_allocations.h), and
// kProcessBaseBytes for code, stacks and the index. `cores`: the CPUs the process may use.
inline constexpr uint64_t kHeapRetainedBytes = 128 * kMiB;
inline constexpr uint64_t kProcessBaseBytes = 64 * kMiB;
uint64_t ServerMemoryBound(const ServerConfig& config, int cores);

// The attached-decode options. REQUIRES: ValidateConfig(config).ok().
decode::DecodeOptions ToDecodeOptions(const ServerConfig& config);

// The core's options for this config.
core::StoreOptions ToStoreOptions(const ServerConfig& config);

}  // namespace leapcache::server
