// device_memory.h and device_crc32c.h in a build without the CUDA toolkit: no device is ever
// available, so no caller reaches a copy; each entry point says why it cannot run.
#include "absl/status/status.h"
#include "transport/device/device_crc32c.h"
#include "transport/device/device_memory.h"

namespace leapcache::transport {
namespace {

absl::Status NoCuda() { return absl::FailedPreconditionError("built without CUDA"); }

}  // namespace

absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> PinnedHostBuffer::Allocate(size_t) {
  return NoCuda();
}
PinnedHostBuffer::~PinnedHostBuffer() = default;
absl::Status CopyDeviceToHost(void*, const void*, size_t) { return NoCuda(); }
absl::Status CopyHostToDevice(void*, const void*, size_t) { return NoCuda(); }
absl::Status CheckDevicePointer(const void*) { return NoCuda(); }
absl::StatusOr<int> DeviceOfPointer(const void*) { return NoCuda(); }
bool CudaDeviceAvailable() { return false; }
absl::StatusOr<std::string> CudaDeviceUuid(int) { return NoCuda(); }
absl::StatusOr<uint32_t> DeviceCrc32c(const void*, size_t) { return NoCuda(); }

}  // namespace leapcache::transport
