// Scratch files for fuzz targets whose code under test reads a path, not a buffer: one file per
// name and fuzzing process (libFuzzer's -fork and -jobs run several at once), under $TMPDIR.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

namespace leapcache::fuzz {

inline std::string ScratchPath(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/leapcache-fuzz-" +
         std::to_string(getpid()) + "-" + name;
}

// Replaces the file's contents with `data`; false if it cannot be written.
inline bool WriteScratch(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return out.good();
}

}  // namespace leapcache::fuzz
