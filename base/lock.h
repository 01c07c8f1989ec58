// Scoped lock guards for absl::Mutex that ThreadSanitizer can see through.
//
// Debian's Abseil (libabsl 20220623) is built without -fsanitize=thread, so absl::Mutex's
// acquire/release happen in uninstrumented code and a TSan build reports every access guarded by
// it as a data race (verified: two threads incrementing a flat_hash_map under absl::MutexLock).
// These guards behave exactly like absl::MutexLock / absl::ReaderMutexLock and, in TSan builds
// only, also tell TSan about the lock through its public mutex annotation API, so guarded data is
// race-free to TSan and real races (e.g. a write under a reader lock) are still reported.
// The cache core uses only these guards on its mutexes; with an instrumented Abseil they are
// harmless.
//
// Thread-safety annotations are those of absl::MutexLock, so clang's -Wthread-safety checks them.
#pragma once

#include "absl/base/config.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#if defined(ABSL_HAVE_THREAD_SANITIZER)
#include <sanitizer/tsan_interface.h>
#endif

namespace leapcache::base {

namespace lock_internal {
#if defined(ABSL_HAVE_THREAD_SANITIZER)
inline void PreLock(absl::Mutex* mu, unsigned flags) { __tsan_mutex_pre_lock(mu, flags); }
inline void PostLock(absl::Mutex* mu, unsigned flags) { __tsan_mutex_post_lock(mu, flags, 0); }
inline void PreUnlock(absl::Mutex* mu, unsigned flags) { __tsan_mutex_pre_unlock(mu, flags); }
inline void PostUnlock(absl::Mutex* mu, unsigned flags) { __tsan_mutex_post_unlock(mu, flags); }
inline constexpr unsigned kReadFlag = __tsan_mutex_read_lock;
#else
inline void PreLock(absl::Mutex*, unsigned) {}
inline void PostLock(absl::Mutex*, unsigned) {}
inline void PreUnlock(absl::Mutex*, unsigned) {}
inline void PostUnlock(absl::Mutex*, unsigned) {}
inline constexpr unsigned kReadFlag = 0;
#endif
}  // namespace lock_internal

// Exclusive lock of `mu` for the guard's scope.
class ABSL_SCOPED_LOCKABLE WriterLock {
 public:
  explicit WriterLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    lock_internal::PreLock(mu_, 0);
    mu_->Lock();
    lock_internal::PostLock(mu_, 0);
  }
  ~WriterLock() ABSL_UNLOCK_FUNCTION() {
    lock_internal::PreUnlock(mu_, 0);
    mu_->Unlock();
    lock_internal::PostUnlock(mu_, 0);
  }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

// Shared lock of `mu` for the guard's scope.
class ABSL_SCOPED_LOCKABLE ReaderLock {
 public:
  explicit ReaderLock(absl::Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    lock_internal::PreLock(mu_, lock_internal::kReadFlag);
    mu_->ReaderLock();
    lock_internal::PostLock(mu_, lock_internal::kReadFlag);
  }
  ~ReaderLock() ABSL_UNLOCK_FUNCTION() {
    lock_internal::PreUnlock(mu_, lock_internal::kReadFlag);
    mu_->ReaderUnlock();
    lock_internal::PostUnlock(mu_, lock_internal::kReadFlag);
  }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

}  // namespace leapcache::base
