// SPDX-License-Identifier: Apache-2.0
// Private: a transfer's rate over its recent past, for the data plane's straggler rules. Pure
// (the caller gives the clock), so every rule is tested by tables.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

namespace tensorfetch::detail {

/// The rate of one transfer attempt over its last `window` seconds of receiving (over its whole
/// life while younger than that). A flow's first bytes fill the socket buffers along the path at
/// the link's speed (and nginx's rate limit lets a connection have a second's worth at once), so
/// the average since the first byte makes a capped flow look fast for seconds, and its tail is
/// cut too late; the recent rate sees it as it is.
class RecentRate {
 public:
  /// `window`: how far back the rate looks, in seconds (> 0).
  explicit RecentRate(double window = 1.0) : window_(window) {}

  /// Records that `bytes` had arrived after `seconds` of receiving. Bytes or seconds going back
  /// mean a new attempt (a retry, a resume): the record starts over from this sample.
  void add(double seconds, std::uint64_t bytes) {
    if (!seen_.empty() && (bytes < seen_.back().bytes || seconds < seen_.back().seconds)) seen_.clear();
    seen_.push_back(Sample{seconds, bytes});
    // Keep one sample at least a window old, none older.
    while (seen_.size() > 2 && seconds - seen_[1].seconds >= window_) seen_.pop_front();
  }

  /// Bytes per second over the last window, once the attempt has received for a whole window
  /// and the samples span at least half of one; before that, the average since the first byte
  /// (nothing before any byte or any time). A window with no new byte is a rate of 0.
  [[nodiscard]] std::optional<double> rate() const {
    if (seen_.empty()) return std::nullopt;
    const Sample& last = seen_.back();
    if (last.seconds <= 0 || last.bytes == 0) return std::nullopt;
    const Sample& from = seen_.front();
    const double span = last.seconds - from.seconds;
    if (last.seconds >= window_ && span >= window_ / 2) return static_cast<double>(last.bytes - from.bytes) / span;
    return static_cast<double>(last.bytes) / last.seconds;
  }

 private:
  struct Sample {
    double seconds = 0;       // of receiving, when taken
    std::uint64_t bytes = 0;  // arrived by then
  };
  double window_;
  std::deque<Sample> seen_;
};

}  // namespace tensorfetch::detail
