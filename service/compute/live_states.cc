#include "service/compute/live_states.h"

#include <cstring>

#include "gpu/half.h"
#include "gpu/reference/window.h"

namespace leapcache::compute {

float WireValue(WireDType dtype, const uint8_t* data, size_t i) {
  if (dtype == WireDType::kBf16) {
    uint16_t h;
    std::memcpy(&h, data + 2 * i, 2);
    return Bf16ToFloat(h);
  }
  float f;
  std::memcpy(&f, data + 4 * i, 4);
  return f;
}

size_t LiveStateBytes(const DecodeShape& shape) {
  const size_t states = static_cast<size_t>(shape.slots) * shape.layers * shape.heads;
  if (shape.spec.codec != Codec::kLeap) {
    return states * static_cast<size_t>(shape.spec.dk) * shape.spec.dv * sizeof(float);
  }
  const size_t records =
      reference::WindowState::RecordBytes(shape.spec.kind, shape.spec.dk, shape.spec.dv) *
      static_cast<size_t>(shape.spec.p);
  return states * (ComputeLayout(shape.spec).blob_bytes() + records +
                   reference::WindowState::WindowHeaderBytes(shape.spec.kind, shape.spec.dk));
}

}  // namespace leapcache::compute
