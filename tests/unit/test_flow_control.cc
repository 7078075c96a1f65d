// SPDX-License-Identifier: Apache-2.0
// The data plane's choice of how many connections to run (lib/fetch/flow_control.h), by tables:
// each row is a simulated path (a per-flow cap, a link total, a handshake time) on which the
// controller runs for a few seconds, sampled every 20 ms as the scheduler samples it, and the
// number of connections it must end at.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fetch/flow_control.h"
#include "test_util.hpp"

namespace td = tensorfetch::detail;

namespace {

struct Path {
  double per_flow = 0;    // bytes per second one flow can carry (a CDN's cap); 0: no cap
  double link = 0;        // bytes per second all flows together can carry
  double handshake = 0.06;  // seconds from opening a connection to its first byte (3 RTT at 20 ms)
};

// Runs `control` on `path` for `seconds`: flows open when the target grows (receiving after the
// handshake) and the newest close when it shrinks; the bytes are what the receiving flows carry.
void simulate(td::FlowControl& control, const Path& path, double seconds, std::vector<td::FlowStep>* steps = nullptr) {
  std::vector<double> opened;  // per flow: when it opened
  double bytes = 0;
  std::size_t seen_steps = 0;
  for (int tick = 0; tick * 0.02 <= seconds + 1e-9; ++tick) {
    const double now = tick * 0.02;
    while (opened.size() < control.target()) opened.push_back(now);
    while (opened.size() > control.target()) opened.pop_back();
    const auto receiving = static_cast<std::size_t>(
        std::count_if(opened.begin(), opened.end(), [&](double t) { return now - t >= path.handshake; }));
    double rate = path.link;
    if (path.per_flow > 0) rate = std::min(rate, path.per_flow * static_cast<double>(receiving));
    if (receiving == 0) rate = 0;
    bytes += rate * 0.02;
    control.sample(now, static_cast<std::uint64_t>(bytes), receiving, path.handshake, false);
    if (steps && control.steps() != seen_steps && control.last_step()) {
      steps->push_back(*control.last_step());
      seen_steps = control.steps();
    }
  }
}

std::string describe(const std::vector<td::FlowStep>& steps) {
  std::string s;
  for (const auto& st : steps) {
    s += st.why + "->" + std::to_string(st.connections) + "@" + std::to_string(static_cast<int>(st.at * 1000)) + "ms ";
  }
  return s;
}

}  // namespace

TEST_CASE("flow control: the connections grow while new flows raise the rate, and stop where they do not",
          "[fetch][flows]") {
  constexpr double MiB = 1 << 20;
  struct Row {
    std::string name;
    Path path;
    std::size_t initial, ceiling;
    std::size_t expect;  // connections at the end
    double by;           // ...reached within this many seconds
  };
  const std::vector<Row> rows = {
      // A CDN capping each flow at 8 MiB/s on a fat link: every step pays, up to the ceiling.
      {"capped flows, fat link: up to the ceiling", {8 * MiB, 10000 * MiB}, 16, 128, 128, 0.7},
      {"capped at 2 MiB/s: up to the ceiling", {2 * MiB, 10000 * MiB}, 16, 128, 128, 0.7},
      // One flow fills the link: the first growth brings nothing and is taken back.
      {"uncapped flows on a full link: back to the start", {0, 500 * MiB}, 16, 128, 16, 0.5},
      {"one flow fills the link: back to one", {0, 500 * MiB}, 1, 128, 1, 0.5},
      // 8 MiB/s flows on a 300 MiB/s link: 16 carry 128, 32 carry 256 (paid in full: x4), 128
      // carry 300 (almost nothing more): the growth ends where 300 fits 8 MiB/s flows, at 38.
      {"capped flows on a link that fills at 38: settles at 38", {8 * MiB, 300 * MiB}, 16, 128, 38, 0.8},
      {"a low ceiling is kept", {8 * MiB, 10000 * MiB}, 16, 48, 48, 0.8},
      {"a remembered number at the ceiling stays", {8 * MiB, 10000 * MiB}, 128, 128, 128, 0.1},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      td::FlowSettings s;
      s.initial = row.initial;
      s.ceiling = row.ceiling;
      td::FlowControl control(s, false);
      std::vector<td::FlowStep> steps;
      simulate(control, row.path, row.by, &steps);
      INFO("steps: " << describe(steps));
      CHECK(control.target() == row.expect);
      CHECK(control.settled());
      // Never beyond the ceiling at any step.
      for (const auto& st : steps) CHECK(st.connections <= row.ceiling);
    }
  }
}

