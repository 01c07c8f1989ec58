#include "service/facade/put_pipeline.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gpu/format/crc32c.h"

namespace leapcache::server {

PutPipeline::PutPipeline(core::CheckpointStore* store, const core::Clock& clock,
                         compute::Compute* compute)
    : store_(store),
      clock_(clock),
      compute_(compute == nullptr ? &compute::CpuCompute() : compute) {}

absl::StatusOr<PutTicket> PutPipeline::Reserve(const core::PutRequest& request,
                                               const std::optional<compute::DenseFormat>& dense) {
  std::shared_ptr<DensePut> put;
  if (dense.has_value()) {
    LC_ASSIGN_OR_RETURN(const core::NamespaceInfo ns, store_->GetNamespace(request.ns));
    put = std::make_shared<DensePut>();
    put->format = *dense;
    put->spec = ns.spec.format;
    put->state_elements = static_cast<size_t>(ns.spec.model.dk) * ns.spec.model.dv;
    put->state_bytes = compute::DenseStateBytes(*dense, ns.spec.model.dk, ns.spec.model.dv);
    put->side_bytes = ns.side_bytes;
    put->dense_unit_bytes = put->state_bytes + ns.side_bytes;
    put->stored_unit_bytes = ns.unit_bytes;
    put->heads = request.heads.size();
    put->head_begin = request.heads.begin;
  }
  LC_ASSIGN_OR_RETURN(const core::Reservation r, store_->Reserve(request));
  const absl::Time now = clock_.Now();
  PutTicket ticket;
  ticket.id = r.id;
  ticket.blob_bytes = r.unit_bytes - r.side_bytes;
  ticket.side_bytes = r.side_bytes;
  ticket.unit_bytes = r.unit_bytes;
  ticket.expected_bytes = r.total_bytes();
  ticket.ttl = r.deadline - now;
  absl::MutexLock lock(&mu_);
  ForgetExpiredLocked(now);
  if (put != nullptr) {
    put->id = r.id;
    put->deadline = r.deadline;
    put->expected_bytes = static_cast<uint64_t>(r.num_units()) * put->dense_unit_bytes;
    ticket.state_bytes = put->state_bytes;
    ticket.unit_bytes = put->dense_unit_bytes;
    ticket.expected_bytes = put->expected_bytes;
    dense_.emplace(r.id, std::move(put));
  }
  return ticket;
}

void PutPipeline::ForgetExpiredLocked(absl::Time now) {
  // The core rejects and reclaims these puts itself; only the bookkeeping is left here.
  absl::erase_if(dense_, [now](const auto& kv) {
    return now >= kv.second->deadline && !kv.second->committing;
  });
}

absl::Status PutPipeline::Upload(core::PutId id, uint64_t offset, std::span<const uint8_t> data) {
  std::shared_ptr<DensePut> put;
  {
    absl::MutexLock lock(&mu_);
    auto it = dense_.find(id);
    if (it != dense_.end()) put = it->second;
  }
  if (put == nullptr) return store_->Upload(id, offset, data);
  return UploadDense(*put, offset, data);
}

absl::Status PutPipeline::WriteInPlace(
    core::PutId id,
    absl::FunctionRef<absl::Status(const core::CheckpointStore::UnitAddresses&)> write) {
  {
    absl::MutexLock lock(&mu_);
    if (dense_.contains(id)) {
      return absl::FailedPreconditionError(
          absl::StrCat("put ", id, " uploads dense states, which are encoded on upload"));
    }
  }
  return store_->WriteInPlace(id, write);
}

absl::Status PutPipeline::UploadDense(DensePut& put, uint64_t offset,
                                      std::span<const uint8_t> data) {
  {
    absl::MutexLock lock(&mu_);
    if (put.committing) {
      return absl::FailedPreconditionError(absl::StrCat("put ", put.id, " is being committed"));
    }
    if (put.uploading) {
      return absl::FailedPreconditionError(
          absl::StrCat("another dense upload of put ", put.id, " is in progress"));
    }
    if (data.empty() || data.size() % put.dense_unit_bytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a dense chunk must hold whole units of ", put.dense_unit_bytes, " bytes (a ",
          put.state_bytes, "-byte state and ", put.side_bytes, " bytes of side state; got ",
          data.size(), " bytes)"));
    }
    if (offset != 0 && offset != put.received) {
      return absl::InvalidArgumentError(absl::StrCat("dense chunk at offset ", offset, ": put ",
                                                     put.id, " continues at ", put.received,
                                                     " (or restarts at 0)"));
    }
    if (offset > put.expected_bytes || data.size() > put.expected_bytes - offset) {
      return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + data.size(),
                                                ") leave put ", put.id, " of ", put.expected_bytes,
                                                " dense bytes"));
    }
    put.uploading = true;
  }

  const size_t first_state = offset / put.dense_unit_bytes;
  const size_t states = data.size() / put.dense_unit_bytes;
  auto describe = [&put, first_state](size_t i) {
    const size_t s = first_state + i;
    return absl::StrCat("layer ", s / put.heads, " head ",
                        put.head_begin + static_cast<int>(s % put.heads));
  };
  // The encoder takes the states back to back: gathered out of the units when they carry side
  // states.
  std::span<const uint8_t> dense = data;
  std::vector<uint8_t> gathered;
  if (put.side_bytes > 0) {
    gathered.resize(states * put.state_bytes);
    for (size_t i = 0; i < states; ++i) {
      std::memcpy(gathered.data() + i * put.state_bytes, data.data() + i * put.dense_unit_bytes,
                  put.state_bytes);
    }
    dense = gathered;
  }
  absl::Status st = compute::CheckDenseStates(put.format, put.state_elements, dense, describe);
  uint32_t blob_crc = offset == 0 ? 0 : put.blob_crc;  // only this thread writes it now
  std::vector<std::vector<uint8_t>> blobs;
  blobs.reserve(states);
  if (st.ok()) {
    st = compute_->Encode(put.spec, put.format, {dense, compute::Memory::kHost}, describe, &blobs);
  }
  if (st.ok() && blobs.size() != states) {
    st = absl::InternalError(
        absl::StrCat("the encoder made ", blobs.size(), " blobs of ", states, " states"));
  }
  for (size_t i = 0; st.ok() && i < blobs.size(); ++i) {
    // A unit as stored: the blob, then the side state as sent.
    const uint8_t* side = data.data() + i * put.dense_unit_bytes + put.state_bytes;
    blobs[i].insert(blobs[i].end(), side, side + put.side_bytes);
    st = store_->Upload(put.id, (first_state + i) * put.stored_unit_bytes, blobs[i]);
    blob_crc = Crc32cExtend(blob_crc, blobs[i].data(), blobs[i].size());
  }

  absl::MutexLock lock(&mu_);
  put.uploading = false;
  if (st.ok()) {
    put.dense_crc = Crc32cExtend(offset == 0 ? 0 : put.dense_crc, data.data(), data.size());
    put.blob_crc = blob_crc;
    put.received = offset + data.size();
  }
  return st;
}

