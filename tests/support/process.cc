// SPDX-License-Identifier: Apache-2.0
#include "process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace tftest {

Child::Child(const std::string& program, const std::vector<std::string>& args, const ChildIo& io,
             const std::vector<std::string>& env) {
  std::vector<std::string> argv_storage{program};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = env;
  std::vector<char*> envp;
  for (auto& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string in = io.stdin_path.empty() ? "/dev/null" : io.stdin_path;
  const std::string out = io.stdout_path.empty() ? "/dev/null" : io.stdout_path;
  const std::string err = io.stderr_path.empty() ? "/dev/null" : io.stderr_path;
  posix_spawn_file_actions_addopen(&actions, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = ::posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(),
                               env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn " + program + ": " + std::strerror(rc));
}

Child::~Child() {
  if (!status_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    reap(true);
  }
}

void Child::signal(int sig) const {
  if (!status_ && pid_ > 0) ::kill(pid_, sig);
}

std::optional<int> Child::reap(bool block) {
  if (status_) return status_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return std::nullopt;
  if (WIFEXITED(status)) status_ = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) status_ = 128 + WTERMSIG(status);
  else status_ = -1;
  return status_;
}

std::optional<int> Child::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto s = reap(false)) return s;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

int Child::wait() { return *reap(true); }

bool Child::running() { return !reap(false).has_value(); }

std::string required_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    throw std::runtime_error(std::string(name) + " is not set (run the tests through meson test)");
  }
  return v;
}

std::vector<std::string> environment_with(const std::vector<std::string>& drop, const std::vector<std::string>& add) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v(*e);
    bool dropped = false;
    for (const auto& d : drop) dropped = dropped || v.starts_with(d);
    if (!dropped) out.emplace_back(v);
  }
  out.insert(out.end(), add.begin(), add.end());
  return out;
}

}  // namespace tftest
