// SPDX-License-Identifier: Apache-2.0
// Private: the timeline a trace records (see include/tensorfetch/trace.hpp): every layer adds
// spans of its work here while a trace is on; the checkpoint layer writes them out. Recording
// is one relaxed atomic load when no trace is on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tensorfetch::detail::trace {

using Clock = std::chrono::steady_clock;

/// One event of the timeline. A plain value.
struct Event {
  std::string name;                                       ///< what happened
  std::string category;                                   ///< open, http, fetch, commit, write, cli, flows
  char phase = 'X';                                       ///< 'X' a span, 'i' an instant, 'C' a counter
  Clock::time_point start{};                              ///< when it began
  Clock::time_point end{};                                ///< when it ended (spans)
  std::uint32_t track = 0;                                ///< the row it is drawn on (see track_name)
  std::vector<std::pair<std::string, std::string>> args;  ///< details shown with it (text)
};

/// Rows are threads (`thread_track()`, from 1) or connections (`kConnectionTracks` + lane).
inline constexpr std::uint32_t kConnectionTracks = 1000;

namespace internal {
extern std::atomic<bool> recording;
}  // namespace internal

/// True while a trace is recorded.
[[nodiscard]] inline bool on() noexcept { return internal::recording.load(std::memory_order_relaxed); }

/// The calling thread's row (1 for the first thread that asked, and so on).
[[nodiscard]] std::uint32_t thread_track();

/// Adds an event (ignored when no trace is on). Thread-safe.
void add(Event event);

/// A span from `start` to now on the calling thread's row (when a trace is on).
void span(std::string name, std::string category, Clock::time_point start,
          std::vector<std::pair<std::string, std::string>> args = {});

/// An instant event now on the calling thread's row (when a trace is on).
void instant(std::string name, std::string category, std::vector<std::pair<std::string, std::string>> args = {});

/// Names a row (a thread's or a connection's); the last name given wins.
void name_track(std::uint32_t track, std::string name);

/// A connection's row for an HTTP attempt: the lowest free one (`kConnectionTracks` + n, named
/// "connection n" on first use), so a connection reused for request after request stays on its
/// row. 0 when no trace is on. Thread-safe.
[[nodiscard]] std::uint32_t acquire_lane();

/// Frees a row `acquire_lane` gave (0 is ignored).
void release_lane(std::uint32_t lane);

/// Starts recording (false when a trace is already on); the timeline's zero is now.
[[nodiscard]] bool begin();

/// What `end` hands over: the events, the rows' names and the timeline's zero.
struct Recording {
  std::vector<Event> events;
  std::vector<std::pair<std::uint32_t, std::string>> track_names;
  Clock::time_point origin{};
};

/// Stops recording and hands over what was recorded.
[[nodiscard]] Recording end();

/// Times a scope as a span on the calling thread's row (when a trace is on at its start).
class Scope {
 public:
  Scope(const char* name, const char* category) : name_(name), category_(category), on_(on()) {
    if (on_) start_ = Clock::now();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope() {
    if (on_) span(name_, category_, start_, std::move(args_));
  }
  /// Adds a detail shown with the span.
  void arg(std::string key, std::string value) {
    if (on_) args_.emplace_back(std::move(key), std::move(value));
  }

 private:
  const char* name_;
  const char* category_;
  bool on_;
  Clock::time_point start_{};
  std::vector<std::pair<std::string, std::string>> args_;
};

}  // namespace tensorfetch::detail::trace
