// SPDX-License-Identifier: Apache-2.0
#include "checkpoint/arrivals.h"

#include <algorithm>
#include <chrono>

namespace tensorfetch::detail {

namespace {

bool covers_all(const RangeSet& set, std::span<const ByteRange> needed) {
  return std::all_of(needed.begin(), needed.end(), [&](const ByteRange& r) { return covers(set, r); });
}

}  // namespace

void Arrivals::track(std::size_t file, RangeSet present) {
  std::lock_guard g(mutex_);
  written_[file] = std::move(present);
}

void Arrivals::add(std::size_t file, ByteRange range) {
  {
    std::lock_guard g(mutex_);
    auto it = written_.find(file);
    if (it == written_.end()) return;
    add_range(it->second, range);
  }
  changed_.notify_all();
}

void Arrivals::finish(bool ok) {
  {
    std::lock_guard g(mutex_);
    ended_ = true;
    ok_ = ok;
  }
  changed_.notify_all();
}

bool Arrivals::here(std::size_t file, std::span<const ByteRange> needed) {
  std::lock_guard g(mutex_);
  auto it = written_.find(file);
  return it == written_.end() || ended_ || covers_all(it->second, needed);
}

Arrivals::Outcome Arrivals::wait(std::size_t file, std::span<const ByteRange> needed, const std::function<bool()>& stop,
                                 long poll_ms) {
  std::unique_lock lock(mutex_);
  auto it = written_.find(file);
  if (it == written_.end()) return Outcome::NotTracked;
  const RangeSet& written = it->second;  // map nodes stay put
  while (true) {
    if (covers_all(written, needed)) return Outcome::Here;
    if (ended_) return ok_ ? Outcome::FetchEnded : Outcome::FetchFailed;
    if (stop && stop()) return Outcome::Stopped;
    changed_.wait_for(lock, std::chrono::milliseconds(poll_ms));
  }
}

bool Arrivals::wait_end(const std::function<bool()>& stop, long poll_ms) {
  std::unique_lock lock(mutex_);
  while (true) {
    if (ended_) return ok_;
    if (stop && stop()) return false;
    changed_.wait_for(lock, std::chrono::milliseconds(poll_ms));
  }
}

}  // namespace tensorfetch::detail
