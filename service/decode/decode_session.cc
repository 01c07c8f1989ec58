#include "service/decode/decode_session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/lock.h"
#include "base/status_macros.h"
#include "gpu/format/crc32c.h"

namespace leapcache::decode {
namespace {

absl::Status CheckSize(const char* name, size_t got, size_t want) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " holds ", got, " values, expected ", want));
}

absl::Status CheckFinite(const char* name, std::span<const float> x) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(absl::StrCat(name, "[", i, "] is not finite"));
    }
  }
  return absl::OkStatus();
}

// Whether any value of `bytes` (fp32 or bf16 lanes of 8-byte words, `exponent` the exponent
// mask repeated per lane, `low` a 1 in each lane's lowest bit) has an all-ones exponent: an
// infinity or a NaN. This runs over every step's q, k and v (6 MB at B = 256, H = 32) and inputs
// are almost always finite, so it tests whole words without branches (a lane of
// (w & exponent) ^ exponent is zero exactly when its exponent is all ones; the classic
// zero-lane test finds any such lane) and leaves finding the index to the slow path.
bool AnyNonFinite(std::span<const uint8_t> bytes, uint64_t exponent, uint64_t low,
                  uint64_t high) {
  uint64_t found = 0;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    const uint64_t x = (w & exponent) ^ exponent;
    found |= (x - low) & ~x & high;
  }
  if (i < bytes.size()) {
    uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, bytes.size() - i);
    const uint64_t x = (w & exponent) ^ exponent;
    // Lanes past the end read as zero words, whose exponent is not all ones.
    found |= (x - low) & ~x & high;
  }
  return found != 0;
}

