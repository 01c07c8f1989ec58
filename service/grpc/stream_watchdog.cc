#include "service/grpc/stream_watchdog.h"

#include <optional>
#include <utility>
#include <vector>

namespace leapcache::server {
namespace {

// The watchdog whose Sweep() runs expire callbacks on this thread, holding its lock. Cancelling
// a call may run the stream's last callbacks inline, and so Unwatch() on this thread.
thread_local const StreamWatchdog* sweeping = nullptr;

}  // namespace

const char* StreamExpiryName(StreamExpiry why) {
  return why == StreamExpiry::kIdle ? "idle" : "age";
}

StreamWatchdog::StreamWatchdog(StreamLimits limits, const core::Clock& clock,
                               metrics::Registry* registry)
    : limits_(limits),
      clock_(clock),
      open_(registry->AddGauge("leapcache_streams_open",
                               "Streaming calls open now (Get, UploadPut), by method.")),
      expired_(registry->AddCounter(
          "leapcache_streams_expired_total",
          "Streams the server ended because the client stopped taking part: no message moved "
          "for stream_idle_timeout (reason idle) or open for stream_max_age (reason age).")) {
  for (const char* method : {"StateCache/Get", "StateCache/UploadPut"}) {
    open_.Add({{"method", method}});
    for (StreamExpiry why : {StreamExpiry::kIdle, StreamExpiry::kAge}) {
      expired_.Add({{"method", method}, {"reason", StreamExpiryName(why)}});
    }
  }
}

StreamWatchdog::Entry* StreamWatchdog::Watch(const std::string& method,
                                             std::function<void(StreamExpiry)> expire) {
  std::unique_ptr<Entry> entry(new Entry(clock_, method, std::move(expire)));
  Entry* raw = entry.get();
  open_.Add({{"method", method}}).Increment();
  absl::MutexLock lock(&mu_);
  entries_.emplace(raw, std::move(entry));
  return raw;
}

void StreamWatchdog::Unwatch(Entry* entry) {
  std::unique_ptr<Entry> owned;
  if (sweeping == this) {
    // Inside an expire callback of this thread's Sweep, which holds the lock.
    owned = TakeLocked(entry);
  } else {
    // Taking the lock waits for a Sweep that is calling this entry's callback.
    absl::MutexLock lock(&mu_);
    owned = TakeLocked(entry);
  }
}

std::unique_ptr<StreamWatchdog::Entry> StreamWatchdog::TakeLocked(Entry* entry) {
  auto it = entries_.find(entry);
  if (it == entries_.end()) return nullptr;
  std::unique_ptr<Entry> owned = std::move(it->second);
  entries_.erase(it);
  if (!owned->expired_) open_.Add({{"method", owned->method_}}).Decrement();
  return owned;
}

int StreamWatchdog::Sweep() {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  struct Due {
    std::function<void(StreamExpiry)> expire;
    StreamExpiry why;
  };
  std::vector<Due> due;
  for (auto& [raw, e] : entries_) {
    if (e->expired_) continue;
    const absl::Time last =
        absl::FromUnixNanos(e->last_progress_ns_.load(std::memory_order_relaxed));
    std::optional<StreamExpiry> why;
    if (now - e->opened_ >= limits_.max_age) {
      why = StreamExpiry::kAge;
    } else if (now - last >= limits_.idle) {
      why = StreamExpiry::kIdle;
    }
    if (!why.has_value()) continue;
    e->expired_ = true;
    open_.Add({{"method", e->method_}}).Decrement();
    expired_.Add({{"method", e->method_}, {"reason", StreamExpiryName(*why)}}).Increment();
    // Moved out: the stream may end, and its entry go, inside the callback.
    due.push_back(Due{std::move(e->expire_), *why});
  }
  // Under the lock, so a stream ending meanwhile on another thread waits in Unwatch() until its
  // callback returned (the callback may touch the stream until then).
  sweeping = this;
  for (Due& d : due) d.expire(d.why);
  sweeping = nullptr;
  return static_cast<int>(due.size());
}

size_t StreamWatchdog::watched() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [raw, e] : entries_) n += e->expired_ ? 0 : 1;
  return n;
}

}  // namespace leapcache::server
