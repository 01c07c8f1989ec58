#include "service/compute/cpu/cpu_compute.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "service/compute/cpu/cpu_live_states.h"

namespace leapcache::compute {

absl::Status RequireHost(Memory memory, const char* what) {
  if (memory == Memory::kHost) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the CPU compute backend reads and writes host memory only (", what, " is in ",
                   MemoryName(memory), " memory)"));
}

absl::Status CpuBackend::Encode(const BlobSpec& spec, const DenseFormat& format, ConstBytes states,
                                absl::FunctionRef<std::string(size_t)> describe,
                                std::vector<std::vector<uint8_t>>* blobs) {
  LC_RETURN_IF_ERROR(RequireHost(states.memory, "the states to encode"));
  const size_t state_bytes = DenseStateBytes(format, spec.dk, spec.dv);
  std::vector<float> scratch;
  for (size_t i = 0; i * state_bytes < states.data.size(); ++i) {
    absl::StatusOr<std::vector<uint8_t>> blob = EncodeDenseState(
        spec, format, states.data.subspan(i * state_bytes, state_bytes), &scratch);
    if (!blob.ok()) {
      return absl::Status(blob.status().code(), absl::StrCat("dense state of ", describe(i), ": ",
                                                             blob.status().message()));
    }
    blobs->push_back(*std::move(blob));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Decode(const BlobSpec& spec, const DenseFormat& format, size_t n,
                                absl::FunctionRef<std::span<const uint8_t>(size_t)> blob,
                                absl::FunctionRef<std::string(size_t)> describe,
                                MutableBytes out) {
  LC_RETURN_IF_ERROR(RequireHost(out.memory, "the decoded states' destination"));
  const size_t state_bytes = DenseStateBytes(format, spec.dk, spec.dv);
  thread_local std::vector<float> scratch;
  for (size_t i = 0; i < n; ++i) {
    if (absl::Status st = DecodeDenseState(
            blob(i), format, out.data.subspan(i * state_bytes, state_bytes), &scratch);
        !st.ok()) {
      return absl::Status(st.code(), absl::StrCat(describe(i), ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LiveStates>> CpuBackend::OpenLiveStates(const DecodeShape& shape) {
  LC_ASSIGN_OR_RETURN(std::unique_ptr<CpuLiveStates> states, CpuLiveStates::Create(shape));
  return std::unique_ptr<LiveStates>(std::move(states));
}

Compute& CpuCompute() {
  static CpuBackend* const backend = new CpuBackend();
  return *backend;
}

}  // namespace leapcache::compute
