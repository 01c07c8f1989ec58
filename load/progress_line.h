// The live progress line of a run, redrawn in place ("\r") at most ten times a second, and only
// when stdout is a terminal: logs and CI output get the final summary lines alone.
#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace leapcache::load {

class ProgressLine {
 public:
  // enabled: draw at all (normally isatty(STDOUT_FILENO)).
  explicit ProgressLine(bool enabled) : enabled_(enabled) {}

  void Start(const std::string& label, uint64_t total);
  void Update(uint64_t done, uint64_t lookups, uint64_t hits, uint64_t puts, uint64_t gets);
  // Ends the line (a newline after the last draw).
  void Finish();
  bool enabled() const { return enabled_; }

 private:
  const bool enabled_;
  absl::Mutex mu_;
  std::string label_ ABSL_GUARDED_BY(mu_);
  uint64_t total_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  absl::Time last_draw_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace leapcache::load