absl::Status PutPipeline::Commit(core::PutId id, uint32_t crc32c) {
  std::shared_ptr<DensePut> put;
  uint32_t blob_crc = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = dense_.find(id);
    if (it != dense_.end()) {
      put = it->second;
      if (put->uploading || put->committing) {
        return absl::FailedPreconditionError(absl::StrCat(
            "put ", id, put->uploading ? " has an upload in progress" : " is being committed"));
      }
      if (put->received != put->expected_bytes) {
        return absl::FailedPreconditionError(absl::StrCat("put ", id, " has received ",
                                                          put->received, " of ",
                                                          put->expected_bytes, " dense bytes"));
      }
      if (crc32c != put->dense_crc) {
        return absl::DataLossError(
            absl::StrCat("checksum mismatch for put ", id, ": the client's CRC-32C is ", crc32c,
                         ", the bytes received have ", put->dense_crc, " (re-upload from 0)"));
      }
      put->committing = true;
      blob_crc = put->blob_crc;
    }
  }
  if (put == nullptr) return store_->Commit(id, crc32c);

  absl::Status st = store_->Commit(id, blob_crc);
  absl::MutexLock lock(&mu_);
  put->committing = false;
  // Committed, or gone from the core (expired, reclaimed): nothing more can happen to it here.
  if (st.ok() || absl::IsNotFound(st) || absl::IsDeadlineExceeded(st)) dense_.erase(id);
  return st;
}

absl::Status PutPipeline::Abort(core::PutId id) {
  absl::Status st = store_->Abort(id);
  if (st.ok() || absl::IsNotFound(st)) {
    absl::MutexLock lock(&mu_);
    dense_.erase(id);
  }
  return st;
}

size_t PutPipeline::dense_puts() const {
  absl::MutexLock lock(&mu_);
  return dense_.size();
}

}  // namespace leapcache::server
