#include "transport/ucx/ucx_context.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace leapcache::transport {
namespace {

class UcxRegistration final : public Registration {
 public:
  UcxRegistration(ucp_context_h context, ucp_mem_h memh, BufferDescriptor descriptor)
      : context_(context), memh_(memh), descriptor_(std::move(descriptor)) {}
  ~UcxRegistration() override { ucp_mem_unmap(context_, memh_); }
  const BufferDescriptor& descriptor() const override { return descriptor_; }

 private:
  ucp_context_h context_;
  ucp_mem_h memh_;
  BufferDescriptor descriptor_;
};

}  // namespace

absl::Status UcsError(ucs_status_t status, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_INVALID_PARAM:
      return absl::InvalidArgumentError(message);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
      return absl::ResourceExhaustedError(message);
    case UCS_ERR_TIMED_OUT:
      return absl::DeadlineExceededError(message);
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    default:
      // Unreachable peers, closed connections, missing devices: the transfer cannot happen.
      return absl::UnavailableError(message);
  }
}

absl::StatusOr<std::unique_ptr<UcxContext>> UcxContext::Create(const UcxOptions& options) {
  ucp_config_t* config = nullptr;
  if (ucs_status_t st = ucp_config_read(nullptr, nullptr, &config); st != UCS_OK) {
    return UcsError(st, "ucp_config_read");
  }
  // Worker addresses in the format CheckUcxWorkerAddress walks: unified mode packs resource
  // indices instead of lengths, whatever the environment says.
  if (ucs_status_t st = ucp_config_modify(config, "UNIFIED_MODE", "n"); st != UCS_OK) {
    ucp_config_release(config);
    return UcsError(st, "ucp_config_modify UNIFIED_MODE");
  }
  if (!options.transports.empty()) {
    if (ucs_status_t st = ucp_config_modify(config, "TLS", options.transports.c_str());
        st != UCS_OK) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(absl::StrCat("UCX transports \"", options.transports,
                                                     "\": ", ucs_status_string(st)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  // RMA for the transfers; WAKEUP so an idle target worker sleeps on its event fd instead of
  // spinning.
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  ucp_context_h context = nullptr;
  const ucs_status_t st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) {
    return UcsError(st, absl::StrCat("ucp_init (transports \"", options.transports, "\")"));
  }
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucs_status_t q = ucp_context_query(context, &attr); q != UCS_OK) {
    ucp_cleanup(context);
    return UcsError(q, "ucp_context_query");
  }
  Capabilities caps;
  caps.host = true;
  if (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) {
    caps.cuda = CudaAccess::kDirect;
  } else if (options.cuda_staging) {
    caps.cuda = CudaAccess::kStaged;
  }
  return std::unique_ptr<UcxContext>(new UcxContext(context, caps));
}

UcxContext::~UcxContext() { ucp_cleanup(context_); }

absl::StatusOr<std::unique_ptr<Registration>> UcxContext::Register(void* ptr, size_t bytes,
                                                                   MemoryKind memory) {
  if (ptr == nullptr) return absl::InvalidArgumentError("buffer pointer is null");
  if (bytes == 0) return absl::InvalidArgumentError("buffer bytes is 0");
  if (memory == MemoryKind::kCuda && !cuda_direct()) {
    return absl::InvalidArgumentError(
        "this UCX cannot reach CUDA memory directly; register a pinned host staging buffer");
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = ptr;
  params.length = bytes;
  params.memory_type =
      memory == MemoryKind::kCuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  ucp_mem_h memh = nullptr;
  if (ucs_status_t st = ucp_mem_map(context_, &params, &memh); st != UCS_OK) {
    return UcsError(st, "ucp_mem_map");
  }
  void* packed = nullptr;
  size_t packed_size = 0;
  if (ucs_status_t st = ucp_rkey_pack(context_, memh, &packed, &packed_size); st != UCS_OK) {
    ucp_mem_unmap(context_, memh);
    return UcsError(st, "ucp_rkey_pack");
  }
  BufferDescriptor d;
  d.transport = TransportKind::kUcx;
  d.memory = memory;
  d.address = reinterpret_cast<uint64_t>(ptr);
  d.bytes = bytes;
  d.key.assign(static_cast<const char*>(packed), packed_size);
  ucp_rkey_buffer_release(packed);
  return std::unique_ptr<Registration>(new UcxRegistration(context_, memh, std::move(d)));
}

}  // namespace leapcache::transport
