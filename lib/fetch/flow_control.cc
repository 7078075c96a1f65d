// SPDX-License-Identifier: Apache-2.0
#include "fetch/flow_control.h"

#include <algorithm>
#include <cmath>

namespace tensorfetch::detail {

FlowControl::FlowControl(FlowSettings settings, bool fixed)
    : s_(settings),
      target_(std::max<std::size_t>(1, fixed ? settings.initial : std::min(settings.initial, settings.ceiling))),
      fixed_(fixed),
      settled_(fixed || target_ >= std::max<std::size_t>(1, settings.ceiling)) {}

void FlowControl::set(double now, std::size_t n, double rate, double gain, const char* why, bool settle) {
  n = std::max<std::size_t>(1, n);
  prev_n_ = target_;
  prev_rate_ = rate;
  target_ = n;
  settled_ = settled_ || settle;
  ++steps_;
  last_ = FlowStep{now, n, rate, gain, why};
  rate_.reset();
  step_start_ = now;
  window_start_.reset();
}

void FlowControl::sample(double now, std::uint64_t bytes, std::size_t receiving, double wait, bool work_bound) {
  if (settled_) {
    // Still measured, for the report and the host's memory.
    if (!window_start_) {
      window_start_ = now;
      window_bytes_ = bytes;
    } else if (now - *window_start_ >= std::max(s_.min_window, wait)) {
      rate_ = static_cast<double>(bytes - window_bytes_) / (now - *window_start_);
    }
    return;
  }
  if (work_bound) {
    // Fewer flows run than the target because the work left is smaller: no use for more. When
    // the last measured step paid (the number grew on evidence), that number is what the next
    // fetch from the host may start at.
    const bool grew = last_ && last_->why == "grow";
    set(now, target_, rate_.value_or(0), 0, "work", true);
    learned_ = grew;
    return;
  }
  // A step is measured once each of its flows receives (its handshakes and first request done),
  // or after `max_settle` (some never will: the measure then counts the ones that do).
  if (!window_start_) {
    const auto enough = static_cast<std::size_t>(std::ceil(s_.settle_share * static_cast<double>(target_)));
    if (receiving < std::max<std::size_t>(1, enough) && now - step_start_ < s_.max_settle) return;
    window_start_ = now;
    window_bytes_ = bytes;
    return;
  }
  const double span = now - *window_start_;
  if (span < std::max(s_.min_window, wait)) return;
  const double rate = static_cast<double>(bytes - window_bytes_) / span;
  rate_ = rate;
  decide(now, rate);
}

void FlowControl::decide(double now, double rate) {
  const std::size_t ceiling = std::max<std::size_t>(1, s_.ceiling);
  if (prev_n_ == 0) {
    // The first measure: nothing to compare with yet. Grow by `first_growth`.
    set(now, std::min(ceiling, target_ * std::max<std::size_t>(2, s_.first_growth)), rate, 0, "grow", false);
    return;
  }
  // The step's marginal gain: the rate it added over what its new flows would carry at the old
  // per-flow rate (1: capped flows, each new one as fast as the old; 0: the link was full).
  const double old_n = static_cast<double>(prev_n_), new_n = static_cast<double>(target_);
  const double expected = prev_rate_ * (new_n - old_n) / old_n;
  const double gain = expected > 0 ? (rate - prev_rate_) / expected : 0;
  // Where the growth ends, the number that fits: the rate measured over the old per-flow rate
  // (a link that fills at 38 capped flows, probed at 32 then 128, settles at 38), within the
  // two steps.
  const auto fits = [&] {
    const double per_flow = prev_rate_ / old_n;
    const double n = per_flow > 0 ? std::ceil(rate / per_flow - 1e-9) : old_n;
    return std::clamp(static_cast<std::size_t>(n), prev_n_, target_);
  };
  if (gain < s_.min_gain) {
    set(now, fits(), rate, gain, "full", true);
    rate_ = rate;
    learned_ = true;
    return;
  }
  if (gain < s_.good_gain || target_ >= ceiling) {
    set(now, target_ >= ceiling && gain >= s_.good_gain ? target_ : fits(), rate, gain,
        target_ >= ceiling ? "ceiling" : "enough", true);
    rate_ = rate;
    learned_ = true;
    return;
  }
  const bool paid_in_full = gain >= 0.8;
  set(now, std::min(ceiling, target_ * (paid_in_full ? 4 : 2)), rate, gain, "grow", false);
}

void FlowControl::backoff(double now) {
  // The user's fixed number stays; one halving per second (a burst of failures is one push).
  if (fixed_ || (last_backoff_ && now - *last_backoff_ < 1.0)) return;
  last_backoff_ = now;
  set(now, std::max<std::size_t>(1, target_ / 2), rate_.value_or(0), 0, "backoff", true);
  learned_ = false;
}

}  // namespace tensorfetch::detail
