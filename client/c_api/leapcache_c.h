/* leapcache C API: a plain C ABI over the C++ client (leapcache/client.h, leapcache/data_plane.h),
 * for callers that cannot use C++ types: the Python package loads it with ctypes.
 *
 *   leapcache_client_options o = {sizeof o}; o.target = "127.0.0.1:7470";
 *   leapcache_client* c;
 *   if (leapcache_client_create(&o, &c) != 0) puts(leapcache_last_error());
 *   ...
 *   leapcache_client_destroy(c);
 *
 * Contracts:
 *  - Every function returning int returns 0 on success, else the gRPC status code of the failure
 *    (1..16, the numbering of grpc/status.h and absl::StatusCode); leapcache_last_error() then
 *    returns its message. Errors are the C++ client's, unchanged.
 *  - Every struct passed in or out starts with `struct_size`, which the caller sets to the
 *    sizeof of the struct it was compiled against; a size the library does not know is
 *    INVALID_ARGUMENT. Fields are only ever appended, so a newer library accepts older callers.
 *  - Out-parameters are written only on success.
 *  - Strings in are NUL-terminated UTF-8; NULL means empty. Strings out are NUL-terminated and
 *    truncated to their array.
 *  - Block hashes are 32 bytes; a chain of n hashes is n * 32 contiguous bytes.
 *  - A leapcache_client may be used from several threads at once (the C++ Client is
 *    thread-safe); destroying it while another thread is inside a call on it is undefined.
 *    Calls of one leapcache_engine are serialized by the library.
 *  - No call blocks on anything but the network and the deadlines in leapcache_client_options,
 *    and no call calls back into the caller.
 */
#ifndef LEAPCACHE_C_H_
#define LEAPCACHE_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Incremented when a function's meaning changes; new functions and appended fields do not. */
#define LEAPCACHE_C_ABI_VERSION 1u

#define LEAPCACHE_HASH_BYTES 32

/* Values of the wire enums (proto/leapcache/v1/types.proto, data_plane.proto). */
enum {
  LEAPCACHE_KIND_GDN = 1,
  LEAPCACHE_KIND_KDA = 2,

  LEAPCACHE_CODEC_FP32 = 1,
  LEAPCACHE_CODEC_BF16 = 2,
  LEAPCACHE_CODEC_FP16 = 3,
  LEAPCACHE_CODEC_INT_ROW = 4,
  LEAPCACHE_CODEC_INT_COL = 5,
  LEAPCACHE_CODEC_LEAP = 6,

  /* leapcache_encoding.dtype: 0 is the compact v1 blobs, moved byte-exact. */
  LEAPCACHE_DTYPE_COMPACT = 0,
  LEAPCACHE_DTYPE_FP32 = 1,
  LEAPCACHE_DTYPE_BF16 = 2,

  /* One dense state: KV is [dk][dv] (value index contiguous), VK is [dv][dk]. */
  LEAPCACHE_LAYOUT_KV = 1,
  LEAPCACHE_LAYOUT_VK = 2,

  /* leapcache_namespace_spec.conv_dtype: a short-convolution state's element type. */
  LEAPCACHE_CONV_DTYPE_FP32 = 1,
  LEAPCACHE_CONV_DTYPE_BF16 = 2,
  LEAPCACHE_CONV_DTYPE_FP16 = 3,

  LEAPCACHE_TRANSPORT_KIND_INLINE = 1,
  LEAPCACHE_TRANSPORT_KIND_UCX = 2,
  LEAPCACHE_TRANSPORT_KIND_NCCL = 3,
  LEAPCACHE_TRANSPORT_KIND_CUDA_IPC = 4,

  LEAPCACHE_MEMORY_HOST = 1,
  LEAPCACHE_MEMORY_CUDA = 2
};

typedef struct leapcache_client leapcache_client;
typedef struct leapcache_engine leapcache_engine;

/* ---- Library ---------------------------------------------------------------------------- */

uint32_t leapcache_abi_version(void);
/* The message of this thread's last failed call ("" if none yet). Valid until this thread's
 * next call into the library. */
const char* leapcache_last_error(void);
/* 1 if this build of the library has the transport (LEAPCACHE_TRANSPORT_KIND_*), else 0. */
int32_t leapcache_transport_built(int32_t transport);

/* ---- Connection --------------------------------------------------------------------------- */

