// StreamWatchdog: ends the streams of clients that stopped taking part, so that no stream holds a
// read lease, a connection's memory or a put's progress for longer than the settings allow.
//
// A streaming handler registers its stream with Watch() and calls Progress() whenever a message
// moves (a Get response the client took, an UploadPut chunk that arrived). Sweep(), run by the
// server's housekeeping thread, expires a stream that made no progress for `idle`, or that has
// been open for `max_age` whatever its progress (a reader trickling a byte at a time would
// otherwise keep a checkpoint's memory leased forever). Expiring calls the stream's callback,
// which releases what the stream holds and cancels the call.
//
//   leapcache_streams_open{method}               streams watched now
//   leapcache_streams_expired_total{method,reason}  streams ended here; reason: idle or age
//
// Thread-safe. Expire callbacks run under the watchdog's lock (so a stream cannot end and be freed
// on another thread meanwhile): a callback may take the stream's own lock, and a stream must not
// hold that lock while it calls Unwatch(). A callback should cancel its call last: the stream
// may end, and free itself, inside the cancel.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/core/clock.h"
#include "service/metrics/registry.h"

namespace leapcache::server {

enum class StreamExpiry { kIdle, kAge };

// "idle" or "age".
const char* StreamExpiryName(StreamExpiry why);

struct StreamLimits {
  // No message moved for this long.
  absl::Duration idle = absl::Seconds(30);
  // Open for this long.
  absl::Duration max_age = absl::Minutes(10);
};

class StreamWatchdog {
 public:
  // One stream's registration; valid until Unwatch(), expired or not.
  class Entry {
   public:
    // A message moved. Lock-free: called on the stream's hot path.
    void Progress() {
      last_progress_ns_.store(absl::ToUnixNanos(clock_.Now()), std::memory_order_relaxed);
    }

   private:
    friend class StreamWatchdog;
    Entry(const core::Clock& clock, std::string method, std::function<void(StreamExpiry)> expire)
        : clock_(clock),
          method_(std::move(method)),
          opened_(clock.Now()),
          last_progress_ns_(absl::ToUnixNanos(opened_)),
          expire_(std::move(expire)) {}

    const core::Clock& clock_;
    const std::string method_;
    const absl::Time opened_;
    std::atomic<int64_t> last_progress_ns_;
    std::function<void(StreamExpiry)> expire_;  // moved out when the stream expires
    bool expired_ = false;                      // guarded by the watchdog's mu_
  };

  // `clock` and `registry` must outlive the watchdog.
  StreamWatchdog(StreamLimits limits, const core::Clock& clock, metrics::Registry* registry);
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  // Starts watching a stream of `method` ("StateCache/Get"). `expire` is called at most once,
  // from Sweep(), and never after Unwatch() returned.
  Entry* Watch(const std::string& method, std::function<void(StreamExpiry)> expire);
  // Stops watching (the stream ended). Waits for an expire callback of this entry in progress on
  // another thread; called from inside one (cancelling a call may end it inline), returns at
  // once. `entry` is invalid afterwards.
  void Unwatch(Entry* entry) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // Expires every stream past a limit as of now; returns how many.
  int Sweep();

  // Streams watched and not expired.
  size_t watched() const;
  const StreamLimits& limits() const { return limits_; }

 private:
  // The entry's registration, taken out of entries_. REQUIRES: mu_ held, by this thread or by
  // this thread's Sweep.
  std::unique_ptr<Entry> TakeLocked(Entry* entry) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  const StreamLimits limits_;
  const core::Clock& clock_;
  metrics::Family<metrics::Gauge>& open_;
  metrics::Family<metrics::Counter>& expired_;
  mutable absl::Mutex mu_;
  // Every stream watched and not yet unwatched, expired ones included (marked, skipped by sweeps).
  absl::flat_hash_map<Entry*, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace leapcache::server
