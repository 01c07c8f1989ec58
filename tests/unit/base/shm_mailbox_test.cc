// ShmMailbox: calls between threads and between processes, a garbled peer, closes and deadlines.
#include "base/shm_mailbox.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "gtest/gtest.h"

namespace leapcache::base {
namespace {

constexpr absl::Duration kSpin = absl::Microseconds(200);

std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

// Answers every request with its bytes reversed until the mailbox closes; counts requests.
void Echo(ShmMailbox* box, std::atomic<int>* served) {
  std::vector<uint8_t> request;
  while (true) {
    absl::StatusOr<bool> got = box->Receive(&request, kSpin, absl::Milliseconds(20));
    if (!got.ok()) return;
    if (!*got) continue;
    std::vector<uint8_t> reply(request.rbegin(), request.rend());
    ASSERT_TRUE(box->Reply(reply).ok());
    served->fetch_add(1);
  }
}

bool Linked(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

TEST(ShmMailboxTest, CallsBetweenThreadsGetTheirOwnReplies) {
  auto owner = ShmMailbox::Create(4096);
  ASSERT_TRUE(owner.ok()) << owner.status();
  auto peer = ShmMailbox::Open((*owner)->name());
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_FALSE(Linked((*owner)->name())) << "the peer unlinks the name once it mapped it";
  EXPECT_EQ((*peer)->capacity(), 4096u);

  std::atomic<int> served{0};
  std::thread server(Echo, owner->get(), &served);
  std::mt19937 rng(7);
  std::vector<uint8_t> reply;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> request(rng() % 4097);
    for (uint8_t& b : request) b = static_cast<uint8_t>(rng());
    // Half the calls sleep on both sides (no spin): the futex path must lose no wake.
    const absl::Duration spin = i % 2 ? kSpin : absl::ZeroDuration();
    ASSERT_TRUE((*peer)->Call(request, &reply, spin, absl::Now() + absl::Seconds(10)).ok()) << i;
    ASSERT_EQ(reply, std::vector<uint8_t>(request.rbegin(), request.rend())) << i;
  }
  (*peer)->Close();
  server.join();
  EXPECT_EQ(served.load(), 2000);
  EXPECT_TRUE((*owner)->closed());
}

TEST(ShmMailboxTest, CallsBetweenProcesses) {
  auto owner = ShmMailbox::Create(1024);
  ASSERT_TRUE(owner.ok()) << owner.status();
  const std::string name = (*owner)->name();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto peer = ShmMailbox::Open(name);
    if (!peer.ok()) _exit(2);
    std::vector<uint8_t> reply;
    for (int i = 0; i < 500; ++i) {
      const std::vector<uint8_t> request = Bytes(std::to_string(i) + "-leapcache");
      if (!(*peer)->Call(request, &reply, kSpin, absl::Now() + absl::Seconds(10)).ok()) _exit(3);
      if (reply != std::vector<uint8_t>(request.rbegin(), request.rend())) _exit(4);
    }
    _exit(0);  // the destructor does not run: the owner sees no Close, only silence
  }
  std::atomic<int> served{0};
  std::vector<uint8_t> request;
  while (served.load() < 500) {
    absl::StatusOr<bool> got = (*owner)->Receive(&request, kSpin, absl::Milliseconds(20));
    ASSERT_TRUE(got.ok()) << got.status();
    if (!*got) continue;
    std::vector<uint8_t> reply(request.rbegin(), request.rend());
    ASSERT_TRUE((*owner)->Reply(reply).ok());
    served.fetch_add(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(Linked(name));
}

// A peer that writes the shared words itself (it maps the same segment) cannot make the owner
// read past the request area or take a request out of order.
TEST(ShmMailboxTest, GarbledRequestsCloseTheMailbox) {
  for (int garble = 0; garble < 2; ++garble) {
    auto owner = ShmMailbox::Create(512);
    ASSERT_TRUE(owner.ok());
    const int fd = shm_open((*owner)->name().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    void* base = mmap(nullptr, 256 + 2 * 512, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(base, MAP_FAILED);
    // The header's layout: request_seq at byte 64, request_bytes at 68.
    auto* words = reinterpret_cast<std::atomic<uint32_t>*>(static_cast<uint8_t*>(base) + 64);
    if (garble == 0) {
      words[1].store(1u << 30);  // a length far past the area
      words[0].store(1);
    } else {
      words[1].store(8);
      words[0].store(5);  // skips numbers 1..4
    }
    std::vector<uint8_t> request;
    absl::StatusOr<bool> got = (*owner)->Receive(&request, kSpin, absl::Milliseconds(20));
    EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << garble;
    EXPECT_TRUE((*owner)->closed());
    EXPECT_TRUE(request.empty());
    munmap(base, 256 + 2 * 512);
  }
}

TEST(ShmMailboxTest, CloseWakesASleepingCaller) {
  auto owner = ShmMailbox::Create(64);
  ASSERT_TRUE(owner.ok());
  auto peer = ShmMailbox::Open((*owner)->name());
  ASSERT_TRUE(peer.ok());
  std::thread closer([&] {
    std::vector<uint8_t> request;
    while (true) {
      absl::StatusOr<bool> got = (*owner)->Receive(&request, kSpin, absl::Milliseconds(20));
      if (got.ok() && *got) break;
    }
    absl::SleepFor(absl::Milliseconds(50));
    (*owner)->Close();  // never replies
  });
  std::vector<uint8_t> reply;
  const absl::Time start = absl::Now();
  absl::Status st = (*peer)->Call(Bytes("x"), &reply, kSpin, absl::Now() + absl::Seconds(30));
  closer.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ((*peer)->Call(Bytes("y"), &reply, kSpin, absl::InfiniteFuture()).code(),
            absl::StatusCode::kUnavailable);
  // And the owner's side: closed by the peer ends its wait too.
  std::vector<uint8_t> request;
  EXPECT_EQ((*owner)->Receive(&request, kSpin, absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(ShmMailboxTest, DeadlinesAndADeadOwnerEndTheCall) {
  auto owner = ShmMailbox::Create(64);
  ASSERT_TRUE(owner.ok());
  auto peer = ShmMailbox::Open((*owner)->name());
  ASSERT_TRUE(peer.ok());
  std::vector<uint8_t> reply;
  absl::Status st = (*peer)->Call(Bytes("x"), &reply, kSpin, absl::Now() + absl::Milliseconds(30));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_TRUE((*peer)->closed()) << "a late reply must not answer a later call";

  auto owner2 = ShmMailbox::Create(64);
  auto peer2 = ShmMailbox::Open((*owner2)->name());
  ASSERT_TRUE(peer2.ok());
  int asked = 0;
  st = (*peer2)->Call(Bytes("x"), &reply, kSpin, absl::Now() + absl::Seconds(30),
                      [&] { return ++asked < 3; });
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(asked, 3);
}

TEST(ShmMailboxTest, BadSizesAndNamesAreRefused) {
  EXPECT_EQ(ShmMailbox::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmMailbox::Create(ShmMailbox::kMaxCapacity + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmMailbox::Open("/leapcache-none-such").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ShmMailbox::Open("no-slash").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmMailbox::Open("/a/b").status().code(), absl::StatusCode::kInvalidArgument);

  // A segment that is not a mailbox.
  const std::string other = "/leapcache-test-not-a-mailbox-" + std::to_string(getpid());
  const int fd = shm_open(other.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  EXPECT_EQ(ShmMailbox::Open(other).status().code(), absl::StatusCode::kFailedPrecondition);
  shm_unlink(other.c_str());

  auto owner = ShmMailbox::Create(16);
  ASSERT_TRUE(owner.ok());
  auto peer = ShmMailbox::Open((*owner)->name());
  ASSERT_TRUE(peer.ok());
  std::vector<uint8_t> reply;
  EXPECT_EQ((*peer)->Call(std::vector<uint8_t>(17), &reply, kSpin, absl::InfiniteFuture()).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> request;
  absl::StatusOr<bool> got = (*owner)->Receive(&request, kSpin, absl::Milliseconds(5));
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got) << "a refused request is never sent";
  EXPECT_EQ((*owner)->Reply(Bytes("z")).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ShmMailboxTest, TheOwnerUnlinksANameNobodyOpened) {
  std::string name;
  {
    auto owner = ShmMailbox::Create(16);
    ASSERT_TRUE(owner.ok());
    name = (*owner)->name();
    EXPECT_TRUE(Linked(name));
  }
  EXPECT_FALSE(Linked(name));
}

}  // namespace
}  // namespace leapcache::base
