// Time source of the cache core. Put deadlines are measured on a Clock so that tests can move
// time by hand (FakeClock) and production uses a monotonic clock: a wall-clock jump must neither
// expire every in-flight put nor keep one alive forever.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace leapcache::core {

class Clock {
 public:
  virtual ~Clock() = default;
  // Thread-safe. Never goes backwards.
  virtual absl::Time Now() const = 0;
};

// std::chrono::steady_clock expressed as an absl::Time (its epoch is arbitrary; only differences
// and comparisons between values of this clock mean anything). Lives forever.
const Clock& MonotonicClock();

// A clock that moves only when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(1)) : now_(start) {}
  absl::Time Now() const override;
  // REQUIRES: d >= 0.
  void Advance(absl::Duration d);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::core
