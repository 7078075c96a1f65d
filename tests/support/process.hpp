// SPDX-License-Identifier: Apache-2.0
// Shared by test suites: temporary directories and child processes that run in the background
// (to send them signals, read their output from a FIFO, time how long they take to exit).
// Plain C++ (no Catch2): failures are thrown as std::runtime_error.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tftest {

namespace fs = std::filesystem;

/// A fresh directory from mkdtemp under $TMPDIR (or /tmp), removed recursively on destruction
/// (read-only entries, such as complete cache blobs, included).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "tensorfetch-test");
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }
  [[nodiscard]] fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

/// Whole file as bytes ("" when it cannot be read).
std::string slurp(const fs::path& path);

/// Creates (or replaces) a file with these bytes, creating its directory.
void spit(const fs::path& path, std::string_view bytes);

/// Files under `dir` (recursively) whose name contains ".tmp-": what an interrupted atomic
/// write would leave behind.
std::vector<fs::path> temp_files(const fs::path& dir);

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

/// Our environment without the variables whose names start with one of `drop`, plus `add`.
std::vector<std::string> environment_with(const std::vector<std::string>& drop, const std::vector<std::string>& add);

}  // namespace tftest
