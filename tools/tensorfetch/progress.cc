// SPDX-License-Identifier: Apache-2.0
#include "progress.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "commands.h"
#include "escape.h"

namespace tensorfetch::cli {

namespace {

// Created before any signal handler can run, alive until exit.
const CancelToken g_interrupt = CancelToken::make();
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");
bool g_drawn = false;

// Async-signal-safe: two lock-free atomic stores. SA_RESETHAND restores the default action, so
// a second signal ends the process at once.
extern "C" void on_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
  g_interrupt.cancel();
}

std::string duration(double s) {
  if (s < 0 || s > 359999) return "--:--";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

}  // namespace

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::function<bool(const FetchProgress&)> progress_callback(bool quiet) {
  const bool tty = !quiet && ::isatty(STDERR_FILENO) == 1;
  return [tty](const FetchProgress& p) {
    if (tty) {
      const double rate = p.seconds > 0 ? static_cast<double>(p.bytes_done) / p.seconds : 0;
      const double left = static_cast<double>(p.bytes_total - std::min(p.bytes_done, p.bytes_total));
      const double pct = p.bytes_total ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 100.0;
      std::string line = "\r  " + human_bytes(static_cast<double>(p.bytes_done)) + " / " +
                         human_bytes(static_cast<double>(p.bytes_total));
      char pbuf[16];
      std::snprintf(pbuf, sizeof pbuf, "  %5.1f%%", pct);
      line += pbuf;
      line += "  " + human_bytes(rate) + "/s  ETA " + (rate > 0 ? duration(left / rate) : std::string("--:--"));
      line += "  files " + std::to_string(p.files_done) + "/" + std::to_string(p.files_total);
      if (p.bytes_cached) line += "  (" + human_bytes(static_cast<double>(p.bytes_cached)) + " cached)";
      line += "\x1b[K";
      std::fputs(line.c_str(), stderr);
      std::fflush(stderr);
      g_drawn = true;
    }
    return !g_interrupt.cancelled();
  };
}

ServerWaitCallback wait_notice() {
  return [](const ServerWait& w) {
    using Clock = std::chrono::steady_clock;
    static Clock::time_point told_until{};
    const auto until = Clock::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
    if (until < told_until + std::chrono::seconds(2)) return;  // the same wait, from another request
    told_until = until;
    if (g_drawn) std::fputs("\n", stderr);
    g_drawn = false;
    const std::string who = w.url.substr(0, w.url.find('/', w.url.find("://") + 3));
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f", w.seconds);
    std::fprintf(stderr, "tensorfetch: %s answered HTTP %d %s%s: waiting %s s before retrying (Ctrl-C to stop)\n",
                 escape_text(who).c_str(), w.status, w.status == 429 ? "(rate limited)" : "(unavailable)",
                 w.detail.empty() ? "" : (" " + escape_text(w.detail)).c_str(), secs);
    std::fflush(stderr);
  };
}

StaleCacheCallback stale_cache_notice() {
  return [](const StaleCache& s) {
    if (g_drawn) std::fputs("\n", stderr);
    g_drawn = false;
    std::fprintf(stderr, "tensorfetch: warning: %s\n", escape_text(s.message).c_str());
    std::fflush(stderr);
  };
}

void finish_progress() {
  if (g_drawn) std::fputs("\n", stderr);
  g_drawn = false;
}

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  // No SA_RESTART: a blocking call (open of a FIFO, a write) returns EINTR and sees the token.
  sa.sa_flags = SA_RESETHAND;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

const CancelToken& interrupt_token() { return g_interrupt; }

int interrupt_signal() { return g_signal.load(); }

bool interrupted() { return g_signal.load() != 0; }

int exit_status(int code) {
  const int sig = interrupt_signal();
  return code != 0 && sig != 0 ? 128 + sig : code;
}

Result<void> check_output_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) return fail(ErrorCode::Io, dir + ": " + ec.message());
  if (fs::exists(p, ec) && !fs::is_directory(p, ec)) return fail(ErrorCode::Io, dir + ": exists and is not a directory");
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec)) return fail(ErrorCode::Io, dir + ": cannot be created (" + p.string() + " is not a directory)");
  if (::access(p.c_str(), W_OK | X_OK) != 0) {
    return fail(ErrorCode::Io, dir + ": cannot be created or written (" + p.string() + ": " + std::strerror(errno) + ")");
  }
  return {};
}

}  // namespace tensorfetch::cli
