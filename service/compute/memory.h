// Where the bytes a compute backend reads or writes are: host memory (pageable or pinned), or
// device memory of the backend's GPU (its own allocations, or an engine's buffer mapped into the
// service's context over CUDA IPC). A span carries its memory so a backend can read device
// states in place instead of staging them through the host.
#pragma once

#include <cstdint>
#include <span>

namespace leapcache::compute {

enum class Memory : uint8_t { kHost, kDevice };
const char* MemoryName(Memory memory);

struct ConstBytes {
  std::span<const uint8_t> data;
  Memory memory = Memory::kHost;
};

struct MutableBytes {
  std::span<uint8_t> data;
  Memory memory = Memory::kHost;
};

}  // namespace leapcache::compute
