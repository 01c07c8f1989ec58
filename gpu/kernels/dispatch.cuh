// One place that turns the run-time (kind, input dtype, output dtype) of a decode step into the
// compile-time parameters of a kernel template.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "gpu/kernels/kernels.h"

namespace leapcache::kernels {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls launch(std::bool_constant<kda>, TypeTag<TIn>, TypeTag<TOut>) for the given values.
template <typename F>
void DispatchStep(bool kda, DType in, DType out, F&& launch) {
  auto by_out = [&](auto kda_c, auto in_t) {
    if (out == DType::kBf16) {
      launch(kda_c, in_t, TypeTag<__nv_bfloat16>{});
    } else {
      launch(kda_c, in_t, TypeTag<float>{});
    }
  };
  auto by_in = [&](auto kda_c) {
    if (in == DType::kBf16) {
      by_out(kda_c, TypeTag<__nv_bfloat16>{});
    } else {
      by_out(kda_c, TypeTag<float>{});
    }
  };
  if (kda) {
    by_in(std::true_type{});
  } else {
    by_in(std::false_type{});
  }
}

}  // namespace leapcache::kernels
