// Turning off Abseil's mutex deadlock detection in a process that serves or drives many calls.
//
// Debian builds its Abseil (libabsl 20220623) without NDEBUG, so absl::Mutex runs its debug-mode
// deadlock detection: every acquisition made while another mutex is held updates one
// process-wide lock-order graph under one global spin lock (with a stack trace per new edge), and
// a cycle aborts the process. gRPC takes absl::Mutex many times per call, so every thread of the
// process serializes on that spin lock: over loopback on two cores it cost a lookup server
// about a tenth of its throughput, and as much again in its client (results/service/lookups).
// The programs of this project turn it off at start; the tests keep it on (it checks lock order
// on every test run), and so does a program linking the client library until it calls this.
#pragma once

#include "absl/synchronization/mutex.h"

namespace leapcache::base {

// Call once at process start. Process-wide; harmless where Abseil was built with NDEBUG.
inline void StopMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace leapcache::base
