#include "service/core/clock.h"

#include <chrono>

#include "base/check.h"
#include "base/lock.h"

namespace leapcache::core {
namespace {

class SteadyClock final : public Clock {
 public:
  absl::Time Now() const override {
    return absl::UnixEpoch() +
           absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
  }
};

}  // namespace

const Clock& MonotonicClock() {
  static const SteadyClock* const clock = new SteadyClock();  // never destroyed: used at exit
  return *clock;
}

absl::Time FakeClock::Now() const {
  base::ReaderLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration d) {
  LC_CHECK(d >= absl::ZeroDuration(), "FakeClock cannot go backwards");
  base::WriterLock lock(&mu_);
  now_ += d;
}

}  // namespace leapcache::core
