// leapcache client: the C++ API of the leapcache state-cache service (proto/leapcache/v1).
//
//   auto client = leapcache::client::Client::Create({.target = "127.0.0.1:7470"});
//   auto ns = (*client)->RegisterNamespace(spec);                      // idempotent
//   auto chain = leapcache::client::ChainHashes(prompt_tokens, 256);   // SHA-256 block chain
//   auto hit = (*client)->Lookup({.namespace_id = ns->id, .chain = *chain, .block_tokens = 256});
//   if (hit->hit) auto states = (*client)->Get({.namespace_id = ns->id,
//                                               .hash = (*chain)[hit->index],
//                                               .dense = DenseEncoding{DType::kBf16,
//                                               Layout::kVK}});
//   (*client)->PutDense({.namespace_id = ns->id, .hash = (*chain)[i], .position = {...}},
//                       {DType::kFp32, Layout::kKV}, state_bytes);
//
// Contracts:
//  - Every method is a blocking RPC with a deadline (ClientOptions) and returns the server's
//    gRPC status as an absl::Status with the same code and message (state_cache.proto lists
//    them); UNAVAILABLE when the server cannot be reached.
//  - Large checkpoints always move in chunks of at most ClientOptions::chunk_bytes: puts over a
//    client stream, gets over a server stream, checked end to end with CRC-32C.
//  - PutCompact/PutDense are the whole two-phase put (reserve, upload, commit) and abort the put
//    if any step fails, so a failed call leaves nothing behind; ReservePut/Upload/CommitPut/
//    AbortPut expose the phases for callers that stream from elsewhere.
//  - Each Client owns its own connection. A Client is thread-safe: calls may run concurrently.
//  - Security (the server's tls_* and tokens_file settings): `tls` with the server's CA (and a
//    client certificate for mutual TLS) encrypts and authenticates the connection; `token` is
//    sent as `authorization: Bearer TOKEN` on every call, over TLS only (loopback excepted).
// No generated protobuf or gRPC types appear here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace leapcache::client {

// A prefix block hash: 32 bytes, compared in full by the service.
using BlockHash = std::array<uint8_t, 32>;

struct ClientOptions {
  // host:port of the server.
  std::string target = "127.0.0.1:7470";
  // Create() fails with UNAVAILABLE if no connection is up within this time.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Deadline of each unary call (lookup, reserve, commit, ...).
  absl::Duration rpc_timeout = absl::Seconds(10);
  // Deadline of each streaming call (upload, get): long enough for a large checkpoint on a
  // slow link, short enough that a stuck transfer gives its memory back.
  absl::Duration transfer_timeout = absl::Seconds(120);
  // Data bytes per upload message and the largest per get message asked of the server. Must
  // stay below the server's max_message_bytes less framing (64 KiB).
  size_t chunk_bytes = 1 << 20;
  // Largest message this client sends or receives; the server's default is 8 MiB.
  size_t max_message_bytes = 8 << 20;
  // HTTP/2 keepalive pings (the server accepts pings every 10 s or slower by default).
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);

  // --- Transport security (the server's tls_* and tokens_file settings) ---
  // Connect over TLS, verifying the server's certificate. Off: plaintext.
  bool tls = false;
  // PEM CA bundle that signed the server's certificate; empty: gRPC's default roots.
  std::string tls_root_ca_file;
  // PEM certificate chain and key this client presents (the server's mutual TLS); both or none.
  std::string tls_client_cert_file;
  std::string tls_client_key_file;
  // Name the server's certificate must carry, when it is not the target's host (connecting by
  // IP address to a certificate issued for a DNS name).
  std::string tls_server_name;
  // Bearer token sent as `authorization: Bearer TOKEN` on every call; empty: none. Sent only
  // over TLS: Create() refuses a token without tls, unless allow_token_without_tls is set and
  // the target is a loopback address (127.x, ::1, localhost), where nothing crosses a network.
  std::string token;
  bool allow_token_without_tls = false;
};

