#include "tests/integration/service/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace leapcache::testing {
namespace {

std::vector<std::string> ChildEnvironment(const Env& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "LEAPCACHE_")) env.emplace_back(*e);
  }
  for (const auto& [k, v] : extra) env.push_back(absl::StrCat(k, "=", v));
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The port at the end of "... on HOST:PORT".
absl::StatusOr<int> PortOf(const std::string& line) {
  int port = 0;
  const size_t colon = line.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(line.substr(colon + 1), &port)) {
    return absl::InternalError(absl::StrCat("no port in \"", line, "\""));
  }
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Child>> Child::Spawn(const std::vector<std::string>& argv,
                                                    const Env& env, const std::string& stdin_path) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(
      &actions, STDIN_FILENO, stdin_path.empty() ? "/dev/null" : stdin_path.c_str(), O_RDONLY, 0);
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = ChildEnvironment(env);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(envs);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, c_args.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return std::unique_ptr<Child>(new Child(pid, fds[0]));
}

Child::~Child() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  close(stdout_fd_);
}

absl::StatusOr<std::string> Child::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (const size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return absl::DeadlineExceededError("no line on the child's stdout in time");
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n == 0) return absl::OutOfRangeError("the child closed its stdout");
    if (n < 0 && errno != EINTR) return absl::InternalError("read failed");
    if (n > 0) buffered_.append(buf, static_cast<size_t>(n));
  }
}

std::string Child::ReadAll(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string out = std::move(buffered_);
  buffered_.clear();
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return out;
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n == 0) return out;
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
}

void Child::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

absl::StatusOr<int> Child::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!reaped_) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("the child is still running");
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::FailedPreconditionError("already reaped");
}

absl::StatusOr<RunResult> RunProgram(const std::vector<std::string>& argv, const Env& env,
                                     absl::Duration timeout, const std::string& stdin_path) {
  absl::StatusOr<std::unique_ptr<Child>> child = Child::Spawn(argv, env, stdin_path);
  if (!child.ok()) return child.status();
  RunResult r;
  r.output = (*child)->ReadAll(timeout);
  absl::StatusOr<int> code = (*child)->Wait(timeout);
  if (!code.ok()) return code.status();
  r.exit_code = *code;
  return r;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& args, const Env& env) {
  std::vector<std::string> argv = {ServerBinary(), "--listen=127.0.0.1:0",
                                   "--metrics-listen=127.0.0.1:0"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<Child>> child = Child::Spawn(argv, env);
  if (!child.ok()) return child.status();
  auto server = std::unique_ptr<ServerProcess>(new ServerProcess());
  server->child_ = std::move(child).value();
  // Sanitizer builds start slowly on a busy machine.
  const absl::Duration timeout = absl::Seconds(60);
  for (int lines = 0; lines < 2; ++lines) {
    absl::StatusOr<std::string> line = server->child_->ReadLine(timeout);
    if (!line.ok()) {
      return absl::Status(line.status().code(), absl::StrCat("leapcache-server did not start: ",
                                                             line.status().message()));
    }
    absl::StatusOr<int> port = PortOf(*line);
    if (!port.ok()) return port.status();
    if (absl::StrContains(*line, " listening on ")) {
      server->grpc_port_ = *port;
    } else if (absl::StrContains(*line, " metrics on ")) {
      server->metrics_port_ = *port;
    }
  }
  if (server->grpc_port_ == 0 || server->metrics_port_ == 0) {
    return absl::InternalError("leapcache-server did not report both ports");
  }
  server->target_ = absl::StrCat("127.0.0.1:", server->grpc_port_);
  return server;
}

absl::StatusOr<int> ServerProcess::Stop(absl::Duration timeout) {
  child_->Signal(SIGTERM);
  return child_->Wait(timeout);
}

std::string ServerBinary() {
  // Test binaries shipped to another machine (a GPU host) find the server there.
  const char* moved = std::getenv("LEAPCACHE_SERVER_BIN");
  return moved != nullptr && moved[0] != '\0' ? moved : LEAPCACHE_SERVER_BIN;
}

std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base != nullptr ? base : "/tmp") /
                              absl::StrCat("leapcache-", name, "-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace leapcache::testing
