// SPDX-License-Identifier: Apache-2.0
// The data plane's recent-rate measure (lib/fetch/recent_rate.h), by tables: each row is a
// transfer's progress (seconds of receiving, bytes by then, sampled as the scheduler does every
// 20 ms) and the rate it must read at the end.
#include <cstdint>
#include <string>
#include <vector>

#include "fetch/recent_rate.h"
#include "test_util.hpp"

namespace td = tensorfetch::detail;

namespace {

// Progress of a flow that sends `burst` bytes at once, then `rate` bytes per second, sampled
// every 20 ms from 20 ms to `until` seconds.
td::RecentRate burst_then(std::uint64_t burst, double rate, double until) {
  td::RecentRate r(1.0);
  for (int tick = 1; tick * 0.02 <= until + 1e-9; ++tick) {
    const double t = tick * 0.02;
    r.add(t, burst + static_cast<std::uint64_t>(rate * t));
  }
  return r;
}

}  // namespace

TEST_CASE("recent rate: a capped flow whose first bytes came at once reads its cap after a window, not its average",
          "[fetch][rate]") {
  struct Row {
    std::string name;
    std::uint64_t burst;
    double rate, until, expect, tolerance;
  };
  const std::vector<Row> rows = {
      // 4 MiB of path buffers at once, then 838,860 B/s (a tenth of 8 MiB/s): the average since
      // the first byte after 1.5 s would be 3.6 MB/s, over four times the cap.
      {"burst then a tenth of the cap, after 1.5 s", 4u << 20, 838860, 1.5, 838860, 1000},
      {"burst then a tenth of the cap, after 10 s", 4u << 20, 838860, 10, 838860, 1000},
      {"a steady flow reads its rate", 0, 8388608, 3, 8388608, 10000},
      // Younger than a window: the average since the first byte (all there is to go on).
      {"younger than a window: the average", 1u << 20, 1000000, 0.5, (1048576 + 500000) / 0.5, 1000},
      {"a flow that stopped for a whole window reads 0", 1u << 20, 0, 3, 0, 1e-9},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      auto r = burst_then(row.burst, row.rate, row.until);
      REQUIRE(r.rate());
      CHECK(*r.rate() == Approx(row.expect).margin(row.tolerance));
    }
  }
}

TEST_CASE("recent rate: no rate before a byte or a moment of receiving; a new attempt starts over", "[fetch][rate]") {
  td::RecentRate r(1.0);
  CHECK_FALSE(r.rate());
  r.add(0, 0);
  CHECK_FALSE(r.rate());
  r.add(0.5, 0);
  CHECK_FALSE(r.rate());
  for (int i = 1; i <= 100; ++i) r.add(i * 0.02, static_cast<std::uint64_t>(i) * 20000);  // 1 MB/s for 2 s
  REQUIRE(r.rate());
  CHECK(*r.rate() == Approx(1e6).epsilon(0.01));
  // A retry: bytes and seconds of the new attempt start from 0; the old record must not mix in.
  r.add(0.2, 40000);
  REQUIRE(r.rate());
  CHECK(*r.rate() == Approx(200000).epsilon(0.01));
}