enum class StateKind { kGdn = 1, kKda = 2 };
// Storage codecs (gpu/FORMAT.md). Values match the wire enum.
enum class Codec { kFp32 = 1, kBf16 = 2, kFp16 = 3, kIntRow = 4, kIntCol = 5, kLeap = 6 };
enum class DType { kFp32 = 1, kBf16 = 2 };
// Layout of one dense state: kKV is [dk][dv] (value index contiguous), kVK is [dv][dk].
enum class Layout { kKV = 1, kVK = 2 };

// Element type of a short-convolution state, as the engine keeps it.
enum class ConvDType { kFp32 = 1, kBf16 = 2, kFp16 = 3 };
// A linear layer's short-convolution state (types.proto ConvShape): `channels` per layer over
// all ranks, split evenly among the heads; each channel's last `width` = conv_kernel - 1 inputs.
struct ConvShape {
  int channels = 0;
  int width = 3;
  ConvDType dtype = ConvDType::kBf16;
};
// The dtype named "bf16", "fp16" or "fp32" (command lines); INVALID_ARGUMENT otherwise.
absl::StatusOr<ConvDType> ConvDTypeFromName(std::string_view name);
struct ModelShape {
  int linear_layers = 0;
  int total_heads = 0;
  int dk = 128;
  int dv = 128;
  StateKind kind = StateKind::kGdn;
  // Stored after each (layer, head)'s state, as given: its conv channels, then `extra_bytes`
  // opaque bytes (the unit layout, types.proto). nullopt / 0: none.
  std::optional<ConvShape> conv{};
  int extra_bytes = 0;
};

struct StorageFormat {
  Codec codec = Codec::kLeap;
  int bits = 8;
  int p = 16;
  int r = 4;
  bool smoothing = true;
  // The published window-format settings at 8, 6 or 4 bits (r = 4, 6, 8; p = 16; smoothing).
  static StorageFormat Leap(int bits);
};

struct NamespaceSpec {
  std::string tenant;
  ModelShape model;
  StorageFormat format;
  double flops_per_token = 0;  // eviction hint; 0: unknown
};

struct NamespaceInfo {
  uint32_t id = 0;
  // 64 bits of SHA-256 over the namespace's whole identity, tenant included. The Client sends it
  // with every request on a namespace it registered, so that an id that came to name another
  // namespace (a server restart) is refused, and then registers again and retries once. Objects
  // that address namespaces on their own (AttachedEngine, DecodeSession) take it in their
  // requests.
  uint64_t tag = 0;
  std::string fingerprint;  // 64 hex digits, equal for interchangeable model + format
  uint64_t blob_bytes = 0;  // one stored (layer, head) blob
  std::string format_label;
  uint32_t layout_fingerprint = 0;
  // One (layer, head)'s side state (its conv state, then its extra bytes); 0 without either.
  // Every unit of a checkpoint's bytes is the state (blob or dense matrix) followed by it.
  uint64_t side_bytes = 0;
};

// Heads [begin, end) of every layer. A default HeadRange (0, 0) means all heads.
struct HeadRange {
  int begin = 0;
  int end = 0;
  bool all() const { return begin == 0 && end == 0; }
  int size() const { return end - begin; }
};

// Linear layers [begin, end) of a checkpoint. A default LayerRange (0, 0) means every layer.
struct LayerRange {
  int begin = 0;
  int end = 0;
  bool all() const { return begin == 0 && end == 0; }
  int size() const { return end - begin; }
};

struct Position {
  int64_t tokens = 0;
  int64_t blocks = 0;
};

struct LookupRequest {
  uint32_t namespace_id = 0;
  std::span<const BlockHash> chain;  // chain[i]: hash of block i + 1
  HeadRange heads;
  int max_depth = 0;         // 0: whole chain
  int64_t block_tokens = 0;  // the engine's block size
};

struct LookupResult {
  bool hit = false;
  int index = -1;  // chain index of the deepest stored checkpoint
  Position position;
};

