// SPDX-License-Identifier: Apache-2.0
// The mount binding's pure parts (lib/mount): the sequential-read detector (Readahead: a window
// that starts after a trigger, grows with sequential reads and resets on a seek), the
// tensor-aware planning of what a read fetches (tensor_ranges_for), and the fetch queue (one
// worker batching requests; concurrent readers of the same bytes share one fetch; errors and
// stop reach every waiter). Tables with one named DYNAMIC_SECTION per row.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "mount/fetch_queue.h"
#include "mount/readahead.h"
#include "test_util.hpp"

namespace tf = tensorfetch;
namespace tmo = tensorfetch::mount;
using tf::ByteRange;
using Ranges = std::vector<ByteRange>;

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;

ByteRange R(std::uint64_t offset, std::uint64_t length) { return ByteRange{offset, length}; }

}  // namespace

TEST_CASE("Readahead: the window starts after the trigger, doubles with sequential reads, resets on a seek",
          "[mount][readahead]") {
  struct Step {
    ByteRange read;
    ByteRange ahead;          // expected read-ahead (length 0: none)
    std::uint64_t window;     // expected window after the read
  };
  struct Row {
    const char* name;
    std::vector<Step> steps;
  };
  // trigger 1 MiB, initial 1 MiB, max 4 MiB, file of 100 MiB
  const std::vector<Row> rows = {
      {"the first read is never sequential", {{R(0, 128 * KiB), R(0, 0), 0}}},
      {"reads below the trigger fetch nothing ahead",
       {{R(0, 512 * KiB), R(0, 0), 0}, {R(512 * KiB, 256 * KiB), R(0, 0), 0}}},
      {"at the trigger: a window of `initial` after the read, then doubling to max, each range after the last",
       {{R(0, 512 * KiB), R(0, 0), 0},
        {R(512 * KiB, 512 * KiB), R(1 * MiB, 1 * MiB), 1 * MiB},
        {R(1 * MiB, 512 * KiB), R(2 * MiB, 512 * KiB + 1 * MiB), 2 * MiB},
        {R(1536 * KiB, 512 * KiB), R(3584 * KiB, 2560 * KiB), 4 * MiB},
        {R(2 * MiB, 512 * KiB), R(6 * MiB, 512 * KiB), 4 * MiB}}},
      {"a seek backwards resets the window and the run",
       {{R(0, 1 * MiB), R(0, 0), 0},
        {R(1 * MiB, 1 * MiB), R(2 * MiB, 1 * MiB), 1 * MiB},
        {R(0, 4 * KiB), R(0, 0), 0},
        {R(4 * KiB, 4 * KiB), R(0, 0), 0}}},
      {"a seek forwards past the slack resets too",
       {{R(0, 1 * MiB), R(0, 0), 0},
        {R(1 * MiB, 1 * MiB), R(2 * MiB, 1 * MiB), 1 * MiB},
        {R(50 * MiB, 1 * MiB), R(0, 0), 0}}},
      {"a read a little past the last one's end (within the slack) is still sequential",
       {{R(0, 1 * MiB), R(0, 0), 0}, {R(1 * MiB + 64 * KiB, 64 * KiB), R(1 * MiB + 128 * KiB, 1 * MiB), 1 * MiB}}},
      {"the window stops at the end of the file",
       {{R(98 * MiB, 1 * MiB), R(0, 0), 0},
        {R(99 * MiB, 512 * KiB), R(99 * MiB + 512 * KiB, 512 * KiB), 1 * MiB},
        {R(99 * MiB + 512 * KiB, 512 * KiB), R(0, 0), 2 * MiB}}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      tmo::Readahead ra(1 * MiB, 1 * MiB, 4 * MiB);
      for (std::size_t i = 0; i < row.steps.size(); ++i) {
        const auto& step = row.steps[i];
        INFO("step " << i << ": read " << step.read.offset << "+" << step.read.length);
        const ByteRange got = ra.on_read(step.read, 100 * MiB);
        CHECK(got.length == step.ahead.length);
        if (step.ahead.length > 0) CHECK(got.offset == step.ahead.offset);
        CHECK(ra.window() == step.window);
      }
    }
  }
}

