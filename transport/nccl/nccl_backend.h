// NCCL: a two-rank communicator per session between the service's GPU and the engine's (another
// GPU, on this host or not); two-sided, so the engine posts the matching receive or send of each
// transfer itself (nccl_link.h says how both sides stay in step). Device memory only. Built with
// LEAPCACHE_TRANSPORT_NCCL.
#pragma once

#include "transport/backend.h"

namespace leapcache::transport {

Backend NcclBackend();

}  // namespace leapcache::transport
