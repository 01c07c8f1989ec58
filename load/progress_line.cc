#include "load/progress_line.h"

#include <cstdio>

namespace leapcache::load {

void ProgressLine::Start(const std::string& label, uint64_t total) {
  absl::MutexLock lock(&mu_);
  label_ = label;
  total_ = total;
  start_ = absl::Now();
  last_draw_ = absl::InfinitePast();
  drawn_ = false;
}

void ProgressLine::Update(uint64_t done, uint64_t lookups, uint64_t hits, uint64_t puts,
                          uint64_t gets) {
  if (!enabled_) return;
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (done < total_ && now - last_draw_ < absl::Milliseconds(100)) return;
  last_draw_ = now;
  drawn_ = true;
  const double elapsed = absl::ToDoubleSeconds(now - start_);
  std::printf("\r[%s] %llu/%llu requests  %.1f req/s  hit %.1f%%  puts %llu  gets %llu  %.0f s   ",
              label_.c_str(), static_cast<unsigned long long>(done),
              static_cast<unsigned long long>(total_), elapsed > 0 ? done / elapsed : 0.0,
              lookups ? 100.0 * hits / lookups : 0.0, static_cast<unsigned long long>(puts),
              static_cast<unsigned long long>(gets), elapsed);
  std::fflush(stdout);
}

void ProgressLine::Finish() {
  if (!enabled_) return;
  absl::MutexLock lock(&mu_);
  if (drawn_) std::printf("\n");
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace leapcache::load
