// PutPipeline: the wire side of the two-phase put, between the gRPC handlers and
// core::CheckpointStore's Reserve / Upload / Commit / Abort.
//
// Compact puts pass straight through: the client uploads units (v1 blobs and their side states)
// and commits with their CRC-32C, which the core checks. Dense puts (fp32/bf16 states, each with
// its side state) are encoded here as chunks arrive, with the namespace's codec (the CPU
// reference unless a compute backend is given), and uploaded to the core as units of the blob and the
// side state as sent; their chunks must arrive in order so that the server can check the
// client's CRC-32C of the dense bytes at commit and commit the units with their own CRC-32C.
//
// Contracts (the state_cache.proto error codes):
//  - A dense chunk holds whole units (state and side state) and starts where the put's last chunk ended, or at 0 to
//    start over; anything else is INVALID_ARGUMENT, past the end OUT_OF_RANGE. Every state of a
//    chunk is checked (finite, in range) before any is stored: a bad chunk stores nothing.
//  - One dense upload of a put at a time (FAILED_PRECONDITION otherwise).
//  - Commit of a dense put: FAILED_PRECONDITION until every byte arrived; DATA_LOSS if the
//    client's checksum differs from the bytes received (the put stays open to re-upload from 0).
//  - The bookkeeping of a dense put lives exactly as long as the core's put: removed on commit,
//    abort, or once past its deadline (the core reclaims the memory itself).
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/compute/compute.h"
#include "service/core/checkpoint_store.h"
#include "service/core/clock.h"

namespace leapcache::server {

// What a client needs to upload a reserved put.
struct PutTicket {
  core::PutId id = 0;
  uint64_t expected_bytes = 0;  // bytes to upload in total
  uint64_t blob_bytes = 0;
  uint64_t state_bytes = 0;  // 0 for compact puts
  uint64_t side_bytes = 0;   // of every unit; 0 without a side state
  // Bytes per (layer, head) on the wire: blob_bytes or state_bytes, plus side_bytes.
  uint64_t unit_bytes = 0;
  absl::Duration ttl;        // until the deadline, as of now
};

class PutPipeline {
 public:
  // `clock` must be the store's clock; `compute` encodes dense states (null: the CPU
  // reference). All must outlive the pipeline.
  PutPipeline(core::CheckpointStore* store, const core::Clock& clock,
              compute::Compute* compute = nullptr);
  PutPipeline(const PutPipeline&) = delete;
  PutPipeline& operator=(const PutPipeline&) = delete;

  // `dense`: the encoding of the states the client will upload; nullopt for v1 blobs.
  absl::StatusOr<PutTicket> Reserve(const core::PutRequest& request,
                                    const std::optional<compute::DenseFormat>& dense);
  absl::Status Upload(core::PutId id, uint64_t offset, std::span<const uint8_t> data);
  // A compact put's units where they lie (CheckpointStore::WriteInPlace), for a writer that
  // copies the blobs into them itself. FAILED_PRECONDITION for a dense put: its states become
  // blobs on Upload.
  absl::Status WriteInPlace(
      core::PutId id,
      absl::FunctionRef<absl::Status(const core::CheckpointStore::UnitAddresses&)> write);
  absl::Status Commit(core::PutId id, uint32_t crc32c);
  absl::Status Abort(core::PutId id);

  // Dense puts being tracked (for tests).
  size_t dense_puts() const;

 private:
  struct DensePut {
    core::PutId id = 0;
    compute::DenseFormat format;
    BlobSpec spec;
    size_t state_elements = 0;
    size_t state_bytes = 0;
    size_t side_bytes = 0;
    size_t dense_unit_bytes = 0;   // state_bytes + side_bytes: one unit as uploaded
    size_t stored_unit_bytes = 0;  // blob and side state: one unit as stored
    uint64_t expected_bytes = 0;
    int heads = 0;       // heads per layer in this put
    int head_begin = 0;  // first head of this put
    absl::Time deadline;
    // Guarded by PutPipeline::mu_.
    bool uploading = false;
    bool committing = false;
    uint64_t received = 0;   // dense bytes accepted, a multiple of dense_unit_bytes
    uint32_t dense_crc = 0;  // CRC-32C of those bytes
    uint32_t blob_crc = 0;   // CRC-32C of the units stored for them
  };

  absl::Status UploadDense(DensePut& put, uint64_t offset, std::span<const uint8_t> data);
  void ForgetExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  core::CheckpointStore* const store_;
  const core::Clock& clock_;
  compute::Compute* const compute_;  // dense states' encoder
  // A leaf: never held while calling the store or encoding, so it never nests with the core's
  // locks (checkpoint_store.h lists their order).
  mutable absl::Mutex mu_;
  absl::flat_hash_map<core::PutId, std::shared_ptr<DensePut>> dense_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::server