TEST_CASE("flow control: what it learned is worth remembering only when measured", "[fetch][flows]") {
  td::FlowSettings s;
  td::FlowControl capped(s, false);
  simulate(capped, {8 << 20, 1e10}, 1.0);
  CHECK(capped.target() == 128);
  CHECK(capped.learned());
  REQUIRE(capped.rate());
  CHECK(*capped.rate() == Approx(128.0 * (8 << 20)).epsilon(0.05));

  td::FlowControl full(s, false);
  simulate(full, {0, 500 << 20}, 1.0);
  CHECK(full.target() == td::FlowSettings{}.initial);
  CHECK(full.learned());
  CHECK(full.last_step()->why == "full");

  td::FlowControl fixed(s, true);
  simulate(fixed, {8 << 20, 1e10}, 1.0);
  CHECK(fixed.target() == td::FlowSettings{}.initial);
  CHECK_FALSE(fixed.learned());
  CHECK(fixed.steps() == 0);
}

TEST_CASE("flow control: the server pushing back halves the connections, once a second at most; fixed stays",
          "[fetch][flows]") {
  td::FlowSettings s;
  s.initial = 32;
  td::FlowControl c(s, false);
  c.backoff(0.5);
  CHECK(c.target() == 16);
  CHECK(c.settled());
  CHECK(c.last_step()->why == "backoff");
  c.backoff(0.9);  // the same burst of failures
  CHECK(c.target() == 16);
  c.backoff(1.6);
  CHECK(c.target() == 8);
  for (double t = 3; t < 10; t += 1.1) c.backoff(t);
  CHECK(c.target() == 1);  // never 0
  // No growth after a backoff, however well flows then do.
  simulate(c, {8 << 20, 1e10}, 1.0);
  CHECK(c.target() == 1);
  CHECK_FALSE(c.learned());

  td::FlowControl fixed(s, true);
  fixed.backoff(0.5);
  CHECK(fixed.target() == 32);
}

TEST_CASE("flow control: no growth when the work left would not keep more flows busy", "[fetch][flows]") {
  td::FlowSettings s;
  td::FlowControl c(s, false);
  c.sample(0.0, 0, 0, 0.06, false);
  c.sample(0.1, 1000, 16, 0.06, true);
  CHECK(c.target() == td::FlowSettings{}.initial);
  CHECK(c.settled());
  CHECK_FALSE(c.learned());
  CHECK(c.last_step()->why == "work");
}

TEST_CASE("flow control: flows that never receive do not stall the decision past max_settle", "[fetch][flows]") {
  td::FlowSettings s;
  s.initial = 4;
  td::FlowControl c(s, false);
  // Only 2 of the 4 flows ever receive, at 8 MiB/s each.
  double bytes = 0;
  for (int tick = 0; tick < 100; ++tick) {
    const double now = tick * 0.02;
    bytes += 2.0 * (8 << 20) * 0.02;
    c.sample(now, static_cast<std::uint64_t>(bytes), 2, 0.06, false);
  }
  CHECK(c.steps() >= 1);  // measured after max_settle (1 s), not never
}

TEST_CASE("flow control: a number reached by a step that paid is learned even when the work then runs out",
          "[fetch][flows]") {
  td::FlowSettings s;
  s.initial = 4;
  td::FlowControl c(s, false);
  // 4 capped flows, measured: the first growth (to 8).
  double bytes = 0;
  double now = 0;
  for (; c.steps() == 0 && now < 2; now += 0.02) {
    bytes += 4.0 * (2 << 20) * 0.02;
    c.sample(now, static_cast<std::uint64_t>(bytes), 4, 0.01, false);
  }
  REQUIRE(c.target() == 8);
  c.sample(now, static_cast<std::uint64_t>(bytes), 6, 0.01, true);  // the work ran out
  CHECK(c.settled());
  CHECK(c.learned());
  CHECK(c.target() == 8);
}
