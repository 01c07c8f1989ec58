#include "base/shm_mailbox.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"

namespace leapcache::base {
namespace {

constexpr uint64_t kMagic = 0x786f626c69616d6cULL;  // "lmailbox", little-endian
constexpr uint32_t kVersion = 1;
// The shared words sit in the segment's first bytes; the request and reply areas follow.
constexpr size_t kHeaderBytes = 256;
// How long a sleeping side sleeps before it looks at `closed` and its caller's deadline again,
// in case a wake was lost to a peer that died between its write and its wake.
constexpr absl::Duration kMaxSleepSlice = absl::Milliseconds(10);

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// One round of a polling loop. Every 16th round gives the core to any other runnable thread:
// where threads outnumber cores (a transport's progress thread beside this one, the service's
// step beside its caller), a poller that never yields holds its core for a whole scheduler
// slice (milliseconds) while the thread it waits for cannot run. Alone on its core, a yield is
// a fraction of a microsecond.
void PollRound(uint32_t round) {
  if ((round & 15) == 15) {
    sched_yield();
  } else {
    CpuRelax();
  }
}

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string text = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(text);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(text);
  return absl::InternalError(text);
}

size_t MapBytes(size_t capacity) { return kHeaderBytes + 2 * capacity; }

}  // namespace

struct ShmMailbox::Shared {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t capacity;
  // The peer's words: it writes a request's length, then its sequence number.
  alignas(64) std::atomic<uint32_t> request_seq;
  std::atomic<uint32_t> request_bytes;
  std::atomic<uint32_t> owner_sleeping;
  // The owner's words: the reply's length, then the sequence number of the request it answers.
  alignas(64) std::atomic<uint32_t> reply_seq;
  std::atomic<uint32_t> reply_bytes;
  std::atomic<uint32_t> peer_sleeping;
  alignas(64) std::atomic<uint32_t> closed;
};
// Lock-free atomics are address-free, so both processes' views of a word are one atomic.
static_assert(std::atomic<uint32_t>::is_always_lock_free);

ShmMailbox::ShmMailbox(std::string name, bool owner, void* base, size_t map_bytes, size_t capacity)
    : name_(std::move(name)),
      owner_linked_(owner),
      base_(base),
      map_bytes_(map_bytes),
      capacity_(capacity),
      shared_(static_cast<Shared*>(base)),
      request_area_(static_cast<uint8_t*>(base) + kHeaderBytes),
      reply_area_(static_cast<uint8_t*>(base) + kHeaderBytes + capacity) {}

absl::StatusOr<std::unique_ptr<ShmMailbox>> ShmMailbox::Create(size_t capacity) {
  if (capacity == 0 || capacity > kMaxCapacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("mailbox capacity must be 1..", kMaxCapacity, " bytes (got ", capacity, ")"));
  }
  static_assert(sizeof(Shared) <= kHeaderBytes);
  uint8_t random[16];
  if (getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    return ErrnoStatus(errno, "getrandom");
  }
  std::string name = "/leapcache-";
  for (uint8_t b : random) absl::StrAppend(&name, absl::Hex(b, absl::kZeroPad2));
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("shm_open ", name));
  const size_t map_bytes = MapBytes(capacity);
  if (ftruncate(fd, static_cast<off_t>(map_bytes)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return ErrnoStatus(err, absl::StrCat("ftruncate ", name));
  }
  void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return ErrnoStatus(err, absl::StrCat("mmap ", name));
  }
  Shared* shared = new (base) Shared{};
  shared->capacity = capacity;
  shared->version = kVersion;
  // Written last, so a peer that maps the segment early sees no mailbox rather than half of one.
  std::atomic_ref<uint64_t>(shared->magic).store(kMagic, std::memory_order_release);
  return std::unique_ptr<ShmMailbox>(
      new ShmMailbox(std::move(name), /*owner=*/true, base, map_bytes, capacity));
}

absl::StatusOr<std::unique_ptr<ShmMailbox>> ShmMailbox::Open(std::string_view name_view) {
  const std::string name(name_view);
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.size() > NAME_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("not a shared-memory name: '", name, "'"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("shm_open ", name));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("fstat ", name));
  }
  const size_t map_bytes = static_cast<size_t>(st.st_size);
  if (map_bytes < kHeaderBytes) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(name, " is not a leapcache mailbox"));
  }
  void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) return ErrnoStatus(err, absl::StrCat("mmap ", name));
  // Nothing else may map it from now on.
  shm_unlink(name.c_str());
  Shared* shared = static_cast<Shared*>(base);
  const uint64_t magic = std::atomic_ref<uint64_t>(shared->magic).load(std::memory_order_acquire);
  const uint64_t capacity = shared->capacity;
  if (magic != kMagic || shared->version != kVersion || capacity == 0 || capacity > kMaxCapacity ||
      MapBytes(capacity) != map_bytes) {
    munmap(base, map_bytes);
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is not a leapcache mailbox of version ", kVersion));
  }
  return std::unique_ptr<ShmMailbox>(
      new ShmMailbox(name, /*owner=*/false, base, map_bytes, capacity));
}

ShmMailbox::~ShmMailbox() {
  Close();
  munmap(base_, map_bytes_);
  if (owner_linked_) shm_unlink(name_.c_str());  // ENOENT when the peer did it: fine
}

