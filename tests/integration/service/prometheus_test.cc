// The metrics endpoint against the real tools: `promtool check metrics` accepts a scrape, and a
// real Prometheus server scrapes the leapcache-server's /metrics until its API reports the
// target up and a query for a leapcache_ metric returns data. Skipped (with a message) only
// where the prometheus / promtool binaries are not installed; scripts/bootstrap.sh installs them.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/loopback_http.h"
#include "tests/integration/service/checkpoint_data.h"
#include "tests/integration/service/service_fixture.h"

namespace leapcache::testing {
namespace {

using base::FreeTcpPort;
using base::HttpGet;
using base::HttpResponse;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPromtool[] = "/usr/bin/promtool";

class PrometheusTest : public ServiceTest {
 protected:
  // Some traffic, so counters, histograms and the per-format memory series have values.
  void MakeTraffic() {
    const client::NamespaceSpec spec = SmallNamespace("tenant-metrics");
    const client::NamespaceInfo ns = Register(spec);
    const std::vector<uint8_t> blobs = EncodeBlobs(spec, MakeStates(spec, 1));
    ASSERT_TRUE(client_->PutCompact({ns.id, TestHash(1), {16, 1}, {}, {}}, blobs).ok());
    const std::array<client::BlockHash, 2> chain = {TestHash(1), TestHash(2)};
    ASSERT_TRUE(client_->Lookup({ns.id, chain, {}, 0, 16}).ok());
    ASSERT_TRUE(client_->Get({ns.id, TestHash(1), {}, std::nullopt}).ok());
    EXPECT_FALSE(client_->Get({ns.id, TestHash(3), {}, std::nullopt}).ok());
  }

