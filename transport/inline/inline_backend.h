// Inline: the portable fallback, always built. Checkpoint bytes travel inside the StateCache
// RPCs themselves (Get's stream, the put RPCs), so there is no connection and no descriptor;
// the engine's data plane copies between those messages and its buffers.
#pragma once

#include "transport/backend.h"

namespace leapcache::transport {

Backend InlineBackend();

}  // namespace leapcache::transport
