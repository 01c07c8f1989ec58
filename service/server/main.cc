// leapcache-server: the state-cache service on the CPU backend.
//
//   leapcache-server [--config FILE] [--check-config] [--SETTING=VALUE ...]
//
// Settings: config.h (defaults and trade-offs) and config_loader.h (flags, LEAPCACHE_*
// environment variables, YAML). Once serving, stdout carries one line per listener:
//   leapcache-server listening on 127.0.0.1:41237
//   leapcache-server metrics on 127.0.0.1:39017
// SIGTERM or SIGINT drains (shutdown_grace) and exits 0. Exit status 1: invalid configuration
// or a start-up failure, with the reason on stderr.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/mutex_deadlock_detection.h"
#include "service/config/config_loader.h"
#include "service/server/large_allocations.h"
#include "service/server/server.h"

namespace leapcache::server {
namespace {

constexpr char kProgram[] = "leapcache-server";

// Written under a temporary name and renamed, so a reader never sees a partial number.
absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", reason));
  }
  return absl::OkStatus();
}

int Run(int argc, char** argv) {
  // Block the shutdown and reload signals before any thread starts, so every thread inherits the
  // mask and only the sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a peer closing a socket is an error return, not a death

  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<LoadedConfig> loaded = LoadConfig(args, CurrentEnvironment());
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(loaded.status().message()).c_str());
    return 1;
  }
  if (loaded->help) {
    std::fputs(ConfigUsage(kProgram).c_str(), stdout);
    return 0;
  }
  for (const std::string& w : loaded->warnings)
    std::fprintf(stderr, "%s: %s\n", kProgram, w.c_str());
  if (loaded->check_only) {
    std::fputs(DescribeConfig(*loaded).c_str(), stdout);
    std::fprintf(stdout, "# configuration is valid\n");
    return 0;
  }

  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(loaded->config);
  if (!server.ok()) {
    std::fprintf(stderr, "%s: cannot start: %s\n", kProgram,
                 std::string(server.status().message()).c_str());
    return 1;
  }
  if (!loaded->config.port_file.empty()) {
    if (absl::Status st = WritePortFile(loaded->config.port_file, (*server)->grpc_port());
        !st.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProgram, std::string(st.message()).c_str());
      return 1;
    }
  }
  std::printf("%s listening on %s\n", kProgram, (*server)->grpc_address().c_str());
  if ((*server)->metrics_port() != 0) {
    std::printf("%s metrics on %s\n", kProgram, (*server)->metrics_address().c_str());
  }
  std::fflush(stdout);
  std::fprintf(stderr,
               "%s: resident memory stays below %.0f MiB (ServerMemoryBound of these settings)\n",
               kProgram,
               static_cast<double>(ServerMemoryBound(
                   loaded->config, static_cast<int>(std::thread::hardware_concurrency()))) /
                   (1 << 20));

  int received = 0;
  for (;;) {
    if (sigwait(&signals, &received) != 0) continue;
    if (received != SIGHUP) break;
    // SIGHUP: read the tokens file and the TLS files again (the server also does when they
    // change). What the server was started without is not mentioned.
    if (!loaded->config.tokens_file.empty()) {
      const absl::Status st = (*server)->ReloadTokens();
      std::fprintf(stderr, "%s: SIGHUP: %s\n", kProgram,
                   st.ok() ? "tokens reloaded" : std::string(st.message()).c_str());
    }
    if (!loaded->config.tls_cert_file.empty()) {
      const absl::Status st = (*server)->ReloadTls();
      std::fprintf(stderr, "%s: SIGHUP: %s\n", kProgram,
                   st.ok() ? "certificate reloaded" : std::string(st.message()).c_str());
    }
  }
  std::fprintf(stderr, "%s: %s received, draining for up to %s\n", kProgram,
               received == SIGTERM ? "SIGTERM" : "SIGINT",
               absl::FormatDuration(loaded->config.shutdown_grace).c_str());
  (*server)->Shutdown(loaded->config.shutdown_grace);
  server->reset();
  std::fprintf(stderr, "%s: stopped\n", kProgram);
  return 0;
}

}  // namespace
}  // namespace leapcache::server

int main(int argc, char** argv) {
  leapcache::server::KeepLargeAllocationsMapped();
  leapcache::base::StopMutexDeadlockDetection();
  return leapcache::server::Run(argc, argv);
}
