#include "service/compute/live_states.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpu/reference/window.h"

namespace leapcache::compute {

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
