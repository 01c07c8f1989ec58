#include "service/compute/dense_state.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/format_status.h"
#include "gpu/format/half.h"
#include "gpu/reference/codec.h"

namespace leapcache::compute {
float ElementValue(DType dtype, const uint8_t* data, size_t i) {
  switch (dtype) {
    case DType::kFp32: {
      const uint32_t u = LoadU32(data + 4 * i);
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case DType::kBf16:
      return Bf16ToFloat(LoadU16(data + 2 * i));
    case DType::kFp16:
      return HalfToFloat(LoadU16(data + 2 * i));
  }
  return std::nanf("");  // no element type: nothing to read
}

absl::Status CheckDenseStates(const DenseFormat& format, size_t state_elements,
                              std::span<const uint8_t> bytes,
                              absl::FunctionRef<std::string(size_t)> describe) {
  const size_t n = bytes.size() / DTypeBytes(format.dtype);
  for (size_t i = 0; i < n; ++i) {
    const float x = ElementValue(format.dtype, bytes.data(), i);
    if (!std::isfinite(x)) {
      return absl::InvalidArgumentError(
          absl::StrCat("dense state of ", describe(i / state_elements), ": element ",
                       i % state_elements, " is ", x, ", not finite"));
    }
    if (std::fabs(x) > reference::kMaxStateMagnitude) {
      return absl::OutOfRangeError(absl::StrCat("dense state of ", describe(i / state_elements),
                                                ": element ", i % state_elements, " is ", x,
                                                ", beyond the codec's range of 2^64"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> EncodeDenseState(const BlobSpec& spec,
                                                      const DenseFormat& format,
                                                      std::span<const uint8_t> state,
                                                      std::vector<float>* scratch) {
  const size_t n = static_cast<size_t>(spec.dk) * spec.dv;
  scratch->resize(n);
  // Copied element by element: wire bytes carry no alignment guarantee and bf16 widens.
  for (size_t i = 0; i < n; ++i) (*scratch)[i] = ElementValue(format.dtype, state.data(), i);
  StatusOr<std::vector<uint8_t>> blob = reference::Encode(spec, scratch->data(), format.layout);
  if (!blob.ok()) return base::FromFormatStatus(blob.status());
  return std::move(blob).value();
}

absl::Status DecodeDenseState(std::span<const uint8_t> blob, const DenseFormat& format,
                              std::span<uint8_t> out, std::vector<float>* scratch) {
  const size_t n = out.size() / DTypeBytes(format.dtype);
  // Decode writes dk x dv elements as the header says; never more than `out` holds.
  if (blob.size() < kHeaderBytes || static_cast<size_t>(LoadU16(blob.data() + header::kDk)) *
                                            LoadU16(blob.data() + header::kDv) !=
                                        n) {
    return absl::DataLossError(absl::StrCat("stored blob of ", blob.size(),
                                            " bytes does not hold a state of ", n, " elements"));
  }
  scratch->resize(n);
  if (absl::Status st =
          base::FromFormatStatus(reference::Decode(blob, scratch->data(), format.layout));
      !st.ok()) {
    return st;
  }
  if (format.dtype == DType::kFp32) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &(*scratch)[i], 4);
      StoreU32(out.data() + 4 * i, u);
    }
  } else {
    for (size_t i = 0; i < n; ++i) StoreU16(out.data() + 2 * i, FloatToBf16((*scratch)[i]));
  }
  return absl::OkStatus();
}

}  // namespace leapcache::compute
