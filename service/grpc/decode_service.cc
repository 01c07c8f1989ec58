#include "service/grpc/decode_service.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/shm_mailbox.h"
#include "base/status_macros.h"
#include "service/grpc/data_plane_service.h"
#include "service/grpc/grpc_status.h"
#include "service/grpc/mailbox_channel.h"
#include "service/grpc/proto_convert.h"

namespace leapcache::server {
namespace {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, const char* field) {
  if (dtype == v1::DTYPE_FP32) return DType::kFp32;
  if (dtype == v1::DTYPE_BF16) return DType::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be DTYPE_FP32 or DTYPE_BF16 (got ", static_cast<int>(dtype), ")"));
}

// g and beta are fp32 arrays; their bytes are copied out (protobuf's strings carry no
// alignment guarantee for float access).
absl::Status Floats(const std::string& bytes, const char* name, std::vector<float>* out) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " holds ", bytes.size(), " bytes, not a whole number of fp32 values"));
  }
  out->resize(bytes.size() / sizeof(float));
  // An empty vector's data() may be null, which memcpy may not be given even for 0 bytes.
  if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Slot and layer fields are uint32 on the wire; anything past INT32_MAX is out of range anyway.
int ToInt(uint32_t v) { return static_cast<int>(std::min<uint32_t>(v, INT32_MAX)); }

}  // namespace

absl::StatusOr<std::shared_ptr<decode::DecodeSession>> DecodeService::FindAuthorized(
    const grpc::ServerContext& context, uint64_t session_id) const {
  // Authenticate before saying anything about the session.
  absl::StatusOr<std::string> caller = auth_->Caller(context);
  if (!caller.ok()) return caller.status();
  absl::StatusOr<std::shared_ptr<decode::DecodeSession>> s = sessions_->Find(session_id);
  if (!s.ok()) return s.status();
  if (!auth_->Namespace(*caller, (*s)->info().ns).ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("decode session ", session_id, " belongs to another tenant"));
  }
  return s;
}

grpc::Status DecodeService::OpenSession(grpc::ServerContext* context,
                                        const v1::OpenDecodeSessionRequest* request,
                                        v1::OpenDecodeSessionResponse* response) {
  if (absl::StatusOr<std::string> caller = auth_->CallerFor(*context, request->namespace_id());
      !caller.ok()) {
    return ToGrpcStatus(caller.status());
  }
  if (absl::Status st =
          store_->CheckNamespaceTag(request->namespace_id(), request->namespace_tag());
      !st.ok()) {
    return ToGrpcStatus(st);
  }
  decode::OpenRequest open;
  open.ns = request->namespace_id();
  if (request->has_heads()) {
    open.heads = {static_cast<int>(request->heads().begin()),
                  static_cast<int>(request->heads().end())};
    if (open.heads.begin == 0 && open.heads.end == 0) {
      return ToGrpcStatus(absl::InvalidArgumentError("heads is present but empty"));
    }
  }
  open.slots = ToInt(request->slots());
  open.l2norm_qk = request->l2norm_qk();
  open.scale = request->scale();  // 0: the table's default, dk^-1/2
  absl::StatusOr<decode::SessionInfo> info = sessions_->Open(open);
  if (!info.ok()) return ToGrpcStatus(info.status());
  response->set_session_id(info->id);
  response->set_layers(static_cast<uint32_t>(info->shape.layers));
  HeadsToProto(info->heads, response->mutable_heads());
  response->set_dk(static_cast<uint32_t>(info->shape.spec.dk));
  response->set_dv(static_cast<uint32_t>(info->shape.spec.dv));
  response->set_kind(KindToProto(info->shape.spec.kind));
  response->set_backend(info->backend);
  response->set_state_bytes(info->state_bytes);
  return grpc::Status::OK;
}

grpc::Status DecodeService::CloseSession(grpc::ServerContext* context,
                                         const v1::CloseDecodeSessionRequest* request,
                                         v1::CloseDecodeSessionResponse*) {
  absl::StatusOr<std::shared_ptr<decode::DecodeSession>> s =
      FindAuthorized(*context, request->session_id());
  if (!s.ok()) return ToGrpcStatus(s.status());
  return ToGrpcStatus(sessions_->Close(request->session_id()));
}

grpc::Status DecodeService::ResetSlot(grpc::ServerContext* context,
                                      const v1::ResetSlotRequest* request, v1::ResetSlotResponse*) {
  absl::StatusOr<std::shared_ptr<decode::DecodeSession>> s =
      FindAuthorized(*context, request->session_id());
  if (!s.ok()) return ToGrpcStatus(s.status());
  return ToGrpcStatus((*s)->Reset(ToInt(request->slot())));
}

