// The server's resident memory stays within the bound its settings give (service/config/
// config.h, ServerMemoryBound, which the server exports) under the load that once took it to
// 5.7x its budget: many concurrent uploaders of chunks as large as a message may be (942 MiB
// against a 64 MiB budget before gRPC's memory quota was set). Against the real server; its
// VmRSS is read from /proc while the load runs and after it.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "base/loopback_http.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "leapcache/v1/state_cache.grpc.pb.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

// VmRSS of `pid` in bytes, 0 if unreadable.
uint64_t ResidentBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t kib = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) return kib * 1024;
  }
  return 0;
}

class MemoryBoundTest : public ServiceTest {
 protected:
  std::vector<std::string> ServerArgs() const override {
    return {"--memory-budget=64MiB", "--decode-memory-budget=0", "--grpc-memory-budget=64MiB"};
  }
};

// The bound the server reports for its settings (leapcache_memory_bound_bytes).
uint64_t ReportedBound(int metrics_port) {
  absl::StatusOr<base::HttpResponse> r = base::HttpGet(metrics_port, "/metrics");
  if (!r.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
    if (!absl::ConsumePrefix(&line, "leapcache_memory_bound_bytes ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return static_cast<uint64_t>(v);
  }
  return 0;
}

TEST_F(MemoryBoundTest, ConcurrentUploadersOfLargeChunksStayWithinTheBound) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory and quarantine are outside the bound";
#endif
  const uint64_t bound = ReportedBound(server_->metrics_port());
  ASSERT_GT(bound, 0u);
  const client::NamespaceSpec spec = SmallNamespace("tenant-rss", 4, 16, 128);
  const client::NamespaceInfo ns = Register(spec);
  const uint64_t idle = ResidentBytes(server_->child().pid());
  ASSERT_GT(idle, 0u);
  constexpr int kUploaders = 48;
  const std::string chunk_bytes(7 << 20, 'x');  // a message just under the 8 MiB limit
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> chunks{0};
  std::vector<std::thread> uploaders;
  for (int u = 0; u < kUploaders; ++u) {
    uploaders.emplace_back([&, u] {
      grpc::ChannelArguments args;
      args.SetMaxSendMessageSize(16 << 20);
      args.SetInt("leapcache-uploader", u);  // a connection each
      std::unique_ptr<v1::StateCache::Stub> stub = v1::StateCache::NewStub(
          grpc::CreateCustomChannel(server_->target(), grpc::InsecureChannelCredentials(), args));
      v1::UploadPutRequest chunk;
      chunk.set_put_id(1 + u);  // unknown puts: each stream ends at its first chunk
      chunk.set_data(chunk_bytes);
      while (!stop.load()) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        v1::UploadPutResponse response;
        std::unique_ptr<grpc::ClientWriter<v1::UploadPutRequest>> writer =
            stub->UploadPut(&context, &response);
        for (int i = 0; i < 4 && writer->Write(chunk); ++i) chunks.fetch_add(1);
        writer->WritesDone();
        (void)writer->Finish();
      }
    });
  }
  uint64_t peak = 0;
  const absl::Time end = absl::Now() + absl::Seconds(6);
  while (absl::Now() < end) {
    peak = std::max(peak, ResidentBytes(server_->child().pid()));
    absl::SleepFor(absl::Milliseconds(20));
  }
  stop = true;
  for (std::thread& t : uploaders) t.join();
  absl::SleepFor(absl::Seconds(2));
  const uint64_t after = ResidentBytes(server_->child().pid());
  std::printf("bound %.1f MiB: idle %.1f MiB, peak %.1f MiB, after %.1f MiB, %llu chunks sent\n",
              bound / 1048576.0, idle / 1048576.0, peak / 1048576.0, after / 1048576.0,
              static_cast<unsigned long long>(chunks.load()));
  EXPECT_GT(chunks.load(), static_cast<uint64_t>(kUploaders));
  EXPECT_LE(peak, bound);
  EXPECT_LE(after, bound);
}

}  // namespace
}  // namespace leapcache::testing