absl::Status CheckFinite(const char* name, DType dtype, std::span<const uint8_t> x) {
  const size_t n = x.size() / DTypeBytes(dtype);
  const std::span<const uint8_t> whole = x.first(n * DTypeBytes(dtype));
  const bool any =
      dtype == DType::kBf16
          ? AnyNonFinite(whole, 0x7F807F807F807F80ull, 0x0001000100010001ull, 0x8000800080008000ull)
          : AnyNonFinite(whole, 0x7F8000007F800000ull, 0x0000000100000001ull,
                         0x8000000080000000ull);
  if (!any) return absl::OkStatus();
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(compute::ElementValue(dtype, x.data(), i))) {
      return absl::InvalidArgumentError(absl::StrCat(name, "[", i, "] is not finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

DecodeSession::DecodeSession(const SessionInfo& info, std::unique_ptr<compute::LiveStates> backend,
                             core::CheckpointStore* store)
    : info_(info),
      store_(store),
      backend_(std::move(backend)),
      last_used_ns_(absl::ToUnixNanos(absl::Now())) {}

void DecodeSession::End() {
  std::unique_ptr<compute::LiveStates> ended;  // freed outside the lock
  base::WriterLock lock(&mu_);
  ended = std::move(backend_);
}

absl::Status DecodeSession::CheckOpen() const {
  if (backend_ == nullptr) {
    return absl::NotFoundError(absl::StrCat("decode session ", info_.id, " has ended"));
  }
  return absl::OkStatus();
}

absl::Status DecodeSession::CheckSlot(int slot) const {
  if (slot < 0 || slot >= info_.shape.slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot ", slot, " is outside [0, ", info_.shape.slots, ")"));
  }
  return absl::OkStatus();
}

absl::Status DecodeSession::CheckStep(const compute::LayerStep& in, const compute::LayerOutput& out) const {
  const compute::DecodeShape& s = info_.shape;
  if (in.layer < 0 || in.layer >= s.layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", in.layer, " is outside [0, ", s.layers, ")"));
  }
  const size_t batch = in.slot.size();
  if (batch == 0 || batch > static_cast<size_t>(s.slots)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch holds 1..", s.slots, " requests (the session's slots), got ", batch));
  }
  std::vector<bool> seen(static_cast<size_t>(s.slots), false);
  for (size_t b = 0; b < batch; ++b) {
    const int slot = in.slot[b];
    if (slot == -1) continue;
    if (slot < 0 || slot >= s.slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot[", b, "] = ", slot, " is neither -1 (padding) nor in [0, ", s.slots, ")"));
    }
    if (seen[static_cast<size_t>(slot)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", slot, " appears twice in the batch (slot[", b, "])"));
    }
    seen[static_cast<size_t>(slot)] = true;
  }
  const size_t bh = batch * static_cast<size_t>(s.heads);
  const size_t e = DTypeBytes(in.dtype);
  LC_RETURN_IF_ERROR(CheckSize("q", in.q.size() / e, bh * s.spec.dk));
  LC_RETURN_IF_ERROR(CheckSize("k", in.k.size() / e, bh * s.spec.dk));
  LC_RETURN_IF_ERROR(CheckSize("v", in.v.size() / e, bh * s.spec.dv));
  if (in.q.size() % e != 0 || in.k.size() % e != 0 || in.v.size() % e != 0) {
    return absl::InvalidArgumentError("q, k and v must hold whole elements of their dtype");
  }
  LC_RETURN_IF_ERROR(CheckSize("g", in.g.size(), bh * s.gate_size()));
  LC_RETURN_IF_ERROR(CheckSize("beta", in.beta.size(), bh));
  LC_RETURN_IF_ERROR(CheckSize("o", out.o.size(), bh * s.spec.dv * DTypeBytes(out.dtype)));
  // Every input is checked finite before a state moves: here for host vectors, by the backend
  // on its device for device vectors (Step).
  if (in.memory == compute::Memory::kDevice) return absl::OkStatus();
  LC_RETURN_IF_ERROR(CheckFinite("q", in.dtype, in.q));
  LC_RETURN_IF_ERROR(CheckFinite("k", in.dtype, in.k));
  LC_RETURN_IF_ERROR(CheckFinite("v", in.dtype, in.v));
  LC_RETURN_IF_ERROR(CheckFinite("g", in.g));
  LC_RETURN_IF_ERROR(CheckFinite("beta", in.beta));
  return absl::OkStatus();
}

bool DecodeSession::takes_device_memory() const {
  base::ReaderLock lock(&mu_);
  return backend_ != nullptr && backend_->takes_device_memory();
}

void DecodeSession::Touch() { last_used_ns_.store(absl::ToUnixNanos(absl::Now())); }

absl::Status DecodeSession::Step(const compute::LayerStep& in, const compute::LayerOutput& out) {
  if (in.known_finite) {
    return absl::InvalidArgumentError("a session's steps are always checked finite");
  }
  LC_RETURN_IF_ERROR(CheckStep(in, out));
  Touch();
  base::WriterLock lock(&mu_);
  LC_RETURN_IF_ERROR(CheckOpen());
  const bool device =
      in.memory == compute::Memory::kDevice || out.memory == compute::Memory::kDevice;
  if (device && !backend_->takes_device_memory()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this session's ", backend_->name(), " backend takes step vectors in host memory only"));
  }
  LC_RETURN_IF_ERROR(backend_->Step(in, out));
  ++steps_;
  request_steps_ += static_cast<uint64_t>(
      std::count_if(in.slot.begin(), in.slot.end(), [](int32_t s) { return s >= 0; }));
  return absl::OkStatus();
}

absl::Status DecodeSession::Reset(int slot) {
  LC_RETURN_IF_ERROR(CheckSlot(slot));
  Touch();
  base::WriterLock lock(&mu_);
  LC_RETURN_IF_ERROR(CheckOpen());
  return backend_->Reset(slot);
}

absl::StatusOr<core::Position> DecodeSession::Load(int slot, const core::BlockHash& hash) {
  LC_RETURN_IF_ERROR(CheckSlot(slot));
  LC_ASSIGN_OR_RETURN(core::ReadLease lease, store_->Get(info_.ns, hash, info_.heads));
  std::vector<std::vector<uint8_t>> copies;
  std::vector<std::span<const uint8_t>> blobs;
  blobs.reserve(lease.num_units());
  const bool in_place = lease.host_addressable();
  if (!in_place) copies.resize(lease.num_units());
  // The backend takes each unit's blob; a side state (the engine's conv state) stays with the
  // engine, which runs the convolutions itself.
  const size_t blob_bytes = lease.unit_bytes() - info_.side_bytes;
  for (int l = 0; l < lease.layers(); ++l) {
    for (int h = info_.heads.begin; h < info_.heads.end; ++h) {
      if (in_place) {
        blobs.push_back(lease.Unit(l, h).first(blob_bytes));
      } else {
        std::vector<uint8_t>& c = copies[blobs.size()];
        c.resize(lease.unit_bytes());
        LC_RETURN_IF_ERROR(lease.CopyUnit(l, h, c));
        blobs.push_back(std::span<const uint8_t>(c).first(blob_bytes));
      }
    }
  }
  Touch();
  base::WriterLock lock(&mu_);
  LC_RETURN_IF_ERROR(CheckOpen());
  LC_RETURN_IF_ERROR(backend_->Load(slot, blobs));
  return lease.position();
}

absl::Status DecodeSession::Commit(int slot, const core::BlockHash& hash,
                                   const core::Position& position) {
  LC_RETURN_IF_ERROR(CheckSlot(slot));
  std::vector<std::vector<uint8_t>> blobs;
  {
    Touch();
    base::WriterLock lock(&mu_);
    LC_RETURN_IF_ERROR(CheckOpen());
    LC_ASSIGN_OR_RETURN(blobs, backend_->Export(slot));
  }
  core::PutRequest put;
  put.ns = info_.ns;
  put.hash = hash;
  put.position = position;
  put.heads = info_.heads;
  if (info_.side_bytes > 0) {
    // The side state (conv state, extra bytes) lives in the engine: a checkpoint of this
    // namespace without it would resume wrongly, so the engine puts it with the side state.
    return absl::FailedPreconditionError(
        "the namespace's checkpoints carry a side state (conv state or extra bytes) that the "
        "decode service does not hold: put the checkpoint from the engine instead");
  }
  LC_ASSIGN_OR_RETURN(core::Reservation r, store_->Reserve(put));
  uint32_t crc = 0;
  size_t offset = 0;
  absl::Status st;
  for (const std::vector<uint8_t>& blob : blobs) {
    if (blob.size() != r.unit_bytes) {
      st = absl::InternalError(absl::StrCat("exported blob of ", blob.size(),
                                            " bytes, the store expects ", r.unit_bytes));
      break;
    }
    st = store_->Upload(r.id, offset, blob);
    if (!st.ok()) break;
    crc = Crc32cExtend(crc, blob.data(), blob.size());
    offset += blob.size();
  }
  if (st.ok()) st = store_->Commit(r.id, crc);
  if (!st.ok()) {
    (void)store_->Abort(r.id);  // NOT_FOUND if it was reclaimed already
    return st;
  }
  return absl::OkStatus();
}

absl::Time DecodeSession::last_used() const { return absl::FromUnixNanos(last_used_ns_.load()); }

uint64_t DecodeSession::steps() const { return steps_.load(); }

uint64_t DecodeSession::request_steps() const { return request_steps_.load(); }

}  // namespace leapcache::decode