// Where a put goes.
struct PutTarget {
  uint32_t namespace_id = 0;
  BlockHash hash{};
  Position position;
  HeadRange heads;                            // all heads if default
  absl::Duration ttl = absl::ZeroDuration();  // 0: the server's default put TTL
};

struct DenseEncoding {
  DType dtype = DType::kFp32;
  Layout layout = Layout::kKV;
};

// A reserved put (phase 1).
struct Reservation {
  uint64_t put_id = 0;
  uint64_t expected_bytes = 0;  // to upload in total
  uint64_t blob_bytes = 0;
  uint64_t state_bytes = 0;  // dense puts only
  uint64_t side_bytes = 0;   // of every unit
  absl::Duration ttl;
  uint64_t max_chunk_bytes = 0;  // the server's largest accepted chunk
};

struct GetRequest {
  uint32_t namespace_id = 0;
  BlockHash hash{};
  HeadRange heads;                     // all heads if default
  std::optional<DenseEncoding> dense;  // nullopt: compact v1 blobs, byte-exact
  // Layers to read (all if default): the bytes are then those layers' units only. An engine
  // that keeps each layer's states in a page of its own reads each layer into its page.
  LayerRange layers{};
};

// A checkpoint's bytes: (layer, head)-ordered units, each a blob (compact) or a dense state,
// followed by its side state (side_bytes, 0 without one).
struct Checkpoint {
  Position position;
  HeadRange heads;
  int first_layer = 0;  // the bytes hold layers [first_layer, first_layer + layers)
  int layers = 0;
  int dk = 0;
  int dv = 0;
  StateKind kind = StateKind::kGdn;
  StorageFormat format;
  uint64_t blob_bytes = 0;
  uint64_t state_bytes = 0;  // dense only
  uint64_t side_bytes = 0;
  std::optional<DenseEncoding> dense;
  std::vector<uint8_t> bytes;
};

struct TierStats {
  std::string name;
  uint64_t page_bytes = 0, capacity_bytes = 0, used_bytes = 0, reserved_bytes = 0;
  uint64_t checkpoints = 0;
};

struct FormatMemoryStats {
  std::string tier, format;
  uint64_t blobs = 0, physical_bytes = 0, stored_bytes = 0, fp32_equivalent_bytes = 0;
};

// The server's Stats snapshot (stats.proto documents each field).
// The calling tenant's usage and quotas (0: no limit), where the server authenticates tenants.
struct TenantUsage {
  std::string tenant;
  uint64_t namespaces = 0, bytes = 0, pinned_bytes = 0, pending_puts = 0;
  uint64_t quota_bytes = 0, quota_pinned_bytes = 0, quota_pending_puts = 0, quota_namespaces = 0;
};

// Where the server authenticates tenants, the store-wide numbers are 0 unless it is set to
// stats_scope: store; `tenant` is the caller's own usage.
struct ServerStats {
  std::vector<TierStats> tiers;
  std::vector<FormatMemoryStats> memory;
  uint64_t namespaces = 0, checkpoints = 0, pending_puts = 0, leases = 0, pinned = 0;
  uint64_t lookups = 0, lookup_hits = 0, lookup_misses = 0;
  uint64_t lookup_hit_tokens = 0, lookup_miss_tokens = 0;
  uint64_t puts_reserved = 0, puts_refused = 0, puts_committed = 0, puts_rejected = 0;
  uint64_t puts_aborted = 0, puts_expired = 0;
  uint64_t gets = 0, get_hits = 0, get_misses = 0, deletes = 0;
  uint64_t evictions = 0, spills = 0, promotions = 0, bytes_in = 0, bytes_out = 0;
  TenantUsage tenant;
};

