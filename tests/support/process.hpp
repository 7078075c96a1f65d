// SPDX-License-Identifier: Apache-2.0
// Shared by every test suite: child processes that run in the background (to send them
// signals, read their output from a FIFO, time how long they take to exit), and the
// environment they get.
// Plain C++ (no Catch2): failures are thrown as std::runtime_error.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tftest {

/// Where a child's standard streams go: a path (opened by the child; created and truncated
/// for output), or /dev/null when empty.
struct ChildIo {
  std::string stdin_path;
  std::string stdout_path;
  std::string stderr_path;
};

/// A child process running in the background. Killed (SIGKILL) and reaped on destruction if
/// still running.
class Child {
 public:
  /// Starts `program` with `args` (argv[1..]) and `env` (every "NAME=value"; empty: ours).
  Child(const std::string& program, const std::vector<std::string>& args, const ChildIo& io,
        const std::vector<std::string>& env = {});
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  /// Sends a signal (no-op once reaped).
  void signal(int sig) const;
  /// Waits at most `timeout` for the exit; returns the status (exit code, or 128 + signal), or
  /// nothing when it is still running.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  /// Waits for the exit; returns the exit code, or 128 + signal.
  int wait();
  /// True while the child has not been reaped and has not exited.
  bool running();

 private:
  std::optional<int> reap(bool block);
  pid_t pid_ = -1;
  std::optional<int> status_;
};

/// The value of an environment variable that `meson test` sets (TENSORFETCH_BIN, ...); throws
/// std::runtime_error naming it when it is unset or empty.
std::string required_env(const char* name);

/// Our environment without the variables whose names start with one of `drop`, plus `add`.
std::vector<std::string> environment_with(const std::vector<std::string>& drop, const std::vector<std::string>& add);

}  // namespace tftest
