// Namespaces: who a checkpoint belongs to and what its bytes mean.
//
// A namespace is (tenant, model fingerprint, storage format). Every key lives in exactly one
// namespace and never matches across namespaces: the same prompt under another tenant, another
// model or another format is a different checkpoint. Registering an identical spec again returns
// the same id (idempotent), so every engine replica can register at start-up. Namespaces are
// never removed.
//
// Ids outlive the registry in engines' hands: an engine that registered before a server restart
// still holds its id. So an id is derived from the namespace's tag (64 bits of SHA-256 over its
// whole identity, tenant included, the same on every server and restart): a restarted server
// gives a namespace the same id unless another namespace took it first, and an id is never
// reused within a registry's lifetime. Requests that carry the tag are checked against it
// (CheckTag), so an id that came to name another namespace is refused, never served; and the
// ids say nothing of how many namespaces exist. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpu/format/format.h"
#include "service/core/stats.h"
#include "service/core/types.h"

namespace leapcache::core {

inline constexpr size_t kMaxTenantBytes = 256;
inline constexpr int kMaxLayers = 1024;      // largest hybrid models have < 100 linear layers
inline constexpr int kMaxTotalHeads = 1024;  // per layer, across all TP ranks
inline constexpr size_t kMaxNamespaces = 1 << 16;
// Every stored blob starts on this boundary inside a page: a cache line, and more than the
// 16 bytes the vectorized decode kernels load at once.
inline constexpr size_t kSlotAlignment = 64;

inline constexpr int kMaxConvChannels = 1 << 16;  // per layer; large models have < 20K
inline constexpr int kMaxConvWidth = 16;          // conv_kernel - 1; models use 3
inline constexpr int kMaxExtraBytes = 1 << 16;    // per (layer, head)

// A linear layer's short causal-convolution state (types.proto ConvShape): `channels` per layer
// over all ranks, split evenly among the heads, `width` = conv_kernel - 1 elements each.
struct ConvShape {
  int channels = 0;
  int width = 0;
  DType dtype{};  // DType{}: none
  // All zero: the namespace has no conv state.
  bool present() const { return channels != 0 || width != 0 || dtype != DType{}; }
};

// The model-side identity of a namespace: what a state of one (layer, head) is.
struct ModelFingerprint {
  int linear_layers = 0;  // layers with a recurrent state (GDN/KDA), not the attention layers
  int total_heads = 0;    // state heads per layer, all tensor-parallel ranks together
  int dk = 0;
  int dv = 0;
  StateKind kind = StateKind::kGdn;
  // The side state stored after each (layer, head)'s blob, as given: its share of the layer's
  // conv state, then `extra_bytes` opaque bytes. Both absent for a model without them.
  ConvShape conv{};
  int extra_bytes = 0;
};

struct NamespaceSpec {
  std::string tenant;
  ModelFingerprint model;
  // How every blob of the namespace is stored; its dk, dv, kind must equal the model's.
  BlobSpec format;
  // Not part of the identity: a hint for the state-aware eviction policy, the whole model's
  // prefill FLOPs per token (attention and MLP included, e.g. 2 x parameters). 0 means unknown,
  // in which case the linear layers' own cost is used (a lower bound, see NamespaceInfo). The
  // first registration's hint is kept.
  double flops_per_token = 0;
};

// Everything the store derives from a spec once, at registration.
//
// What the store keeps per (layer, head) is a unit: the v1 blob (blob_bytes), then the head's
// side state (side_bytes: its conv channels x width elements, then the extra bytes; 0 for a
// model without either). Puts, gets, leases and pages deal in units; only the commit check
// (blob_check.h) and the codecs look inside one.
struct NamespaceInfo {
  NamespaceId id = 0;
  uint64_t tag = 0;  // NamespaceTag(spec)
  NamespaceSpec spec;
  std::string format_label;          // metrics label: "leap8", "int-row4", "fp32", ...
  size_t blob_bytes = 0;             // ComputeLayout(format).blob_bytes()
  size_t conv_bytes = 0;             // one head's conv state: channels / heads x width x element
  size_t side_bytes = 0;             // conv_bytes + extra_bytes
  size_t unit_bytes = 0;             // blob_bytes + side_bytes
  size_t slot_bytes = 0;             // unit_bytes rounded up to kSlotAlignment
  // dk * dv * 4 + side_bytes: what an engine keeps per (layer, head), the state at fp32 and the
  // side state as it is (stored as it is, too).
  uint64_t fp32_bytes_per_blob = 0;
  // spec.flops_per_token if given, else 8 * dk * dv * total_heads * linear_layers: per head and
  // token the delta rule reads S^T k, adds k u^T, decays S and reads out S^T q, ~8 dk dv FLOPs.
  double flops_per_token = 0;
  // Units of a checkpoint's head range (all layers).
  size_t Units(HeadRange heads) const {
    return static_cast<size_t>(spec.model.linear_layers) * static_cast<size_t>(heads.size());
  }
  // Bytes of a complete checkpoint (every layer and head), the denominator of the state-aware
  // policy's value: compressed formats save the same compute in fewer bytes.
  double CheckpointBytes() const {
    return static_cast<double>(unit_bytes) * spec.model.linear_layers * spec.model.total_heads;
  }
};

// NOT_FOUND "unknown namespace <id>": the answer for an id never registered and, where tenants
// are authenticated, for another tenant's namespace alike, so that neither can be told apart.
absl::Status UnknownNamespaceError(NamespaceId id);

// The first 8 bytes, little-endian, of SHA-256 over the spec's identity (tenant, model, format;
// not the flops hint); never 0.
uint64_t NamespaceTag(const NamespaceSpec& spec);

// "leap8", "int-col6", "fp32": codec name plus bits for integer codecs.
std::string FormatLabel(const BlobSpec& spec);
// Exact equality of every BlobSpec field.
bool SameBlobSpec(const BlobSpec& a, const BlobSpec& b);

class NamespaceRegistry {
 public:
  // `max_slot_bytes`: the smallest page of any memory tier; a unit must fit in one page.
  // `per_tenant`: namespaces one tenant may register (0: no limit but kMaxNamespaces).
  explicit NamespaceRegistry(size_t max_slot_bytes, size_t per_tenant = 0)
      : max_slot_bytes_(max_slot_bytes), per_tenant_(per_tenant) {}
  NamespaceRegistry(const NamespaceRegistry&) = delete;
  NamespaceRegistry& operator=(const NamespaceRegistry&) = delete;