typedef struct {
  uint32_t struct_size;
  const char* target; /* host:port; NULL: 127.0.0.1:7470 */
  /* Transport security (client.h's ClientOptions): tls != 0 connects over TLS. */
  int32_t tls;
  const char* tls_root_ca_file;     /* PEM; NULL: gRPC's default roots */
  const char* tls_client_cert_file; /* mutual TLS: both or neither */
  const char* tls_client_key_file;
  const char* tls_server_name;
  const char* token; /* bearer token; sent over TLS only unless allow_token_without_tls */
  int32_t allow_token_without_tls; /* loopback targets only */
  /* <= 0: the C++ client's default (10 s, 10 s, 120 s). */
  int64_t connect_timeout_ms;
  int64_t rpc_timeout_ms;
  int64_t transfer_timeout_ms;
  /* 0: the C++ client's default (1 MiB, 8 MiB). */
  uint64_t chunk_bytes;
  uint64_t max_message_bytes;
} leapcache_client_options;

/* UNAVAILABLE if no connection is up within connect_timeout_ms. */
int leapcache_client_create(const leapcache_client_options* options, leapcache_client** out);
/* NULL is ignored. */
void leapcache_client_destroy(leapcache_client* client);

/* grpc.health.v1 Check of `service` (NULL or "": the whole server); *serving = 1 iff SERVING. */
int leapcache_check_health(leapcache_client* client, const char* service, int32_t* serving);

/* ---- Namespaces --------------------------------------------------------------------------- */

typedef struct {
  int32_t codec; /* LEAPCACHE_CODEC_* */
  int32_t bits;
  int32_t p;
  int32_t r;
  int32_t smoothing;
} leapcache_storage_format;

/* The documented settings of `codec` at `bits` (0: the codec's default width): the window
 * format's presets at 8, 6 or 4 bits (p = 16, r = 4/6/8, smoothing), p = 1 and r = 0 for the
 * per-step codecs. INVALID_ARGUMENT for an unknown codec or a width it does not have. */
int leapcache_format_preset(int32_t codec, int32_t bits, leapcache_storage_format* out);

typedef struct {
  uint32_t struct_size;
  const char* tenant;
  int32_t linear_layers;
  int32_t total_heads;
  int32_t dk;
  int32_t dv;
  int32_t kind; /* LEAPCACHE_KIND_* */
  leapcache_storage_format format;
  double flops_per_token; /* eviction hint; 0: unknown */
  /* The short-convolution state stored after each (layer, head)'s state (types.proto
   * ConvShape): channels per layer over all ranks (a multiple of total_heads), width =
   * conv_kernel - 1, dtype LEAPCACHE_CONV_DTYPE_*; all 0: none. Then extra_bytes opaque bytes
   * per (layer, head); 0: none. */
  int32_t conv_channels;
  int32_t conv_width;
  int32_t conv_dtype;
  int32_t extra_bytes;
} leapcache_namespace_spec;

typedef struct {
  uint32_t struct_size;
  uint32_t id;
  uint32_t layout_fingerprint;
  uint64_t tag;
  uint64_t blob_bytes; /* one stored (layer, head) blob */
  char fingerprint[72]; /* 64 hex digits */
  char format_label[64];
  /* One (layer, head)'s side state (conv state, then extra bytes); 0 without either. Each
   * (layer, head) unit of a checkpoint's bytes is its state followed by its side state. */
  uint64_t side_bytes;
} leapcache_namespace_info;

/* Idempotent: the same spec gets the same namespace. */
int leapcache_register_namespace(leapcache_client* client, const leapcache_namespace_spec* spec,
                                 leapcache_namespace_info* out);

/* ---- Keys ----------------------------------------------------------------------------------- */

/* The SHA-256 block-hash chain of `tokens` (client.h's ChainHashes): one hash per full block of
 * block_tokens tokens, salted with `extras`. Writes n_tokens / block_tokens hashes to `out`
 * (capacity out_capacity hashes) and their count to *n_out; OUT_OF_RANGE, with the count needed
 * in *n_out, if they do not fit. INVALID_ARGUMENT as ChainHashes. */
int leapcache_chain_hashes(const uint32_t* tokens, size_t n_tokens, int64_t block_tokens,
                           const uint8_t* extras, size_t extras_bytes, uint8_t* out,
                           size_t out_capacity, size_t* n_out);

/* CRC-32C of bytes (what commits and gets check). */
uint32_t leapcache_crc32c(const void* bytes, size_t n);

/* ---- Checkpoints -------------------------------------------------------------------------- */

