#include "transport/ucx/ucx_peer_connection.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "transport/ucx/ucx_target_worker.h"
#include "transport/ucx/ucx_wire_check.h"

namespace leapcache::transport {
namespace {

// Completion of one Execute's requests. UCX calls back on the thread that progresses the worker
// (Execute's), so plain fields suffice.
struct Completion {
  int outstanding = 0;
  ucs_status_t first_error = UCS_OK;
};

void OnComplete(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* c = static_cast<Completion*>(user_data);
  --c->outstanding;
  if (status != UCS_OK && c->first_error == UCS_OK) c->first_error = status;
}

class UcxRemoteRegion final : public RemoteRegion {
 public:
  UcxRemoteRegion(ucp_rkey_h rkey, BufferDescriptor descriptor)
      : rkey_(rkey), descriptor_(std::move(descriptor)) {}
  ~UcxRemoteRegion() override { ucp_rkey_destroy(rkey_); }
  const BufferDescriptor& descriptor() const override { return descriptor_; }
  ucp_rkey_h rkey() const { return rkey_; }

 private:
  ucp_rkey_h rkey_;
  BufferDescriptor descriptor_;
};

// Tracks a request a UCX call returned: done at once (nullptr), failed, or in flight.
absl::Status Track(ucs_status_ptr_t request, Completion& c, std::vector<void*>& in_flight,
                   const char* what) {
  if (request == nullptr) return absl::OkStatus();
  if (UCS_PTR_IS_ERR(request)) return UcsError(UCS_PTR_STATUS(request), what);
  ++c.outstanding;
  in_flight.push_back(request);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxPeerConnection>> UcxPeerConnection::Connect(
    UcxContext* context, const std::string& peer_address) {
  // The address comes from the engine: checked before UCX parses it, and parsed from a padded
  // copy (ucx_wire_check.h says why).
  LC_RETURN_IF_ERROR(CheckUcxWorkerAddress(peer_address));
  const std::vector<uint8_t> address = PaddedCopy(peer_address);
  // One thread at a time: the session's transfers are serialized by the service.
  LC_ASSIGN_OR_RETURN(ucp_worker_h worker, CreateUcxWorker(context, UCS_THREAD_MODE_SERIALIZED));
  std::unique_ptr<UcxPeerConnection> c(new UcxPeerConnection(context, worker));
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxPeerConnection::OnPeerError;
  params.err_handler.arg = c.get();
  if (ucs_status_t st = ucp_ep_create(worker, &params, &c->ep_); st != UCS_OK) {
    c->closed_ = true;
    return UcsError(st, "ucp_ep_create to the engine's worker address");
  }
  return c;
}

UcxPeerConnection::UcxPeerConnection(UcxContext* context, ucp_worker_h worker)
    : context_(context), worker_(worker) {}

UcxPeerConnection::~UcxPeerConnection() {
  ForceClose();
  ucp_worker_destroy(worker_);
}

void UcxPeerConnection::OnPeerError(void* self, ucp_ep_h, ucs_status_t status) {
  auto* c = static_cast<UcxPeerConnection*>(self);
  if (c->peer_status_ == UCS_OK) c->peer_status_ = status;
}

absl::Status UcxPeerConnection::health() const {
  // Whatever UCX reported (reset, timeout, cancelled requests), the engine is unreachable now.
  if (peer_status_ != UCS_OK) {
    return absl::UnavailableError(
        absl::StrCat("the engine's UCX endpoint failed: ", ucs_status_string(peer_status_)));
  }
  if (closed_) return absl::UnavailableError("the UCX connection to the engine is closed");
  return absl::OkStatus();
}

void UcxPeerConnection::ForceClose() {
  if (closed_) return;
  closed_ = true;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t request = ucp_ep_close_nbx(ep_, &param);
  if (request != nullptr && !UCS_PTR_IS_ERR(request)) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(request);
  }
}

absl::StatusOr<std::unique_ptr<RemoteRegion>> UcxPeerConnection::Import(
    const BufferDescriptor& descriptor) {
  LC_RETURN_IF_ERROR(ValidateDescriptor(descriptor, TransportKind::kUcx,
                                        context_->capabilities()));
  LC_RETURN_IF_ERROR(health());
  LC_RETURN_IF_ERROR(CheckUcxRemoteKey(descriptor.key));
  const std::vector<uint8_t> key = PaddedCopy(descriptor.key);
  ucp_rkey_h rkey = nullptr;
  if (ucs_status_t st = ucp_ep_rkey_unpack(ep_, key.data(), &rkey); st != UCS_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer.remote_key is not a UCX rkey this endpoint can use: ",
                     ucs_status_string(st)));
  }
  return std::unique_ptr<RemoteRegion>(new UcxRemoteRegion(rkey, descriptor));
}

absl::Status UcxPeerConnection::Execute(RemoteRegion& region, std::span<const TransferOp> ops,
                                        absl::Time deadline) {
  auto& remote = static_cast<UcxRemoteRegion&>(region);
  LC_RETURN_IF_ERROR(ValidateTransfers(remote.descriptor(), ops));
  LC_RETURN_IF_ERROR(health());

  Completion c;
  std::vector<void*> in_flight;
  in_flight.reserve(ops.size() + 1);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &OnComplete;
  param.user_data = &c;
  absl::Status issued = absl::OkStatus();
  for (const TransferOp& op : ops) {
    const uint64_t remote_address = remote.descriptor().address + op.remote_offset;
    ucs_status_ptr_t request =
        op.direction == Direction::kWrite
            ? ucp_put_nbx(ep_, op.local.data(), op.local.size(), remote_address, remote.rkey(),
                          &param)
            : ucp_get_nbx(ep_, op.local.data(), op.local.size(), remote_address, remote.rkey(),
                          &param);
    issued = Track(request, c, in_flight,
                   op.direction == Direction::kWrite ? "ucp_put_nbx" : "ucp_get_nbx");
    if (!issued.ok()) break;
  }
  // Puts complete locally before they land; the flush completes when every operation issued
  // on the endpoint has completed at the engine.
  if (issued.ok()) issued = Track(ucp_ep_flush_nbx(ep_, &param), c, in_flight, "ucp_ep_flush_nbx");

  bool timed_out = false;
  while (c.outstanding > 0) {
    if (ucp_worker_progress(worker_) != 0) continue;
    if (absl::Now() >= deadline) {
      // RMA requests cannot be recalled; closing the endpoint completes them (with an error),
      // after which no byte of `ops` is touched again.
      timed_out = true;
      ForceClose();
      while (c.outstanding > 0) ucp_worker_progress(worker_);
    }
  }
  for (void* request : in_flight) ucp_request_free(request);

  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("UCX transfer of ", ops.size(), " operations passed its deadline"));
  }
  // A failed operation leaves the endpoint in an unknown state: the connection is dead.
  if (c.first_error != UCS_OK && peer_status_ == UCS_OK) peer_status_ = c.first_error;
  if (!issued.ok() && peer_status_ == UCS_OK) return issued;
  return health();
}

}  // namespace leapcache::transport
