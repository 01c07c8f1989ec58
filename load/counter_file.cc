#include "load/counter_file.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace leapcache::load {

void CounterFile::Add(uint64_t verified, uint64_t mismatched, uint64_t missing) {
  absl::MutexLock lock(&mu_);
  verified_ += verified;
  mismatched_ += mismatched;
  missing_ += missing;
  if (absl::Now() - last_write_ >= absl::Milliseconds(200)) WriteLocked();
}

bool CounterFile::Flush() {
  absl::MutexLock lock(&mu_);
  return WriteLocked();
}

bool CounterFile::WriteLocked() {
  last_write_ = absl::Now();
  // A reader sees the old file or the new one, never a torn line.
  const std::string tmp = path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  const std::string line = absl::StrCat("verified=", verified_, " mismatched=", mismatched_,
                                        " missing=", missing_, "\n");
  const bool written = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  if (std::fclose(f) != 0 || !written) return false;
  return std::rename(tmp.c_str(), path_.c_str()) == 0;
}

}  // namespace leapcache::load
