// Checks of the UCX blobs a peer hands the service (an engine's worker address, a buffer's
// remote key) before UCX sees them. UCX's parsers trust their input: ucp_address_unpack reads
// length fields without a bound and aborts the process on an unknown version byte;
// ucp_ep_rkey_unpack takes no length at all. A blob reaches them only after these checks walked
// it field by field (UCX 1.13's packed formats, non-unified mode, which UcxContext pins) and found
// every field inside it and nothing after its end.
//
// No UCX headers here: the checks build, run and are fuzzed without UCX.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace leapcache::transport {

// Limits of a worker address, as UCX 1.13 sizes its tables: 128 transport resources (addresses),
// md indices below 64 (a 64-bit md map), system devices below 64 or "unknown" (255).
inline constexpr size_t kUcxMaxAddresses = 128;
inline constexpr unsigned kUcxMaxMdIndex = 63;
inline constexpr size_t kUcxMaxWorkerAddressBytes = 64 * 1024;
inline constexpr size_t kUcxMaxRemoteKeyBytes = 16 * 1024;

// An address from ucp_worker_get_address (v1 or v2 format), exactly: no trailing bytes and no
// endpoint addresses (a worker address never carries them; only wire-up messages do).
absl::Status CheckUcxWorkerAddress(std::string_view address);

// A key from ucp_rkey_pack: the md map, the memory type, one length-prefixed key per md, then
// optionally a system device and its distances.
absl::Status CheckUcxRemoteKey(std::string_view key);

// A copy of a checked blob followed by zero bytes. A transport's own parser reads a fixed-size
// struct from its slice of the blob without knowing the slice's length; the padding keeps a read
// past a short slice inside memory the service owns and has zeroed.
inline constexpr size_t kUcxBlobPadding = 512;
std::vector<uint8_t> PaddedCopy(std::string_view blob);

}  // namespace leapcache::transport