grpc::Status DecodeService::LoadSlot(grpc::ServerContext* context,
                                     const v1::LoadSlotRequest* request,
                                     v1::LoadSlotResponse* response) {
  absl::StatusOr<std::shared_ptr<decode::DecodeSession>> s =
      FindAuthorized(*context, request->session_id());
  if (!s.ok()) return ToGrpcStatus(s.status());
  absl::StatusOr<core::BlockHash> hash = HashFromProto(request->hash(), "hash");
  if (!hash.ok()) return ToGrpcStatus(hash.status());
  absl::StatusOr<core::Position> position = (*s)->Load(ToInt(request->slot()), *hash);
  if (!position.ok()) return ToGrpcStatus(position.status());
  PositionToProto(*position, response->mutable_position());
  return grpc::Status::OK;
}

grpc::Status DecodeService::CommitSlot(grpc::ServerContext* context,
                                       const v1::CommitSlotRequest* request,
                                       v1::CommitSlotResponse*) {
  absl::StatusOr<std::shared_ptr<decode::DecodeSession>> s =
      FindAuthorized(*context, request->session_id());
  if (!s.ok()) return ToGrpcStatus(s.status());
  absl::StatusOr<core::BlockHash> hash = HashFromProto(request->hash(), "hash");
  if (!hash.ok()) return ToGrpcStatus(hash.status());
  absl::StatusOr<core::Position> position = PositionFromProto(request->position());
  if (!position.ok()) return ToGrpcStatus(position.status());
  return ToGrpcStatus((*s)->Commit(ToInt(request->slot()), *hash, *position));
}

absl::Status DecodeService::StepOverDataPlane(const grpc::ServerContext& context,
                                              const v1::StepRequest& request,
                                              decode::DecodeSession& session, DType in_dtype,
                                              DType out_dtype, StepStream* stream) {
  if (data_plane_ == nullptr) {
    return absl::FailedPreconditionError("this server has no data plane for decode steps");
  }
  if (!request.q().empty() || !request.k().empty() || !request.v().empty() ||
      !request.g().empty() || !request.beta().empty()) {
    return absl::InvalidArgumentError(
        "q, k, v, g and beta must be empty when buffers is present (they travel over the data "
        "plane)");
  }
  const compute::DecodeShape& shape = session.info().shape;
  const std::span<const int32_t> slot = stream->slot;
  const size_t bh = slot.size() * static_cast<size_t>(shape.heads);
  const size_t qk_bytes = bh * shape.spec.dk * DTypeBytes(in_dtype);
  const size_t v_bytes = bh * shape.spec.dv * DTypeBytes(in_dtype);
  const size_t g_count = bh * static_cast<size_t>(shape.gate_size());
  stream->in.resize(2 * qk_bytes + v_bytes + (g_count + bh) * sizeof(float));
  stream->out.resize(bh * shape.spec.dv * DTypeBytes(out_dtype));
  const v1::StepBuffers& b = request.buffers();
  LC_ASSIGN_OR_RETURN(const std::string caller, auth_->Caller(context));
  return data_plane_->Step(
      DataPlaneCallOf(context, caller), b.data_plane_session_id(), b.buffer_id(), b.input_offset(),
      stream->in, b.output_offset(), stream->out, session.takes_device_memory(),
      [&](const DataPlane::StepVectors& x) -> absl::Status {
        const uint8_t* p = x.in.data();
        const uint8_t* g = p + 2 * qk_bytes + v_bytes;
        const uint8_t* beta = g + g_count * sizeof(float);
        std::span<const float> g_span, beta_span;
        if (x.memory == compute::Memory::kDevice) {
          // The backend reads them in place where the kernels' alignment allows, else copies
          // them on the device.
          g_span = {reinterpret_cast<const float*>(g), g_count};
          beta_span = {reinterpret_cast<const float*>(beta), bh};
        } else {
          // Copied out: the packed buffer gives them no float alignment.
          stream->g.resize(g_count);
          stream->beta.resize(bh);
          std::memcpy(stream->g.data(), g, g_count * sizeof(float));
          std::memcpy(stream->beta.data(), beta, bh * sizeof(float));
          g_span = stream->g;
          beta_span = stream->beta;
        }
        const compute::LayerStep in{
            ToInt(request.layer()),      slot,   in_dtype,  {p, qk_bytes}, {p + qk_bytes, qk_bytes},
            {p + 2 * qk_bytes, v_bytes}, g_span, beta_span, x.memory};
        return session.Step(in, {out_dtype, x.out, x.memory});
      });
}

