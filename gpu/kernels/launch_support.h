// Host-side helpers the launchers share: argument validation and device facts.
#pragma once

#include "gpu/kernels/kernels.h"

namespace leapcache::kernels {

Status ValidateStepParams(const StepParams& p, int dk);
Status ValidatePoolLayout(const PoolLayout& l, const void* pool);

// Multiprocessors of the current device (read once).
int SmCount();

}  // namespace leapcache::kernels