void ShmMailbox::Close() {
  if (shared_->closed.exchange(1, std::memory_order_seq_cst) == 0) {
    // Both sides' sleeping words: whoever sleeps wakes and sees `closed` (one that was about to
    // sleep sees it after its slice).
    FutexWake(&shared_->request_seq);
    FutexWake(&shared_->reply_seq);
  }
}

bool ShmMailbox::closed() const { return shared_->closed.load(std::memory_order_acquire) != 0; }

absl::Status ShmMailbox::Call(std::span<const uint8_t> request, std::vector<uint8_t>* reply,
                              absl::Duration spin, absl::Time deadline,
                              const std::function<bool()>& alive) {
  if (request.size() > capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a request of ", request.size(), " bytes is over the mailbox's ", capacity_));
  }
  if (closed()) return absl::UnavailableError("the mailbox is closed");
  const uint32_t seq = ++next_call_;
  if (!request.empty()) std::memcpy(request_area_, request.data(), request.size());
  shared_->request_bytes.store(static_cast<uint32_t>(request.size()), std::memory_order_relaxed);
  shared_->request_seq.store(seq, std::memory_order_seq_cst);
  if (shared_->owner_sleeping.load(std::memory_order_seq_cst) != 0) {
    FutexWake(&shared_->request_seq);
  }

  const absl::Time spin_until = absl::Now() + spin;
  bool spinning = spin > absl::ZeroDuration();
  for (uint32_t round = 0;; ++round) {
    const uint32_t seen = shared_->reply_seq.load(std::memory_order_acquire);
    if (seen == seq) break;
    if (closed()) return absl::UnavailableError("the mailbox was closed before the reply");
    if (spinning) {
      PollRound(round);
      if ((round & 255) == 0 && absl::Now() >= spin_until) spinning = false;
      continue;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      Close();
      return absl::DeadlineExceededError("no reply through the mailbox before the deadline");
    }
    if (alive && !alive()) {
      Close();
      return absl::UnavailableError("the mailbox's owner is gone");
    }
    shared_->peer_sleeping.store(1, std::memory_order_seq_cst);
    if (shared_->reply_seq.load(std::memory_order_seq_cst) == seen && !closed()) {
      FutexWait(&shared_->reply_seq, seen, std::min(kMaxSleepSlice, deadline - now));
    }
    shared_->peer_sleeping.store(0, std::memory_order_relaxed);
  }
  const uint32_t bytes = shared_->reply_bytes.load(std::memory_order_relaxed);
  if (bytes > capacity_) {
    Close();
    return absl::DataLossError(
        absl::StrCat("the mailbox's reply claims ", bytes, " bytes, over its ", capacity_));
  }
  reply->assign(reply_area_, reply_area_ + bytes);
  return absl::OkStatus();
}

absl::StatusOr<bool> ShmMailbox::Receive(std::vector<uint8_t>* request, absl::Duration spin,
                                         absl::Duration wait) {
  if (closed()) return absl::UnavailableError("the mailbox is closed");
  if (pending_) return absl::FailedPreconditionError("the last request has not been answered");
  const absl::Time spin_until = absl::Now() + spin;
  bool spinning = spin > absl::ZeroDuration();
  uint32_t seq = 0;
  for (uint32_t round = 0;; ++round) {
    if (closed()) return absl::UnavailableError("the mailbox is closed");
    seq = shared_->request_seq.load(std::memory_order_acquire);
    if (seq != last_request_) break;
    if (spinning) {
      PollRound(round);
      if ((round & 255) == 0 && absl::Now() >= spin_until) spinning = false;
      continue;
    }
    if (wait <= absl::ZeroDuration()) return false;
    shared_->owner_sleeping.store(1, std::memory_order_seq_cst);
    if (shared_->request_seq.load(std::memory_order_seq_cst) == last_request_ && !closed()) {
      FutexWait(&shared_->request_seq, last_request_, std::min(wait, kMaxSleepSlice));
    }
    shared_->owner_sleeping.store(0, std::memory_order_relaxed);
    wait -= kMaxSleepSlice;
  }
  if (seq != last_request_ + 1) {
    Close();
    return absl::FailedPreconditionError(absl::StrCat(
        "mailbox request number ", seq, " does not follow ", last_request_, ": closed"));
  }
  const uint32_t bytes = shared_->request_bytes.load(std::memory_order_relaxed);
  if (bytes > capacity_) {
    Close();
    return absl::FailedPreconditionError(absl::StrCat("a mailbox request claims ", bytes,
                                                      " bytes, over its ", capacity_, ": closed"));
  }
  // Copied out before anyone looks at it: the peer can still write the shared bytes.
  request->assign(request_area_, request_area_ + bytes);
  last_request_ = seq;
  pending_ = true;
  return true;
}

absl::Status ShmMailbox::Reply(std::span<const uint8_t> reply) {
  if (!pending_) return absl::FailedPreconditionError("no request to answer");
  if (reply.size() > capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a reply of ", reply.size(), " bytes is over the mailbox's ", capacity_));
  }
  if (!reply.empty()) std::memcpy(reply_area_, reply.data(), reply.size());
  shared_->reply_bytes.store(static_cast<uint32_t>(reply.size()), std::memory_order_relaxed);
  shared_->reply_seq.store(last_request_, std::memory_order_seq_cst);
  pending_ = false;
  if (shared_->peer_sleeping.load(std::memory_order_seq_cst) != 0) FutexWake(&shared_->reply_seq);
  return absl::OkStatus();
}

}  // namespace leapcache::base