/* Heads [begin, end) of every layer; (0, 0) means all heads. */
typedef struct {
  int32_t begin;
  int32_t end;
} leapcache_head_range;

/* Linear layers [begin, end) of a checkpoint; (0, 0) means every layer. */
typedef struct {
  int32_t begin;
  int32_t end;
} leapcache_layer_range;

typedef struct {
  int64_t tokens;
  int64_t blocks;
} leapcache_position;

typedef struct {
  int32_t dtype;  /* LEAPCACHE_DTYPE_*; COMPACT: v1 blobs, layout unused */
  int32_t layout; /* LEAPCACHE_LAYOUT_* */
} leapcache_encoding;

typedef struct {
  uint32_t struct_size;
  int32_t hit;
  int32_t index; /* chain index of the deepest stored checkpoint; -1 on a miss */
  leapcache_position position;
} leapcache_lookup_result;

/* The deepest checkpoint along `chain` (chain_len hashes) holding `heads` (NULL: all).
 * max_depth 0: the whole chain. */
int leapcache_lookup(leapcache_client* client, uint32_t namespace_id, const uint8_t* chain,
                     size_t chain_len, const leapcache_head_range* heads, int32_t max_depth,
                     int64_t block_tokens, leapcache_lookup_result* out);

/* One lookup of a batch: leapcache_lookup's arguments. */
typedef struct {
  uint32_t struct_size;
  uint32_t namespace_id;
  const uint8_t* chain; /* chain_len hashes, LEAPCACHE_HASH_BYTES each */
  size_t chain_len;
  const leapcache_head_range* heads; /* NULL: all heads */
  int32_t max_depth;                 /* 0: the whole chain */
  int64_t block_tokens;
} leapcache_lookup_request;

/* n lookups (1..4096, e.g. a scheduler step's prompts) in one call. Returns 0 when the batch was
 * answered: then codes[i] is 0 and results[i] answers requests[i] as leapcache_lookup would, or
 * codes[i] is the code leapcache_lookup would have failed with and leapcache_batch_error(i) its
 * message. Nonzero: nothing was answered (no connection, failed authentication, n outside
 * 1..4096, a bad argument); leapcache_last_error() says why. Every struct_size is checked. */
int leapcache_lookup_batch(leapcache_client* client, const leapcache_lookup_request* requests,
                           size_t n, leapcache_lookup_result* results, int32_t* codes);
/* The message of item i of this thread's last leapcache_lookup_batch ("" where it succeeded or
 * i is out of range). Valid until this thread's next call into the library. */
const char* leapcache_batch_error(size_t i);

typedef struct {
  uint32_t struct_size;
  uint32_t namespace_id;
  uint8_t hash[LEAPCACHE_HASH_BYTES];
  leapcache_position position;
  leapcache_head_range heads; /* (0, 0): all heads */
  int64_t ttl_ms;             /* reserve-to-commit time; 0: the server's default */
} leapcache_put_target;

typedef struct {
  uint32_t struct_size;
  leapcache_position position;
  leapcache_head_range heads;
  int32_t layers;
  int32_t dk;
  int32_t dv;
  int32_t kind;
  leapcache_storage_format format;
  leapcache_encoding encoding; /* dtype COMPACT: blobs */
  uint64_t blob_bytes;
  uint64_t state_bytes; /* dense only */
  uint64_t total_bytes; /* bytes written */
  uint32_t crc32c;      /* data-plane gets only; 0 otherwise */
  uint64_t side_bytes;  /* of every unit */
} leapcache_checkpoint_info;

/* The checkpoint at (namespace_id, hash) written to dst: (layer, head)-ordered units of a v1
 * blob (encoding NULL or COMPACT) or a dense state ([dk][dv] for KV, [dv][dk] for VK), each
 * followed by its side state (side_bytes). OUT_OF_RANGE, with nothing written, unless the
 * checkpoint is exactly dst_bytes long; DATA_LOSS if the stream's CRC-32C does not match. The
 * bytes are written into dst as they arrive: after a failure other than OUT_OF_RANGE its
 * contents are unspecified. dst is host memory. */
int leapcache_get_into(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash,
                       const leapcache_head_range* heads, const leapcache_encoding* encoding,
                       void* dst, uint64_t dst_bytes, leapcache_checkpoint_info* out);
/* leapcache_get_into of the units of `layers` only (NULL: every layer): out->layers counts
 * them; INVALID_ARGUMENT for a range outside the namespace's layers. */