  std::string Scrape() {
    absl::StatusOr<HttpResponse> r = HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    EXPECT_EQ(r->status, 200);
    EXPECT_TRUE(absl::StrContains(r->headers, "text/plain; version=0.0.4"));
    return r->body;
  }
};

TEST_F(PrometheusTest, ExpositionHasTheDocumentedSeries) {
  MakeTraffic();
  const std::string body = Scrape();
  for (const char* series :
       {"leapcache_lookups_total 1", "leapcache_lookup_hits_total 1",
        "leapcache_lookup_hit_tokens_total 16", "leapcache_lookup_miss_tokens_total 16",
        "leapcache_puts_committed_total 1", "leapcache_get_hits_total 1",
        "leapcache_get_misses_total 1", "leapcache_checkpoints 1",
        "leapcache_memory_fp32_equivalent_bytes{format=\"leap8\",tier=\"host\"} 8192",
        "leapcache_memory_stored_bytes{format=\"leap8\",tier=\"host\"} 5632",
        "leapcache_tier_capacity_bytes{tier=\"host\"} 67108864",
        "leapcache_rpcs_total{code=\"NOT_FOUND\",method=\"StateCache/Get\"} 1",
        "leapcache_rpc_duration_seconds_count{method=\"StateCache/Lookup\"} 1",
        "# TYPE leapcache_rpc_duration_seconds histogram", "leapcache_evictions_total 0",
        "leapcache_put_bytes_total 5632"}) {
    EXPECT_TRUE(absl::StrContains(body, series)) << "missing: " << series << "\n" << body;
  }
  // Health endpoints.
  absl::StatusOr<HttpResponse> healthz = HttpGet(server_->metrics_port(), "/healthz");
  ASSERT_TRUE(healthz.ok());
  EXPECT_EQ(healthz->status, 200);
  absl::StatusOr<HttpResponse> readyz = HttpGet(server_->metrics_port(), "/readyz");
  ASSERT_TRUE(readyz.ok());
  EXPECT_EQ(readyz->status, 200);
  EXPECT_EQ(HttpGet(server_->metrics_port(), "/nope")->status, 404);
}

// Idle TCP connections to the admin port (clients that connect and send nothing, reopened as
// soon as the server drops them) must not fail the kubelet's probes (2 s timeout): two such
// connections failed 10 of 12 /readyz probes when the server had 2 workers and a 10 s timeout.
TEST_F(PrometheusTest, IdleConnectionsDoNotFailTheProbes) {
  constexpr int kIdle = 6;
  std::vector<int> idle;
  auto open_idle = [&] {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->metrics_port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  };
  int answered = 0;
  for (int round = 0; round < 8; ++round) {
    // Replace the idle connections (the server may have dropped them), then probe.
    for (int fd : idle) close(fd);
    idle.clear();
    for (int i = 0; i < kIdle; ++i) open_idle();
    for (const char* path : {"/readyz", "/healthz"}) {
      absl::StatusOr<HttpResponse> r = HttpGet(server_->metrics_port(), path, absl::Seconds(2));
      if (r.ok() && r->status == 200) ++answered;
    }
    usleep(400 * 1000);
  }
  for (int fd : idle) close(fd);
  EXPECT_EQ(answered, 16) << "probes answered within 2 s beside " << kIdle << " idle connections";
}

TEST_F(PrometheusTest, PromtoolAcceptsAScrape) {
  if (access(kPromtool, X_OK) != 0) {
    GTEST_SKIP() << kPromtool << " is not installed (Debian package `prometheus`; "
                 << "scripts/bootstrap.sh installs it)";
  }
  MakeTraffic();
  const std::string dir = MakeTempDir("promtool");
  const std::string file = dir + "/metrics.txt";
  std::ofstream(file) << Scrape();
  absl::StatusOr<RunResult> r =
      RunProgram({kPromtool, "check", "metrics"}, {}, absl::Seconds(60), file);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << "promtool check metrics failed:\n" << r->output;
  std::filesystem::remove_all(dir);
}

TEST_F(PrometheusTest, PrometheusScrapesTheServer) {
  if (access(kPrometheus, X_OK) != 0) {
    GTEST_SKIP() << kPrometheus << " is not installed (Debian package `prometheus`; "
                 << "scripts/bootstrap.sh installs it)";
  }
  MakeTraffic();
  const std::string dir = MakeTempDir("prometheus");
  const int web_port = FreeTcpPort();
  ASSERT_NE(web_port, 0);
  {
    std::ofstream config(dir + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
           << "scrape_configs:\n  - job_name: leapcache\n    static_configs:\n"
           << "      - targets: ['127.0.0.1:" << server_->metrics_port() << "']\n";
  }
  absl::StatusOr<std::unique_ptr<Child>> prometheus =
      Child::Spawn({kPrometheus, "--config.file=" + dir + "/prometheus.yml",
                    "--storage.tsdb.path=" + dir + "/data",
                    absl::StrCat("--web.listen-address=127.0.0.1:", web_port), "--log.level=warn"});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();

  // Up, then queryable: a scrape every second, so both well within a minute.
  bool up = false;
  bool queried = false;
  std::string last;
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  while (absl::Now() < deadline && !(up && queried)) {
    absl::SleepFor(absl::Milliseconds(500));
    if (!up) {
      absl::StatusOr<HttpResponse> targets = HttpGet(web_port, "/api/v1/targets");
      if (!targets.ok()) continue;  // not listening yet
      last = targets->body;
      up = absl::StrContains(targets->body, "\"health\":\"up\"");
      continue;
    }
    absl::StatusOr<HttpResponse> q =
        HttpGet(web_port, "/api/v1/query?query=leapcache_puts_committed_total");
    if (!q.ok()) continue;
    last = q->body;
    queried = absl::StrContains(q->body, "\"status\":\"success\"") &&
              absl::StrContains(q->body, "\"__name__\":\"leapcache_puts_committed_total\"") &&
              absl::StrContains(q->body, "\"1\"]");
  }
  EXPECT_TRUE(up) << "Prometheus never reported the target up; last answer:\n" << last;
  EXPECT_TRUE(queried) << "no data for leapcache_puts_committed_total; last answer:\n" << last;
  (*prometheus)->Signal(SIGTERM);
  EXPECT_TRUE((*prometheus)->Wait(absl::Seconds(30)).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace leapcache::testing