  // INVALID_ARGUMENT naming the field: empty or too long tenant, or one with a byte outside
  // printable ASCII or a space; layers or heads out of range; a conv state with channels out of
  // range or not a multiple of the heads, a width out of range or no dtype; extra bytes out of
  // range; an invalid format; format dk/dv/kind differing from the model's; a negative or
  // non-finite flops hint; a unit larger than a page. RESOURCE_EXHAUSTED past kMaxNamespaces, or past the
  // tenant's quota of namespaces.
  absl::StatusOr<NamespaceId> Register(const NamespaceSpec& spec);

  // NOT_FOUND for an id never returned by Register. The pointer stays valid for the registry's
  // lifetime and its target never changes.
  absl::StatusOr<const NamespaceInfo*> Find(NamespaceId id) const;

  // Find, then FAILED_PRECONDITION if `tag` is not 0 and not the namespace's tag: the caller's id
  // was issued for another namespace (by this server before a restart, or by another server).
  absl::StatusOr<const NamespaceInfo*> FindTagged(NamespaceId id, uint64_t tag) const;

  size_t size() const;
  // Adds each tenant's namespaces and namespace-quota refusals to `tenants`.
  void FillTenants(std::map<std::string, TenantStats>* tenants) const;

 private:
  struct TenantCount {
    size_t namespaces = 0;
    uint64_t refused = 0;
  };

  const size_t max_slot_bytes_;
  const size_t per_tenant_;
  mutable absl::Mutex mu_;
  // unique_ptr: Find's pointers survive the map growing.
  absl::flat_hash_map<NamespaceId, std::unique_ptr<const NamespaceInfo>> infos_
      ABSL_GUARDED_BY(mu_);
  // Canonical identity bytes -> id.
  absl::flat_hash_map<std::string, NamespaceId> ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, TenantCount> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::core