TEST_CASE("tensor_ranges_for: a read fetches the tensors it touches, windows of large ones, header bytes nothing",
          "[mount][reads]") {
  // A file: header 0-100, tensors A 100-1100 (1000 B), B 1100-1100 (empty), C 1100-9292 (8192 B),
  // D 9292-(9292+1 MiB), E 10 bytes after D.
  const std::uint64_t d_end = 9292 + MiB;
  const Ranges tensors = {R(100, 1000), R(1100, 0), R(1100, 8192), R(9292, MiB), R(d_end, 10)};
  struct Row {
    const char* name;
    ByteRange read;
    std::uint64_t window;
    Ranges want;
  };
  const std::vector<Row> rows = {
      {"header bytes only: nothing", R(0, 100), 64 * MiB, {}},
      {"a byte of A: all of A", R(500, 1), 64 * MiB, {R(100, 1000)}},
      {"header and A's start: A", R(50, 100), 64 * MiB, {R(100, 1000)}},
      {"A and the start of C (one page or less): A whole, C's touched bytes only (joined: adjacent)", R(100, 2000),
       64 * MiB, {R(100, 2000)}},
      {"A and C's first page exactly: C's touched bytes only", R(100, 1000 + 4096), 64 * MiB, {R(100, 5096)}},
      {"A and C beyond its first page: C whole", R(100, 1000 + 4097), 64 * MiB, {R(100, 9192)}},
      {"A's last bytes (one page or less) and C: A's touched bytes, C whole", R(1000, 9292 - 1000), 64 * MiB,
       {R(1000, 8292)}},
      {"a read inside C alone: C whole", R(5000, 4096), 64 * MiB, {R(1100, 8192)}},
      {"a read in a tensor larger than the window: the aligned window it touches", R(9292 + 300 * KiB, 10), 256 * KiB,
       {R(9292 + 256 * KiB, 256 * KiB)}},
      {"a read across two windows of a large tensor: both", R(9292 + 250 * KiB, 10 * KiB), 256 * KiB,
       {R(9292, 512 * KiB)}},
      {"the last window of a large tensor is cut at its end", R(d_end - 5, 5), 300 * KiB,
       {R(9292 + 3 * 300 * KiB, MiB - 3 * 300 * KiB)}},
      {"past the last tensor: nothing", R(d_end + 10, 100), 64 * MiB, {}},
      {"an empty read: nothing", R(500, 0), 64 * MiB, {}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      const Ranges got = tmo::tensor_ranges_for(tensors, row.read, row.window);
      CHECK(got == row.want);
    }
  }
}

TEST_CASE("FetchQueue: concurrent requests of the same bytes share one fetch; only the missing part is asked",
          "[mount][queue]") {
  std::mutex mutex;
  std::vector<tf::FileRanges> calls;
  std::atomic<bool> release{false};
  tmo::FetchQueue queue([&](const std::vector<tf::FileRanges>& ranges) -> tf::Result<std::uint64_t> {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard lock(mutex);
    std::uint64_t n = 0;
    for (const auto& f : ranges) {
      calls.push_back(f);
      for (const auto& r : f.ranges) n += r.length;
    }
    return n;
  });
  queue.start();
  // Four readers of the same tensor, plus one of an overlapping larger range.
  std::vector<std::thread> readers;
  std::atomic<int> ok{0}, asked_for{0};
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      auto jobs = queue.request(0, R(1000, 500));
      ++asked_for;
      if (queue.wait(jobs, {})) ++ok;
    });
  }
  // All four ask while the first fetch is held (a reader that asked after it ended would find
  // the bytes in the cache in the mount, before it asks the queue).
  while (asked_for < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto wider = queue.request(0, R(800, 1000));
  auto other_file = queue.request(1, R(1000, 500));
  release = true;
  for (auto& t : readers) t.join();
  REQUIRE(queue.wait(wider, {}));
  REQUIRE(queue.wait(other_file, {}));
  CHECK(ok == 4);
  // Every byte asked once: file 0 gets 1000-1500, then 800-1000 and 1500-1800; file 1 its own.
  std::map<std::size_t, Ranges> asked;
  for (const auto& c : calls) asked[c.file].insert(asked[c.file].end(), c.ranges.begin(), c.ranges.end());
  for (auto& [file, ranges] : asked) {
    std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  }
  CHECK(asked[0] == Ranges{R(800, 200), R(1000, 500), R(1500, 300)});
  CHECK(asked[1] == Ranges{R(1000, 500)});
  CHECK(queue.fetched_bytes() == 1500);
  CHECK(queue.in_flight_bytes() == 0);
}

TEST_CASE("FetchQueue: a failed fetch fails every reader waiting for it; stop fails the rest", "[mount][queue]") {
  std::atomic<bool> release{false};
  tmo::FetchQueue queue([&](const std::vector<tf::FileRanges>&) -> tf::Result<std::uint64_t> {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return tf::fail(tf::ErrorCode::Network, "http://x/f: bytes 0-10: 503");
  });
  queue.start();
  auto a = queue.request(0, R(0, 10));
  auto b = queue.request(0, R(5, 2));  // inside a: shares it
  CHECK(b.size() == 1);
  CHECK(b[0] == a[0]);
  release = true;
  auto ra = queue.wait(a, {});
  auto rb = queue.wait(b, {});
  REQUIRE_FALSE(ra);
  REQUIRE_FALSE(rb);
  CHECK(ra.error().code == tf::ErrorCode::Network);
  CHECK_THAT(rb.error().message, Catch::Contains("bytes 0-10"));

  SECTION("a waiter that gives up returns Cancelled; stop fails queued jobs and later requests") {
    release = false;
    auto c = queue.request(0, R(100, 10));
    auto d = queue.request(0, R(200, 10));  // queued behind c's fetch (or in the same batch)
    auto gave_up = queue.wait(c, [] { return true; }, 10);
    REQUIRE_FALSE(gave_up);
    CHECK(gave_up.error().code == tf::ErrorCode::Cancelled);
    queue.stop();
    release = true;
    auto rd = queue.wait(d, {});
    auto later = queue.request(0, R(300, 10));
    auto rl = queue.wait(later, {});
    REQUIRE_FALSE(rl);
    CHECK(rl.error().code == tf::ErrorCode::Cancelled);
    (void)rd;  // d failed either way: Cancelled (queued) or the fetch's error (in the batch)
  }
}