int leapcache_get_layers_into(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash,
                              const leapcache_head_range* heads,
                              const leapcache_layer_range* layers,
                              const leapcache_encoding* encoding, void* dst, uint64_t dst_bytes,
                              leapcache_checkpoint_info* out);

/* The whole two-phase put of the bytes at src (host memory): units of blobs (encoding NULL or
 * COMPACT) or of dense states the service encodes, each followed by its side state. A failed
 * put is aborted and leaves nothing behind. */
int leapcache_put_from(leapcache_client* client, const leapcache_put_target* target,
                       const leapcache_encoding* encoding, const void* src, uint64_t bytes);

int leapcache_delete(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash);
int leapcache_pin(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash);
int leapcache_unpin(leapcache_client* client, uint32_t namespace_id, const uint8_t* hash);

/* ---- Stats (stats.proto documents each field) --------------------------------------------- */

#define LEAPCACHE_MAX_STATS_TIERS 8
#define LEAPCACHE_MAX_STATS_FORMATS 64

typedef struct {
  char name[32];
  uint64_t page_bytes, capacity_bytes, used_bytes, reserved_bytes, checkpoints;
} leapcache_tier_stats;

typedef struct {
  char tier[32];
  char format[32];
  uint64_t blobs, physical_bytes, stored_bytes, fp32_equivalent_bytes;
} leapcache_format_memory_stats;

typedef struct {
  uint32_t struct_size;
  /* Entries the server reported; only the first LEAPCACHE_MAX_STATS_* are in the arrays. */
  uint32_t n_tiers;
  uint32_t n_memory;
  leapcache_tier_stats tiers[LEAPCACHE_MAX_STATS_TIERS];
  leapcache_format_memory_stats memory[LEAPCACHE_MAX_STATS_FORMATS];
  uint64_t namespaces, checkpoints, pending_puts, leases, pinned;
  uint64_t lookups, lookup_hits, lookup_misses, lookup_hit_tokens, lookup_miss_tokens;
  uint64_t puts_reserved, puts_refused, puts_committed, puts_rejected, puts_aborted,
      puts_expired;
  uint64_t gets, get_hits, get_misses, deletes;
  uint64_t evictions, spills, promotions, bytes_in, bytes_out;
  /* The calling tenant's usage and quotas (0: no limit), where the server authenticates. */
  char tenant[264];
  uint64_t tenant_namespaces, tenant_bytes, tenant_pinned_bytes, tenant_pending_puts;
  uint64_t quota_bytes, quota_pinned_bytes, quota_pending_puts, quota_namespaces;
} leapcache_stats;

int leapcache_stats_get(leapcache_client* client, leapcache_stats* out);

/* ---- Data plane (data_plane.h) ------------------------------------------------------------ */

typedef struct {
  uint32_t struct_size;
  /* EngineIdentity */
  const char* name; /* required */
  const char* host; /* NULL: this machine's host name */
  uint32_t pid;     /* 0: this process */
  const char* gpu_uuid;
  int32_t gpu_index; /* CUDA device; -1: none */
  /* AttachOptions: transports offered (LEAPCACHE_TRANSPORT_KIND_*), in no particular order (the
   * service applies its own preference); NULL/0: UCX and inline. */
  const int32_t* transports;
  size_t n_transports;
  const char* ucx_transports; /* UCX_TLS of the engine's context; NULL: UCX's choice */
  int64_t session_ttl_ms;     /* <= 0: 60 s */
} leapcache_attach_options;

/* Attaches to the service at options->target. FAILED_PRECONDITION if no offered transport is
 * available on both sides (or this library was built without one offered). */
int leapcache_engine_attach(const leapcache_client_options* options,
                            const leapcache_attach_options* attach, leapcache_engine** out);
/* Detaches (errors ignored) and releases every registration. NULL is ignored. */
void leapcache_engine_destroy(leapcache_engine* engine);
/* The transport the service chose (LEAPCACHE_TRANSPORT_KIND_*) and the session's id. */
int32_t leapcache_engine_transport(const leapcache_engine* engine);
uint64_t leapcache_engine_session_id(const leapcache_engine* engine);
/* The engine's own client (lookups, namespaces, stats): owned by the engine, valid until
 * leapcache_engine_destroy; never pass it to leapcache_client_destroy. Transfers on namespaces
 * registered through it carry their tag. */
leapcache_client* leapcache_engine_client(leapcache_engine* engine);