absl::Status DecodeService::StepOnce(const grpc::ServerContext& context,
                                     const v1::StepRequest& request, StepStream* stream,
                                     v1::StepResponse* response) {
  if (stream->session == nullptr || stream->session->info().id != request.session_id()) {
    stream->session = nullptr;
    LC_ASSIGN_OR_RETURN(stream->session, FindAuthorized(context, request.session_id()));
  }
  decode::DecodeSession& session = *stream->session;
  LC_ASSIGN_OR_RETURN(const DType in_dtype, DTypeFromProto(request.dtype(), "dtype"));
  absl::StatusOr<DType> out_dtype = request.out_dtype() == v1::DTYPE_UNSPECIFIED
                                        ? DType::kFp32
                                        : DTypeFromProto(request.out_dtype(), "out_dtype");
  LC_RETURN_IF_ERROR(out_dtype.status());
  const compute::DecodeShape& shape = session.info().shape;
  // Every size below is a multiple of the batch: bound it before anything is sized by it (a
  // message of a few MiB of slot entries would otherwise ask for terabytes of output). Each
  // slot appears at most once in a batch (the session checks), so B <= slots.
  if (request.slot().empty() || request.slot_size() > shape.slots) {
    return absl::InvalidArgumentError(absl::StrCat("slot holds ", request.slot_size(),
                                                   " entries; a batch has 1..", shape.slots));
  }
  stream->slot.assign(request.slot().begin(), request.slot().end());
  response->clear_o();
  if (request.has_buffers()) {
    return StepOverDataPlane(context, request, session, in_dtype, *out_dtype, stream);
  }
  LC_RETURN_IF_ERROR(Floats(request.g(), "g", &stream->g));
  LC_RETURN_IF_ERROR(Floats(request.beta(), "beta", &stream->beta));
  std::string* o = response->mutable_o();
  o->resize(stream->slot.size() * static_cast<size_t>(shape.heads) * shape.spec.dv *
            DTypeBytes(*out_dtype));
  const compute::LayerStep in{ToInt(request.layer()), stream->slot,     in_dtype,
                             Bytes(request.q()),     Bytes(request.k()), Bytes(request.v()),
                             stream->g,              stream->beta};
  const compute::LayerOutput out{*out_dtype, {reinterpret_cast<uint8_t*>(o->data()), o->size()}};
  return session.Step(in, out);
}

grpc::Status DecodeService::Step(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream) {
  v1::StepRequest request;
  v1::StepResponse response;
  StepStream state;
  while (stream->Read(&request)) {
    if (absl::Status st = StepOnce(*context, request, &state, &response); !st.ok()) {
      return ToGrpcStatus(st);
    }
    if (!stream->Write(response)) break;  // the engine went away
  }
  return grpc::Status::OK;
}

grpc::Status DecodeService::OpenStepChannel(grpc::ServerContext* context,
                                            const v1::OpenStepChannelRequest* request,
                                            grpc::ServerWriter<v1::StepChannelEvent>* writer) {
  const uint64_t session_id = request->session_id();
  StepStream state;
  if (absl::StatusOr<std::shared_ptr<decode::DecodeSession>> s =
          FindAuthorized(*context, session_id);
      !s.ok()) {
    return ToGrpcStatus(s.status());
  } else {
    state.session = *std::move(s);
  }
  if (!channels_.enabled) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "this server serves no step channels (decode_step_channels is off): use the Step stream"));
  }
  absl::StatusOr<OpenChannels::Claim> claim = open_channels_.Open(session_id, "step channel");
  if (!claim.ok()) return ToGrpcStatus(claim.status());
  absl::StatusOr<std::unique_ptr<base::ShmMailbox>> box =
      base::ShmMailbox::Create(channels_.mailbox.capacity);
  if (!box.ok()) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat("cannot create the step channel's mailbox: ", box.status().message())));
  }
  base::ShmMailbox& mailbox = **box;
  v1::StepChannelEvent event;
  event.set_name(mailbox.name());
  event.set_capacity(mailbox.capacity());
  if (!writer->Write(event)) return grpc::Status::OK;  // the engine went away

  v1::StepRequest step;
  v1::StepResponse unused;  // a data-plane step's o is in the engine's buffer
  v1::StepChannelReply reply;
  const auto serve = [&](std::span<const uint8_t> bytes, std::string* reply_bytes) {
    absl::Status st;
    if (!step.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      st = absl::InvalidArgumentError("a step channel request does not parse as a StepRequest");
    } else if (step.session_id() != session_id) {
      st = absl::InvalidArgumentError(absl::StrCat("the request names decode session ",
                                                   step.session_id(), "; this channel serves ",
                                                   session_id));
    } else if (!step.has_buffers()) {
      st = absl::InvalidArgumentError(
          "a step channel carries data-plane steps only (StepRequest.buffers)");
    } else {
      st = StepOnce(*context, step, &state, &unused);
    }
    reply.set_code(static_cast<int32_t>(st.code()));
    reply.set_message(std::string(st.message().substr(0, 4096)));  // fits any capacity
    reply.SerializeToString(reply_bytes);
  };
  // Between steps: the session is still there, and the caller's token still admits it to it (a
  // reload may have revoked it).
  const auto session_alive = [&]() -> absl::Status {
    if (!sessions_->Find(session_id).ok()) {
      return absl::NotFoundError(absl::StrCat("decode session ", session_id, " ended"));
    }
    return FindAuthorized(*context, session_id).status();
  };
  return ToGrpcStatus(ServeMailbox(mailbox, *context, channels_.mailbox, session_alive, serve));
}

}  // namespace leapcache::server
