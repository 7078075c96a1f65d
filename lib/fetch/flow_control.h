// SPDX-License-Identifier: Apache-2.0
// Private: how many data connections a fetch runs, decided while it runs. Pure (the caller gives
// the clock and the byte counts), so every rule is tested by tables (tests/unit/test_flow_control.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace tensorfetch::detail {

/// The rules of `FlowControl`. A plain value.
struct FlowSettings {
  /// Connections at the start (a host's remembered good number, else this).
  std::size_t initial = 32;
  /// Most connections toward the host. 128: on a CDN that caps each TCP flow, aria2c at its best
  /// settings (`-x16 -s16 -j4 -k1M`) runs 64 flows on a 4-file checkpoint; beating it needs more
  /// of them, and 128 flows at 2 MiB/s each still fill a 2 Gbit/s link. A server that can carry
  /// no more stops the growth long before (see `FlowControl`).
  std::size_t ceiling = 128;
  /// The first growth multiplies by this; later ones by 2 (by 4 while each step paid fully).
  std::size_t first_growth = 2;
  /// A step that brought less than this share of the rate its new flows would carry at the
  /// flows' earlier rate ends the growth (the link was full), at the number the measured rate
  /// fills at the earlier per-flow rate (at least the step before).
  double min_gain = 0.15;
  /// A step that brought less than this share (but at least `min_gain`) ends the growth, at the
  /// number that fits as above.
  double good_gain = 0.5;
  /// Shortest measurement of a step, in seconds (also: at least one first-byte wait, about the
  /// round trip plus the server's time, which a new flow's TCP slow start is counted in).
  double min_window = 0.06;
  /// A step is measured once this share of its flows receive (the rest may be slow to connect).
  double settle_share = 0.75;
  /// Longest wait for a step's new flows to receive their first byte before measuring anyway.
  double max_settle = 1.0;
};

/// What `FlowControl` decided last, for the trace and the report. A plain value.
struct FlowStep {
  double at = 0;                  ///< seconds since the fetch began
  std::size_t connections = 0;    ///< the target from then on
  double rate = 0;                ///< aggregate bytes per second measured at the step before
  double gain = 0;                ///< the step's marginal gain (see FlowSettings::min_gain)
  std::string why;                ///< "grow", "full", "enough", "ceiling", "backoff", "work"
};

/// Decides the number of data connections of a fetch from the aggregate rate it measures: a
/// multiplicative probe. It starts at `initial`, measures the rate once every flow of the step
/// receives, then multiplies the connections (`first_growth`, then 2, or 4 while every step paid
/// in full) as long as the last step raised the aggregate rate by at least `good_gain` of what
/// its new flows would carry at the old per-flow rate (capped flows: a CDN); a step that brought
/// almost nothing (`min_gain`: one flow already filled the link) goes back to the step before.
/// It stops at `ceiling`, when the work left cannot keep more flows busy, and shrinks by half
/// (and stops growing) when the server pushes back: a 429/503, a refused or reset connection.
/// Not thread-safe; one fetch's scheduler drives it.
class FlowControl {
 public:
  /// `fixed`: the caller chose the number (`--connections`): `initial` always, no probing.
  FlowControl(FlowSettings settings, bool fixed);

  /// Called at every scheduling tick: `now` seconds since the fetch began, `bytes` received by
  /// all its transfers so far, `receiving` transfers that have received a first byte and hold a
  /// slot, `wait` the typical first-byte wait (seconds, 0 when unknown), `work_bound` true when
  /// fewer transfers run than the target because no work is left to start.
  void sample(double now, std::uint64_t bytes, std::size_t receiving, double wait, bool work_bound);

  /// The server pushed back (a retry after a 429/503, a refused, reset or stalled connection):
  /// the target halves (at least 1; once a second at most) and stays there. Not when fixed.
  void backoff(double now);

  /// Connections to run now.
  [[nodiscard]] std::size_t target() const noexcept { return target_; }
  /// True once the number will not grow any more (fixed, a full link, the ceiling, a backoff).
  [[nodiscard]] bool settled() const noexcept { return settled_; }
  /// True when the number was found by measuring (not fixed, not cut short by a backoff, not
  /// stopped by the work running out before a step paid): worth remembering for the host.
  [[nodiscard]] bool learned() const noexcept { return learned_; }
  /// The aggregate rate measured at the current target, if any (bytes per second).
  [[nodiscard]] std::optional<double> rate() const noexcept { return rate_; }
  /// The last decision (nullopt before the first).
  [[nodiscard]] const std::optional<FlowStep>& last_step() const noexcept { return last_; }
  /// Decisions made so far.
  [[nodiscard]] std::size_t steps() const noexcept { return steps_; }

 private:
  void decide(double now, double rate);
  void set(double now, std::size_t n, double rate, double gain, const char* why, bool settle);

  FlowSettings s_;
  std::size_t target_;
  bool fixed_;
  bool settled_;
  std::optional<double> last_backoff_;
  bool learned_ = false;
  std::size_t steps_ = 0;
  std::optional<FlowStep> last_;
  std::optional<double> rate_;       // measured at target_
  std::size_t prev_n_ = 0;           // the step before, and its rate
  double prev_rate_ = 0;
  // The measurement of the current step: starts once every flow receives (or max_settle).
  double step_start_ = 0;
  std::optional<double> window_start_;
  std::uint64_t window_bytes_ = 0;
};

}  // namespace tensorfetch::detail