/* Registers [ptr, ptr + bytes) of this process, host or CUDA memory (LEAPCACHE_MEMORY_*).
 * FAILED_PRECONDITION for CUDA memory in a build without CUDA. */
int leapcache_engine_register_buffer(leapcache_engine* engine, void* ptr, uint64_t bytes,
                                     int32_t memory, uint64_t* buffer_id);
int leapcache_engine_release_buffer(leapcache_engine* engine, uint64_t buffer_id);
/* Writes the checkpoint at `offset` of the registered buffer; OUT_OF_RANGE if it does not fit.
 * The buffer must stay untouched while the call runs. */
/* leapcache_lookup_batch through the engine's session: its transfer channel when the service is
 * on this host and the batch and its answers fit the mailbox (microseconds a lookup), else the
 * RPC. Results, codes and leapcache_batch_error as leapcache_lookup_batch's. */
int leapcache_engine_lookup_batch(leapcache_engine* engine,
                                  const leapcache_lookup_request* requests, size_t n,
                                  leapcache_lookup_result* results, int32_t* codes);
int leapcache_engine_get_into(leapcache_engine* engine, uint32_t namespace_id,
                              const uint8_t* hash, const leapcache_head_range* heads,
                              const leapcache_encoding* encoding, uint64_t buffer_id,
                              uint64_t offset, leapcache_checkpoint_info* out);
/* leapcache_engine_get_into of the units of `layers` only (NULL: every layer), e.g. each layer
 * into the page an engine keeps for it. */
int leapcache_engine_get_layers_into(leapcache_engine* engine, uint32_t namespace_id,
                                     const uint8_t* hash, const leapcache_head_range* heads,
                                     const leapcache_layer_range* layers,
                                     const leapcache_encoding* encoding, uint64_t buffer_id,
                                     uint64_t offset, leapcache_checkpoint_info* out);
/* One get of leapcache_engine_get_batch: leapcache_engine_get_layers_into's arguments. */
typedef struct {
  uint32_t struct_size;
  uint32_t namespace_id;
  const uint8_t* hash;
  const leapcache_head_range* heads;   /* NULL: all heads */
  const leapcache_layer_range* layers; /* NULL: every layer */
  const leapcache_encoding* encoding;  /* NULL: compact */
  uint64_t buffer_id;
  uint64_t offset;
} leapcache_engine_get;

/* n gets (1..4096: a scheduler step's checkpoints, or each layer into its own page) in as few
 * calls as the transport allows (data_plane.h, GetBatch). Returns 0 when the batch was answered:
 * then codes[i] is 0 and infos[i] describes what gets[i] wrote, or codes[i] is the code its get
 * failed with and leapcache_batch_error(i) its message. Nonzero: nothing was answered (n outside
 * 1..4096, a bad argument, a detached engine). */
int leapcache_engine_get_batch(leapcache_engine* engine, const leapcache_engine_get* gets, size_t n,
                               leapcache_checkpoint_info* infos, int32_t* codes);
/* Puts the `length` bytes at `offset` of the registered buffer, as leapcache_put_from. */
int leapcache_engine_put_from(leapcache_engine* engine, const leapcache_put_target* target,
                              const leapcache_encoding* encoding, uint64_t buffer_id,
                              uint64_t offset, uint64_t length);
/* Ends the session now; later transfers fail with FAILED_PRECONDITION. */
int leapcache_engine_detach(leapcache_engine* engine);

/* ---- Attached decode (decode_session.h) --------------------------------------------------- */

/* The requests' live states stay in the service; the engine sends each linear layer's token
 * inputs and gets the layer's output. One session is one engine's decode loop: its calls are
 * serialized by the library. */
typedef struct leapcache_decode_session leapcache_decode_session;

/* leapcache_decode_options.step_channel: how leapcache_decode_step_in_buffer reaches the
 * service. */
enum {
  LEAPCACHE_STEP_CHANNEL_AUTO = 0,   /* the shared-memory channel where offered, else the stream */
  LEAPCACHE_STEP_CHANNEL_STREAM = 1, /* always the gRPC Step stream */
  LEAPCACHE_STEP_CHANNEL_SHM = 2     /* the channel or an error */
};

