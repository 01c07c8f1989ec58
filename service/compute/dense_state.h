// Dense states on the wire: fp32 or bf16 elements, [K,V] or [V,K] layout, and their conversion
// to and from stored v1 blobs through the CPU reference codec (gpu/reference/codec.h), the
// embedded backend of the server.
//
// One dense state is dk x dv little-endian elements in its layout; a checkpoint's dense bytes are
// its states in (layer, head) order. Every element put must be finite and within the codec's
// range (|x| <= 2^64); a state that is not gets INVALID_ARGUMENT (OUT_OF_RANGE past 2^64) naming
// it, and nothing of its chunk is stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "gpu/format/format.h"

namespace leapcache::compute {

// Element i of a little-endian array of `dtype`, widened exactly to a float.
float ElementValue(DType dtype, const uint8_t* data, size_t i);

// A dense state's element type (fp32 or bf16) and layout.
struct DenseFormat {
  DType dtype = DType::kFp32;
  Orientation layout = Orientation::kKV;
};

inline size_t DenseStateBytes(const DenseFormat& f, int dk, int dv) {
  return static_cast<size_t>(dk) * static_cast<size_t>(dv) * DTypeBytes(f.dtype);
}

// Checks every element of the whole states in `bytes` before any is encoded, so a chunk is
// stored all or nothing. `describe(i)` names state i of the chunk in messages ("layer 2 head 5").
// REQUIRES: bytes.size() is a multiple of the state size (dk * dv elements).
absl::Status CheckDenseStates(const DenseFormat& format, size_t state_elements,
                              std::span<const uint8_t> bytes,
                              absl::FunctionRef<std::string(size_t)> describe);

// Encodes one dense state into a sealed blob of `spec`. `scratch` is reused between calls.
// REQUIRES: state.size() == DenseStateBytes(format, spec.dk, spec.dv).
absl::StatusOr<std::vector<uint8_t>> EncodeDenseState(const BlobSpec& spec,
                                                      const DenseFormat& format,
                                                      std::span<const uint8_t> state,
                                                      std::vector<float>* scratch);

// Decodes one blob (validated: DATA_LOSS / INVALID_ARGUMENT if damaged) into `out`.
// REQUIRES: out.size() == DenseStateBytes(format, dk, dv) of the blob's spec.
absl::Status DecodeDenseState(std::span<const uint8_t> blob, const DenseFormat& format,
                              std::span<uint8_t> out, std::vector<float>* scratch);

}  // namespace leapcache::compute
