// SPDX-License-Identifier: Apache-2.0
#include "base/trace.h"

#include <map>
#include <mutex>
#include <set>

namespace tensorfetch::detail::trace {

namespace internal {
std::atomic<bool> recording{false};
}  // namespace internal

namespace {

struct Store {
  std::mutex mutex;
  std::vector<Event> events;
  std::map<std::uint32_t, std::string> names;
  Clock::time_point origin{};
  std::atomic<std::uint32_t> next_thread{1};
  std::set<std::uint32_t> lanes_used;
};

Store& store() {
  static Store* s = new Store;  // never destroyed: threads may record while the process exits
  return *s;
}

// Events kept at most (a trace of a huge fetch stays bounded: about 100 MB of JSON).
constexpr std::size_t kMaxEvents = 1'000'000;

}  // namespace

std::uint32_t thread_track() {
  thread_local std::uint32_t track = 0;
  if (track == 0) track = store().next_thread.fetch_add(1);
  return track;
}

void add(Event event) {
  if (!on()) return;
  Store& s = store();
  std::lock_guard lock(s.mutex);
  if (!internal::recording.load(std::memory_order_relaxed) || s.events.size() >= kMaxEvents) return;
  s.events.push_back(std::move(event));
}

void span(std::string name, std::string category, Clock::time_point start,
          std::vector<std::pair<std::string, std::string>> args) {
  if (!on()) return;
  add(Event{std::move(name), std::move(category), 'X', start, Clock::now(), thread_track(), std::move(args)});
}

void instant(std::string name, std::string category, std::vector<std::pair<std::string, std::string>> args) {
  if (!on()) return;
  const auto now = Clock::now();
  add(Event{std::move(name), std::move(category), 'i', now, now, thread_track(), std::move(args)});
}

void name_track(std::uint32_t track, std::string name) {
  if (!on()) return;
  Store& s = store();
  std::lock_guard lock(s.mutex);
  s.names[track] = std::move(name);
}

std::uint32_t acquire_lane() {
  if (!on()) return 0;
  Store& s = store();
  std::lock_guard lock(s.mutex);
  std::uint32_t n = 1;
  while (s.lanes_used.count(n)) ++n;
  s.lanes_used.insert(n);
  const std::uint32_t track = kConnectionTracks + n;
  if (!s.names.count(track)) s.names[track] = "connection " + std::to_string(n);
  return track;
}

void release_lane(std::uint32_t lane) {
  if (lane == 0) return;
  Store& s = store();
  std::lock_guard lock(s.mutex);
  s.lanes_used.erase(lane - kConnectionTracks);
}

bool begin() {
  Store& s = store();
  std::lock_guard lock(s.mutex);
  if (internal::recording.load()) return false;
  s.events.clear();
  s.names.clear();
  s.lanes_used.clear();
  s.origin = Clock::now();
  internal::recording.store(true);
  return true;
}

Recording end() {
  Store& s = store();
  std::lock_guard lock(s.mutex);
  internal::recording.store(false);
  Recording r;
  r.events = std::move(s.events);
  s.events.clear();
  for (auto& [track, name] : s.names) r.track_names.emplace_back(track, std::move(name));
  s.names.clear();
  r.origin = s.origin;
  return r;
}

}  // namespace tensorfetch::detail::trace