typedef struct {
  uint32_t struct_size;
  uint32_t namespace_id;
  /* leapcache_namespace_info.tag: the session is refused (FAILED_PRECONDITION) if namespace_id
   * has come to name another namespace. 0: not checked. */
  uint64_t namespace_tag;
  leapcache_head_range heads; /* (0, 0): all heads */
  int32_t slots;              /* live states (requests) the session holds, >= 1 */
  int32_t l2norm_qk;          /* 1: q and k are L2-normalised by the service */
  float scale;                /* 0: dk^-1/2 */
  int32_t step_channel;       /* LEAPCACHE_STEP_CHANNEL_* */
} leapcache_decode_options;

typedef struct {
  uint32_t struct_size;
  uint64_t id;
  int32_t layers;
  leapcache_head_range heads;
  int32_t dk;
  int32_t dv;
  int32_t kind;         /* LEAPCACHE_KIND_* */
  char backend[16];     /* "cpu" or "cuda" */
  uint64_t state_bytes; /* of the session's live states on the service */
} leapcache_decode_info;

/* Opens a session on the server at options->target. Errors as decode_session.h's Open. */
int leapcache_decode_open(const leapcache_client_options* options,
                          const leapcache_decode_options* decode, leapcache_decode_session** out);
/* Closes the session (errors ignored) and frees it. NULL is ignored. */
void leapcache_decode_destroy(leapcache_decode_session* session);
int leapcache_decode_info_get(const leapcache_decode_session* session, leapcache_decode_info* out);

/* Bytes of one step's packed inputs (q, k, v in dtype, then g and beta in fp32) and of its
 * output, for `batch` requests of the session; 0 for an unknown dtype. */
uint64_t leapcache_decode_input_bytes(const leapcache_decode_info* info, size_t batch,
                                      int32_t dtype);
uint64_t leapcache_decode_output_bytes(const leapcache_decode_info* info, size_t batch,
                                       int32_t out_dtype);

/* One linear layer's token for `batch` requests, H = the session's heads, host memory:
 * q, k [batch][H][dk] and v [batch][H][dv] in dtype (LEAPCACHE_DTYPE_FP32 or BF16), g
 * [batch][H] (GDN) or [batch][H][dk] (KDA) and beta [batch][H] in fp32. slots[i] = -1 is
 * padding (a zero output). The arrays must hold exactly those sizes. */
typedef struct {
  uint32_t struct_size;
  int32_t layer;
  const int32_t* slots;
  size_t batch;
  int32_t dtype;
  const void* q;
  const void* k;
  const void* v;
  const float* g;
  const float* beta;
  int32_t out_dtype; /* of o */
} leapcache_decode_step;

/* Steps layer `step->layer` and writes o, [batch][H][dv] in out_dtype, to `o`; INVALID_ARGUMENT
 * unless o_bytes is exactly its size. */
int leapcache_decode_step_host(leapcache_decode_session* session, const leapcache_decode_step* step,
                               void* o, uint64_t o_bytes);

/* The same step with its vectors in a buffer `engine` registered (host or CUDA memory as its
 * transport takes): the packed inputs (leapcache_decode_input_bytes) at input_offset, o
 * written at output_offset before the call returns. The engine must be attached to the same
 * server over ucx, cuda_ipc or nccl. */
typedef struct {
  uint32_t struct_size;
  int32_t layer;
  const int32_t* slots;
  size_t batch;
  int32_t dtype;
  int32_t out_dtype;
  uint64_t buffer_id;
  uint64_t input_offset;
  uint64_t output_offset;
} leapcache_decode_buffer_step;

int leapcache_decode_step_in_buffer(leapcache_decode_session* session, leapcache_engine* engine,
                                    const leapcache_decode_buffer_step* step);
/* Whether the last leapcache_decode_step_in_buffer went through the shared-memory channel. */
int32_t leapcache_decode_stepping_through_channel(const leapcache_decode_session* session);

/* Slot `slot` to the zero state (a request starting from scratch). */
int leapcache_decode_reset(leapcache_decode_session* session, int32_t slot);
/* Slot `slot` from the checkpoint at hash; its position in *out. NOT_FOUND on a miss. */
int leapcache_decode_load(leapcache_decode_session* session, int32_t slot, const uint8_t* hash,
                          leapcache_position* out);
/* Slot `slot`'s state stored as the checkpoint at hash, at `position`. */
int leapcache_decode_commit(leapcache_decode_session* session, int32_t slot, const uint8_t* hash,
                            const leapcache_position* position);
/* Closes the session now; later calls fail with FAILED_PRECONDITION. */
int leapcache_decode_close(leapcache_decode_session* session);

#ifdef __cplusplus
}
#endif

#endif /* LEAPCACHE_C_H_ */
