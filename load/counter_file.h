// CounterFile: the gets a load run has checked so far (verified byte for byte, mismatched,
// missing), rewritten whole (write, then rename) at most every 200 ms while they grow and once
// more on Flush, so that a client killed mid-run still leaves what it had verified: the soak
// (scripts/soak.sh) SIGKILLs clients and counts their gets from here. One line:
//   verified=N mismatched=N missing=N
// Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace leapcache::load {

class CounterFile {
 public:
  explicit CounterFile(std::string path) : path_(std::move(path)) {}
  CounterFile(const CounterFile&) = delete;
  CounterFile& operator=(const CounterFile&) = delete;

  // Adds to the totals; rewrites the file if the last write is 200 ms old.
  void Add(uint64_t verified, uint64_t mismatched, uint64_t missing);
  // Rewrites the file now. False if it cannot be written (the run goes on).
  bool Flush();

 private:
  bool WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  uint64_t verified_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t mismatched_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t missing_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_write_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace leapcache::load