class Client {
 public:
  // Connects to options.target. INVALID_ARGUMENT for bad options; UNAVAILABLE if no
  // connection is up within connect_timeout.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  absl::StatusOr<NamespaceInfo> RegisterNamespace(const NamespaceSpec& spec);
  absl::StatusOr<LookupResult> Lookup(const LookupRequest& request);
  // Many lookups in one call (1..4096: a scheduler step's prompts, any namespaces): result i
  // answers requests[i] exactly as Lookup would, or holds the status Lookup would have failed
  // with. The call fails as a whole only where no lookup was answered: no connection, failed
  // authentication, no requests or more than 4,096 (INVALID_ARGUMENT).
  absl::StatusOr<std::vector<absl::StatusOr<LookupResult>>> LookupBatch(
      std::span<const LookupRequest> requests);

  // The whole put of (layer, head)-ordered units (v1 blobs, each followed by its side state
  // where the namespace has one): reserve, upload in chunks, commit with their CRC-32C. On
  // failure the put is aborted and the first error returned.
  absl::Status PutCompact(const PutTarget& target, std::span<const uint8_t> blobs);
  // The same with dense states ([layers][heads][dk][dv] for kKV, [..][dv][dk] for kVK, each
  // followed by its side state) that the service encodes with the namespace's codec.
  absl::Status PutDense(const PutTarget& target, const DenseEncoding& encoding,
                        std::span<const uint8_t> states);

  // The phases, for callers that produce the bytes incrementally.
  absl::StatusOr<Reservation> ReservePut(const PutTarget& target,
                                         const std::optional<DenseEncoding>& dense);
  // One client stream carrying `bytes` at `offset` of the put, in chunks of
  // ClientOptions::chunk_bytes (rounded down to whole states for a dense put, whose bytes must
  // continue where its last upload stopped, or restart at 0).
  absl::Status Upload(const Reservation& put, uint64_t offset, std::span<const uint8_t> bytes);
  absl::Status CommitPut(uint64_t put_id, uint32_t crc32c);
  absl::Status AbortPut(uint64_t put_id);

  // The checkpoint's bytes; DATA_LOSS if the stream's CRC-32C or length does not match.
  absl::StatusOr<Checkpoint> Get(const GetRequest& request);
  // The same, written straight into `out` as it arrives (no allocation, no second copy); the
  // returned Checkpoint's bytes stay empty. OUT_OF_RANGE, with nothing written, unless the
  // checkpoint is exactly out.size() bytes. After any other failure `out` holds an unspecified
  // part of the bytes: use it only on success.
  absl::StatusOr<Checkpoint> GetInto(const GetRequest& request, std::span<uint8_t> out);
  absl::Status Delete(uint32_t namespace_id, const BlockHash& hash);
  absl::Status Pin(uint32_t namespace_id, const BlockHash& hash);
  absl::Status Unpin(uint32_t namespace_id, const BlockHash& hash);
  absl::StatusOr<ServerStats> Stats();
  // grpc.health.v1 Check of `service` ("" for the whole server): true iff SERVING.
  absl::StatusOr<bool> CheckHealth(const std::string& service = "");

  const ClientOptions& options() const;
  // The tag of a namespace registered through this client under `namespace_id`.
  std::optional<uint64_t> RegisteredTag(uint32_t namespace_id) const;

 private:
  absl::StatusOr<Checkpoint> GetTo(const GetRequest& request,
                                   std::optional<std::span<uint8_t>> into);
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The SHA-256 block-hash chain of `tokens` (base/block_hash.h): one hash per full block
// of `block_tokens` tokens, each chained to its parent, salted with `extras`. INVALID_ARGUMENT
// for a block size outside [1, 65536], more than 65,536 blocks or extras over 4 KiB.
absl::StatusOr<std::vector<BlockHash>> ChainHashes(std::span<const uint32_t> tokens,
                                                   int64_t block_tokens,
                                                   std::span<const uint8_t> extras = {});

// 64 lowercase hex digits, and back (INVALID_ARGUMENT unless exactly 64 hex digits).
std::string HashToHex(const BlockHash& hash);
absl::StatusOr<BlockHash> HashFromHex(const std::string& hex);

// CRC-32C of bytes, as CommitPut expects it.
uint32_t Crc32c(std::span<const uint8_t> bytes);

}  // namespace leapcache::client
