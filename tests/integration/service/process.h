// Child processes for the service's integration tests: the real leapcache-server binary (and
// other tools) started with posix_spawn, their stdout read through a pipe.
//
// The environment a child gets is the test's own minus every LEAPCACHE_* variable, plus the
// ones a test passes: a developer's shell settings never leak into a test. Children still
// running when their handle is destroyed are killed (SIGKILL) and reaped.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace leapcache::testing {

using Env = std::map<std::string, std::string>;

// A running child whose stdout is a pipe to us (stderr is inherited, so its messages show in
// the test log).
class Child {
 public:
  // `argv[0]` is the executable's path. `stdin_path`: a file to read as stdin ("" = /dev/null).
  static absl::StatusOr<std::unique_ptr<Child>> Spawn(const std::vector<std::string>& argv,
                                                      const Env& env = {},
                                                      const std::string& stdin_path = "");
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // The next line of stdout without its newline; DEADLINE_EXCEEDED after `timeout`,
  // OUT_OF_RANGE at end of file.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Everything left on stdout until the child closes it (or `timeout`).
  std::string ReadAll(absl::Duration timeout);
  void Signal(int sig);
  // Waits for the exit; the exit status (0..255), or 128 + signal for a killed child;
  // DEADLINE_EXCEEDED if it is still running after `timeout`.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  Child(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  pid_t pid_;
  int stdout_fd_;
  bool reaped_ = false;
  std::string buffered_;
};

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout only
};
// Runs a program to completion (at most `timeout`).
absl::StatusOr<RunResult> RunProgram(const std::vector<std::string>& argv, const Env& env = {},
                                     absl::Duration timeout = absl::Seconds(60),
                                     const std::string& stdin_path = "");

// A leapcache-server child listening on 127.0.0.1 port 0 for gRPC and metrics.
class ServerProcess {
 public:
  // `args`: extra settings (flags) after the listen addresses. Waits until both listeners are
  // reported on stdout.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::vector<std::string>& args,
                                                              const Env& env = {});
  // "127.0.0.1:PORT" of the gRPC listener.
  const std::string& target() const { return target_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  Child& child() { return *child_; }
  // SIGTERM, then the exit status (0 for a clean drain; LeakSanitizer makes it 23 on leaks).
  absl::StatusOr<int> Stop(absl::Duration timeout = absl::Seconds(60));

 private:
  std::unique_ptr<Child> child_;
  std::string target_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

// The path of the server binary under test: $LEAPCACHE_SERVER_BIN if set, else compiled in.
std::string ServerBinary();
// A fresh empty directory under the test's temporary directory.
std::string MakeTempDir(const std::string& name);

}  // namespace leapcache::testing
