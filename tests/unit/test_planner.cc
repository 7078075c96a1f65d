// SPDX-License-Identifier: Apache-2.0
// The fetch planner's range algebra (lib/fetch/planner.h): normalize, add_range, subtract,
// covers, total_bytes, coalesce, coalesce_within (an over-fetch budget), overfetch_budget, split
// and plan_transfers. Every rule is a table whose rows are
// named in the output (one DYNAMIC_SECTION per row), plus a randomized property test (fixed
// seed) against a bitmap oracle.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fetch/planner.h"
#include "test_util.hpp"

namespace tf = tensorfetch;
namespace td = tensorfetch::detail;
using tf::ByteRange;
using Ranges = std::vector<ByteRange>;

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

ByteRange R(std::uint64_t offset, std::uint64_t length) { return ByteRange{offset, length}; }

/// True when `set` obeys the RangeSet invariant: sorted, disjoint, non-adjacent, no empty ranges.
bool is_normalized(const Ranges& set) {
  for (std::size_t i = 0; i < set.size(); ++i) {
    if (set[i].length == 0) return false;
    if (i > 0 && set[i].offset <= set[i - 1].end()) return false;
  }
  return true;
}

/// Every byte of `pieces` lies in order, without gaps or overlaps, over the ranges of `set`;
/// each piece is at most `max_chunk` bytes (0: unlimited) and the pieces of one range differ in
/// length by at most one byte.
void check_split_invariants(const Ranges& set, const Ranges& pieces, std::uint64_t max_chunk) {
  std::size_t p = 0;
  for (const auto& r : set) {
    INFO("range " << Catch::StringMaker<ByteRange>::convert(r) << ", max_chunk " << max_chunk);
    std::uint64_t pos = r.offset, lo = kMax, hi = 0, count = 0;
    while (pos < r.end()) {
      REQUIRE(p < pieces.size());
      const ByteRange& piece = pieces[p++];
      CHECK(piece.offset == pos);
      CHECK(piece.length > 0);
      if (max_chunk > 0) CHECK(piece.length <= max_chunk);
      lo = std::min(lo, piece.length);
      hi = std::max(hi, piece.length);
      pos += piece.length;
      ++count;
    }
    CHECK(pos == r.end());
    CHECK(hi - lo <= 1);
    const std::uint64_t want_count = max_chunk == 0 ? 1 : (r.length + max_chunk - 1) / max_chunk;
    CHECK(count == want_count);
  }
  CHECK(p == pieces.size());
  CHECK(td::total_bytes(pieces) == td::total_bytes(set));
}

// --------------------------------------------------------------------------------------------
// A bitmap oracle over a small universe [0, kUniverse): a range set is the set of its bytes.

constexpr std::uint64_t kUniverse = 192;
using Bits = std::vector<bool>;

Bits bits_of(const Ranges& ranges) {
  Bits b(kUniverse, false);
  for (const auto& r : ranges) {
    for (std::uint64_t i = r.offset; i < r.end(); ++i) b[i] = true;
  }
  return b;
}

/// The canonical normalized set of a bitmap: its maximal runs of set bytes.
Ranges ranges_of(const Bits& b) {
  Ranges out;
  std::uint64_t i = 0;
  while (i < b.size()) {
    if (!b[i]) {
      ++i;
      continue;
    }
    std::uint64_t j = i;
    while (j < b.size() && b[j]) ++j;
    out.push_back(R(i, j - i));
    i = j;
  }
  return out;
}

/// Fills every hole of at most `max_gap` bytes that lies between two set bytes.
Bits fill_gaps(Bits b, std::uint64_t max_gap) {
  std::uint64_t i = 0;
  while (i < b.size() && !b[i]) ++i;  // leading zeros are not a gap
  while (i < b.size()) {
    if (b[i]) {
      ++i;
      continue;
    }
    std::uint64_t j = i;
    while (j < b.size() && !b[j]) ++j;
    if (j < b.size() && j - i <= max_gap) {
      for (std::uint64_t k = i; k < j; ++k) b[k] = true;
    }
    i = j;
  }
  return b;
}

Bits and_not(const Bits& a, const Bits& b) {
  Bits out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] && !b[i];
  return out;
}

std::string show(const Ranges& rs) { return Catch::StringMaker<Ranges>::convert(rs); }

}  // namespace

// --------------------------------------------------------------------------------------------

TEST_CASE("normalize: sorts, merges overlapping and touching ranges, drops empty ones", "[planner][normalize]") {
  struct Row {
    const char* name;
    Ranges in;
    Ranges want;
  };
  const std::vector<Row> rows = {
      {"empty input", {}, {}},
      {"one range", {R(5, 3)}, {R(5, 3)}},
      {"already normalized", {R(0, 5), R(10, 5)}, {R(0, 5), R(10, 5)}},
      {"unsorted, disjoint", {R(20, 5), R(0, 5), R(10, 5)}, {R(0, 5), R(10, 5), R(20, 5)}},
      {"overlapping", {R(0, 10), R(5, 10)}, {R(0, 15)}},
      {"overlapping, unsorted", {R(5, 10), R(0, 10)}, {R(0, 15)}},
      {"one inside another", {R(0, 100), R(10, 5)}, {R(0, 100)}},
      {"touching", {R(0, 10), R(10, 10)}, {R(0, 20)}},
      {"touching chain, unsorted", {R(20, 10), R(0, 10), R(10, 10)}, {R(0, 30)}},
      {"one-byte gap is kept", {R(0, 10), R(11, 10)}, {R(0, 10), R(11, 10)}},
      {"duplicates", {R(3, 4), R(3, 4)}, {R(3, 4)}},
      {"same offset, different lengths", {R(3, 4), R(3, 10), R(3, 1)}, {R(3, 10)}},
      {"a later range inside a merged run", {R(0, 10), R(5, 20), R(12, 3)}, {R(0, 25)}},
      {"empty ranges dropped", {R(5, 0), R(10, 3), R(0, 0)}, {R(10, 3)}},
      {"only empty ranges", {R(0, 0), R(7, 0)}, {}},
      {"an empty range in a gap does not bridge it", {R(0, 5), R(5, 0), R(6, 4)}, {R(0, 5), R(6, 4)}},
      {"large offsets", {R(1ull << 40, MiB), R((1ull << 40) + MiB, 1)}, {R(1ull << 40, MiB + 1)}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      const Ranges got = td::normalize(row.in);
      CHECK(got == row.want);
      CHECK(is_normalized(got));
    }
  }
}

TEST_CASE("add_range: inserts into a normalized set and keeps it normalized", "[planner][add_range]") {
  struct Row {
    const char* name;
    Ranges set;
    ByteRange add;
    Ranges want;
  };
  const std::vector<Row> rows = {
      {"into an empty set", {}, R(5, 5), {R(5, 5)}},
      {"empty range is a no-op", {R(10, 5)}, R(3, 0), {R(10, 5)}},
      {"empty range touching an extent is a no-op", {R(0, 5), R(10, 5)}, R(5, 0), {R(0, 5), R(10, 5)}},
      {"before all, apart", {R(10, 5)}, R(0, 5), {R(0, 5), R(10, 5)}},
      {"before all, touching", {R(10, 5)}, R(5, 5), {R(5, 10)}},
      {"before all, overlapping", {R(10, 5)}, R(5, 7), {R(5, 10)}},
      {"after all, apart", {R(10, 5)}, R(20, 5), {R(10, 5), R(20, 5)}},
      {"after all, touching", {R(10, 5)}, R(15, 5), {R(10, 10)}},
      {"after all, overlapping", {R(10, 5)}, R(12, 8), {R(10, 10)}},
      {"between two, apart", {R(0, 5), R(20, 5)}, R(10, 5), {R(0, 5), R(10, 5), R(20, 5)}},
      {"between two, touching the left", {R(0, 5), R(20, 5)}, R(5, 5), {R(0, 10), R(20, 5)}},
      {"between two, touching the right", {R(0, 5), R(20, 5)}, R(15, 5), {R(0, 5), R(15, 10)}},
      {"between two, touching both", {R(0, 5), R(20, 5)}, R(5, 15), {R(0, 25)}},
      {"bridging several", {R(0, 5), R(10, 5), R(20, 5), R(30, 5)}, R(3, 25), {R(0, 28), R(30, 5)}},
      {"bridging several, touching the last", {R(0, 5), R(10, 5), R(20, 5), R(30, 5)}, R(3, 27), {R(0, 35)}},
      {"covering everything", {R(10, 5), R(20, 5)}, R(0, 100), {R(0, 100)}},
      {"inside an extent", {R(0, 100)}, R(10, 5), {R(0, 100)}},
      {"equal to an extent", {R(0, 5), R(10, 5), R(20, 5)}, R(10, 5), {R(0, 5), R(10, 5), R(20, 5)}},
      {"one-byte gap on each side stays", {R(0, 5), R(20, 5)}, R(6, 13), {R(0, 5), R(6, 13), R(20, 5)}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      Ranges set = row.set;
      td::add_range(set, row.add);
      CHECK(set == row.want);
      CHECK(is_normalized(set));
    }
  }
}

TEST_CASE("subtract: the wanted bytes that are not cached", "[planner][subtract]") {
  struct Row {
    const char* name;
    Ranges wanted;
    Ranges have;
    Ranges want;
  };
  const std::vector<Row> rows = {
      {"nothing cached", {R(0, 100)}, {}, {R(0, 100)}},
      {"all cached, exactly", {R(0, 100)}, {R(0, 100)}, {}},
      {"all cached by a larger extent", {R(10, 10)}, {R(0, 100)}, {}},
      {"hole at the start", {R(0, 100)}, {R(50, 50)}, {R(0, 50)}},
      {"hole at the end", {R(0, 100)}, {R(0, 60)}, {R(60, 40)}},
      {"hole in the middle", {R(0, 100)}, {R(0, 30), R(70, 30)}, {R(30, 40)}},
      {"cached in the middle", {R(0, 100)}, {R(40, 20)}, {R(0, 40), R(60, 40)}},
      {"several holes", {R(0, 100)}, {R(10, 10), R(40, 10), R(90, 5)}, {R(0, 10), R(20, 20), R(50, 40), R(95, 5)}},
      {"have extends beyond wanted on both sides", {R(10, 20)}, {R(0, 15), R(25, 100)}, {R(15, 10)}},
      {"have extends beyond wanted's end", {R(10, 20)}, {R(20, 100)}, {R(10, 10)}},
      {"have starts before wanted", {R(10, 20)}, {R(0, 15)}, {R(15, 15)}},
      {"have touches wanted's edges only", {R(10, 10)}, {R(0, 10), R(20, 10)}, {R(10, 10)}},
      {"have only before and after", {R(10, 10)}, {R(0, 5), R(50, 5)}, {R(10, 10)}},
      {"have between wanted ranges", {R(0, 10), R(30, 10)}, {R(15, 5)}, {R(0, 10), R(30, 10)}},
      {"several wanted, one have spanning them", {R(0, 10), R(20, 10), R(40, 10)}, {R(5, 40)}, {R(0, 5), R(45, 5)}},
      {"several wanted, one have covering all", {R(0, 10), R(20, 10), R(40, 10)}, {R(0, 50)}, {}},
      {"several wanted, several haves", {R(0, 10), R(20, 10), R(40, 10)}, {R(2, 2), R(25, 20)}, {R(0, 2), R(4, 6), R(20, 5), R(45, 5)}},
      {"one-byte holes", {R(0, 5)}, {R(0, 1), R(2, 1), R(4, 1)}, {R(1, 1), R(3, 1)}},
      {"empty wanted", {}, {R(0, 10)}, {}},
      {"empty wanted and have", {}, {}, {}},
      {"large offsets", {R(1ull << 40, 8 * MiB)}, {R((1ull << 40) + MiB, MiB)}, {R(1ull << 40, MiB), R((1ull << 40) + 2 * MiB, 6 * MiB)}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      REQUIRE(is_normalized(row.wanted));
      REQUIRE(is_normalized(row.have));
      const Ranges got = td::subtract(row.wanted, row.have);
      CHECK(got == row.want);
      CHECK(is_normalized(got));
    }
  }
}

TEST_CASE("covers: one extent of a normalized set holds the whole range", "[planner][covers]") {
  struct Row {
    const char* name;
    Ranges set;
    ByteRange range;
    bool want;
  };
  const std::vector<Row> rows = {
      {"exact", {R(10, 10)}, R(10, 10), true},
      {"inside", {R(0, 100)}, R(10, 5), true},
      {"aligned to the start", {R(0, 100)}, R(0, 5), true},
      {"aligned to the end", {R(0, 100)}, R(90, 10), true},
      {"inside the second of several", {R(0, 10), R(20, 10), R(40, 10)}, R(22, 5), true},
      {"one byte past the end", {R(0, 100)}, R(90, 11), false},
      {"one byte before the start", {R(10, 10)}, R(9, 2), false},
      {"before the first extent", {R(10, 10)}, R(0, 5), false},
      {"after the last extent", {R(10, 10)}, R(30, 5), false},
      {"in a gap", {R(0, 10), R(20, 10)}, R(12, 3), false},
      {"spanning two extents with a one-byte gap", {R(0, 10), R(11, 10)}, R(5, 10), false},
      // covers() takes a normalized set; two touching extents are not one (never built by the
      // library, since normalize/add_range merge them).
      {"spanning two adjacent-but-separate extents", {R(0, 10), R(10, 10)}, R(5, 10), false},
      {"empty set, non-empty range", {}, R(0, 1), false},
      {"empty range, empty set", {}, R(5, 0), true},
      {"empty range outside every extent", {R(0, 10)}, R(50, 0), true},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) { CHECK(td::covers(row.set, row.range) == row.want); }
  }
}

TEST_CASE("total_bytes: sums lengths", "[planner][total_bytes]") {
  struct Row {
    const char* name;
    Ranges ranges;
    std::uint64_t want;
  };
  const std::vector<Row> rows = {
      {"empty", {}, 0},
      {"one", {R(7, 3)}, 3},
      {"several", {R(0, 3), R(10, 4), R(100, 0)}, 7},
      {"overlapping ranges count twice (not a set operation)", {R(0, 10), R(5, 10)}, 20},
      {"large", {R(0, 1ull << 40), R(1ull << 41, 1ull << 40)}, 1ull << 41},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) { CHECK(td::total_bytes(row.ranges) == row.want); }
  }
}

TEST_CASE("coalesce: joins neighbours across gaps of at most max_gap bytes", "[planner][coalesce]") {
  struct Row {
    const char* name;
    Ranges set;
    std::uint64_t max_gap;
    Ranges want;
  };
  const std::vector<Row> rows = {
      {"empty set", {}, 10, {}},
      {"one range", {R(5, 5)}, 10, {R(5, 5)}},
      {"gap exactly max_gap joins", {R(0, 10), R(20, 10)}, 10, {R(0, 30)}},
      {"gap max_gap + 1 does not join", {R(0, 10), R(21, 10)}, 10, {R(0, 10), R(21, 10)}},
      {"gap below max_gap joins", {R(0, 10), R(15, 10)}, 10, {R(0, 25)}},
      {"max_gap 0 joins nothing (a normalized set has no touching ranges)",
       {R(0, 10), R(11, 10), R(22, 1), R(24, 1)}, 0, {R(0, 10), R(11, 10), R(22, 1), R(24, 1)}},
      {"max_gap 1 joins one-byte gaps", {R(0, 10), R(11, 10), R(23, 1)}, 1, {R(0, 21), R(23, 1)}},
      {"a chain joins into one", {R(0, 1), R(3, 1), R(6, 1), R(100, 1)}, 2, {R(0, 7), R(100, 1)}},
      {"only the small gap joins", {R(0, 10), R(12, 10), R(100, 10), R(116, 1)}, 5, {R(0, 22), R(100, 10), R(116, 1)}},
      {"huge max_gap joins everything", {R(0, 1), R(1ull << 40, 1)}, kMax, {R(0, (1ull << 40) + 1)}},
      {"4 KiB holes with a 64 KiB limit", {R(0, MiB), R(MiB + 4 * KiB, MiB)}, 64 * KiB, {R(0, 2 * MiB + 4 * KiB)}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      REQUIRE(is_normalized(row.set));
      const Ranges got = td::coalesce(row.set, row.max_gap);
      CHECK(got == row.want);
      CHECK(is_normalized(got));
    }
  }
}

TEST_CASE("coalesce_within: the smallest holes first, over all files, while they fit the budget",
          "[planner][coalesce]") {
  struct Row {
    const char* name;
    std::vector<Ranges> sets;
    std::uint64_t max_gap;
    std::uint64_t budget;
    std::vector<Ranges> want;
  };
  // A row-parallel slice: 4 rows of 2 bytes, 6-byte holes (one range per row).
  const Ranges rows4 = {R(0, 2), R(8, 2), R(16, 2), R(24, 2)};
  const std::vector<Row> rows = {
      {"no sets", {}, 10, 0, {}},
      {"all holes fit: as coalesce", {{R(0, 10), R(15, 10), R(100, 1)}}, 10, 5, {{R(0, 25), R(100, 1)}}},
      {"budget 0 joins nothing", {rows4}, 10, 0, {rows4}},
      {"budget of two holes: the first two (equal holes in offset order)", {rows4}, 10, 12,
       {{R(0, 18), R(24, 2)}}},
      {"budget one byte short of two holes: one", {rows4}, 10, 11, {{R(0, 10), R(16, 2), R(24, 2)}}},
      {"the smallest holes first, wherever they are", {{R(0, 1), R(9, 1), R(12, 1), R(20, 1), R(22, 1)}}, 10, 5,
       {{R(0, 1), R(9, 4), R(20, 3)}}},
      {"holes over max_gap never join, whatever the budget", {{R(0, 1), R(50, 1), R(53, 1)}}, 10, kMax - 1,
       {{R(0, 1), R(50, 4)}}},
      {"over files: the smaller hole of the second file before the larger of the first",
       {{R(0, 1), R(5, 1)}, {R(0, 1), R(3, 1)}}, 10, 3, {{R(0, 1), R(5, 1)}, {R(0, 4)}}},
      {"over files: equal holes, the first file first", {{R(0, 1), R(5, 1)}, {R(0, 1), R(5, 1)}}, 10, 5,
       {{R(0, 6)}, {R(0, 1), R(5, 1)}}},
      {"a chain joins into one", {{R(0, 1), R(3, 1), R(6, 1), R(100, 1)}}, 2, 4, {{R(0, 7), R(100, 1)}}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      for (const auto& s : row.sets) REQUIRE(is_normalized(s));
      const auto got = td::coalesce_within(row.sets, row.max_gap, row.budget);
      CHECK(got == row.want);
      std::uint64_t extra = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(is_normalized(got[i]));
        CHECK(td::subtract(row.sets[i], got[i]).empty());  // every wanted byte stays planned
        extra += td::total_bytes(got[i]) - td::total_bytes(row.sets[i]);
      }
      CHECK(extra <= row.budget);
    }
  }
}

TEST_CASE("overfetch_budget: percent of the missing bytes, at least min(max_gap, 64 KiB), saturating",
          "[planner][coalesce]") {
  struct Row {
    const char* name;
    std::uint64_t missing, max_gap;
    std::uint32_t percent;
    std::uint64_t want;
  };
  const std::vector<Row> rows = {
      {"1% of 100 MB", 100'000'000, MiB, 1, 1'000'000},
      {"small fetch: the floor of 64 KiB", 1000, MiB, 1, 64 * KiB},
      {"the floor is max_gap when smaller", 1000, 4096, 1, 4096},
      {"max_gap 0: only the percentage", 1000, 0, 1, 10},
      {"rounds down", 199, 0, 1, 1},
      {"0%: the floor", 100'000'000, MiB, 0, 64 * KiB},
      {"1000%", 100'000'000, 0, 1000, 1'000'000'000},
      {"saturates", kMax, 0, 1000, kMax},
      {"no overflow near the top", kMax, 0, 100, kMax / 100 * 100 + kMax % 100},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) { CHECK(td::overfetch_budget(row.missing, row.max_gap, row.percent) == row.want); }
  }
}

TEST_CASE("split: cuts ranges into near-equal pieces of at most max_chunk bytes", "[planner][split]") {
  struct Row {
    const char* name;
    Ranges set;
    std::uint64_t max_chunk;
    Ranges want;
  };
  // 17 MiB = 17825792 = 3 * 5941930 + 2: the first two pieces take the extra byte.
  const std::vector<Row> rows = {
      {"empty set", {}, 8 * MiB, {}},
      {"smaller than a chunk", {R(0, MiB)}, 8 * MiB, {R(0, MiB)}},
      {"exactly one chunk", {R(0, 8 * MiB)}, 8 * MiB, {R(0, 8 * MiB)}},
      {"exact multiple", {R(0, 24 * MiB)}, 8 * MiB, {R(0, 8 * MiB), R(8 * MiB, 8 * MiB), R(16 * MiB, 8 * MiB)}},
      {"17 MiB in 8 MiB chunks: 3 near-equal pieces", {R(0, 17 * MiB)}, 8 * MiB,
       {R(0, 5941931), R(5941931, 5941931), R(11883862, 5941930)}},
      {"17 MiB at an offset", {R(100, 17 * MiB)}, 8 * MiB,
       {R(100, 5941931), R(100 + 5941931, 5941931), R(100 + 11883862, 5941930)}},
      {"one byte over a chunk", {R(0, 9)}, 8, {R(0, 5), R(5, 4)}},
      {"max_chunk 0: no split", {R(0, 1ull << 40), R(1ull << 41, 3)}, 0, {R(0, 1ull << 40), R(1ull << 41, 3)}},
      {"1-byte ranges stay", {R(0, 1), R(5, 1), R(9, 1)}, 1, {R(0, 1), R(5, 1), R(9, 1)}},
      {"max_chunk 1 cuts into single bytes", {R(10, 3)}, 1, {R(10, 1), R(11, 1), R(12, 1)}},
      {"each range on its own", {R(0, 10), R(100, 4), R(200, 7)}, 4,
       {R(0, 4), R(4, 3), R(7, 3), R(100, 4), R(200, 4), R(204, 3)}},
      // 2^63 - 1 bytes in chunks of 2^62 - 1: 3 pieces, 2^63 - 1 = 3 * 3074457345618258602 + 1.
      {"huge range, huge chunk", {R(0, kMax / 2)}, kMax / 4,
       {R(0, 3074457345618258603ull), R(3074457345618258603ull, 3074457345618258602ull),
        R(6148914691236517205ull, 3074457345618258602ull)}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      const Ranges got = td::split(row.set, row.max_chunk);
      CHECK(got == row.want);
      check_split_invariants(row.set, got, row.max_chunk);
    }
  }
}

TEST_CASE("pieces_per_range: N pieces in all, in proportion to the lengths (largest remainder), each range at "
          "least one, no empty piece",
          "[planner][pieces_per_range]") {
  using Counts = std::vector<std::uint64_t>;
  struct Row {
    const char* name;
    Counts lengths;
    std::uint64_t pieces;
    Counts want;
  };
  const std::vector<Row> rows = {
      {"no ranges", {}, 32, {}},
      {"one range takes all", {21 * MiB}, 32, {32}},
      // A 2-layer get over two shards: 10.1 MB and 11.1 MB on 32 connections, 32 pieces (not 33).
      {"two ranges: 15.2 + 16.8 -> 15 + 17", {10'100'000, 11'100'000}, 32, {15, 17}},
      {"equal ranges share equally", {MiB, MiB, MiB, MiB}, 8, {2, 2, 2, 2}},
      {"largest remainders get the rest", {3, 3, 3}, 4, {2, 1, 1}},
      {"a tiny range still gets one", {1, 1000}, 4, {1, 3}},
      {"more ranges than pieces: one each", {5, 6, 7}, 2, {1, 1, 1}},
      {"no empty piece: a 2-byte range gets at most 2", {2, 2}, 10, {2, 2}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      const Counts got = td::pieces_per_range(row.lengths, row.pieces);
      CHECK(got == row.want);
      for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i] >= 1);
        CHECK(got[i] <= row.lengths[i]);
      }
    }
  }
}

TEST_CASE("split_into: a range in N near-equal pieces, in order, covering it exactly", "[planner][split_into]") {
  CHECK(td::split_into(R(100, 10), 3) == Ranges{R(100, 4), R(104, 3), R(107, 3)});
  CHECK(td::split_into(R(0, 8), 1) == Ranges{R(0, 8)});
  CHECK(td::split_into(R(0, 8), 0) == Ranges{R(0, 8)});        // at least one piece
  CHECK(td::split_into(R(5, 2), 4) == Ranges{R(5, 1), R(6, 1)});  // no empty piece
  const Ranges big = td::split_into(R(7, 21238272), 32);
  REQUIRE(big.size() == 32);
  std::uint64_t at = 7;
  for (const auto& r : big) {
    CHECK(r.offset == at);
    CHECK((r.length == 21238272 / 32 || r.length == 21238272 / 32 + 1));
    at = r.end();
  }
  CHECK(at == 7 + 21238272);
}

TEST_CASE("plan_transfers: wanted - cached, coalesced, split", "[planner][plan_transfers]") {
  struct Row {
    const char* name;
    Ranges wanted;  // need not be normalized
    Ranges have;    // normalized
    std::uint64_t max_gap;
    std::uint64_t max_chunk;
    Ranges want;
  };
  const std::vector<Row> rows = {
      {"nothing wanted", {}, {R(0, 10)}, 10, 8, {}},
      {"nothing cached, no split", {R(0, 100)}, {}, 0, 0, {R(0, 100)}},
      {"all cached", {R(10, 10), R(0, 15)}, {R(0, 100)}, 10, 8, {}},
      {"cache outside the wanted bytes is irrelevant", {R(10, 10)}, {R(0, 5), R(50, 5)}, 1, 0, {R(10, 10)}},
      // normalize: {0,100},{200,10}; subtract: {0,20},{30,60},{95,5},{200,10};
      // coalesce (10): {0,100},{200,10}; split (40): 34 + 33 + 33, 10.
      {"unsorted overlapping wanted, cached holes, coalesce, split",
       {R(50, 50), R(200, 10), R(0, 60)}, {R(20, 10), R(90, 5)}, 10, 40,
       {R(0, 34), R(34, 33), R(67, 33), R(200, 10)}},
      {"max_gap 0 keeps cached holes out",
       {R(50, 50), R(200, 10), R(0, 60)}, {R(20, 10), R(90, 5)}, 0, 0,
       {R(0, 20), R(30, 60), R(95, 5), R(200, 10)}},
      {"gap of max_gap + 1 stays out", {R(0, 100)}, {R(50, 6)}, 5, 0, {R(0, 50), R(56, 44)}},
      {"gap of max_gap is fetched again", {R(0, 100)}, {R(50, 5)}, 5, 0, {R(0, 100)}},
      {"touching wanted ranges become one request", {R(0, 8), R(8, 8)}, {}, 0, 0, {R(0, 16)}},
      {"tensors of a shard: 3 wanted, 1 cached, 8 MiB chunks",
       {R(20 * MiB, 4 * MiB), R(0, 17 * MiB), R(17 * MiB, 3 * MiB)}, {R(4 * MiB, 4 * MiB)}, 64 * KiB, 8 * MiB,
       {R(0, 4 * MiB), R(8 * MiB, 8 * MiB), R(16 * MiB, 8 * MiB)}},
  };
  for (const auto& row : rows) {
    DYNAMIC_SECTION(row.name) {
      REQUIRE(is_normalized(row.have));
      const Ranges got = td::plan_transfers(row.wanted, row.have, row.max_gap, row.max_chunk);
      CHECK(got == row.want);
      CHECK(td::total_bytes(got) == td::total_bytes(row.want));

      // Everything wanted and missing is planned, exactly once.
      const Ranges missing = td::subtract(td::normalize(row.wanted), row.have);
      const Ranges planned = td::normalize(got);
      CHECK(td::total_bytes(planned) == td::total_bytes(got));  // pieces do not overlap
      CHECK(td::subtract(missing, planned).empty());
      // A planned byte that is already cached (or not wanted) lies in a hole of at most max_gap
      // between two missing ranges.
      const Ranges extra = td::subtract(planned, missing);
      for (const auto& e : extra) {
        INFO("extra " << Catch::StringMaker<ByteRange>::convert(e));
        CHECK(e.length <= row.max_gap);
        const bool after_missing = std::any_of(missing.begin(), missing.end(),
                                               [&](const ByteRange& m) { return m.end() == e.offset; });
        const bool before_missing = std::any_of(missing.begin(), missing.end(),
                                                [&](const ByteRange& m) { return m.offset == e.end(); });
        CHECK(after_missing);
        CHECK(before_missing);
      }
      for (const auto& piece : got) {
        if (row.max_chunk > 0) CHECK(piece.length <= row.max_chunk);
        CHECK(piece.length > 0);
      }
      CHECK(std::is_sorted(got.begin(), got.end(),
                           [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; }));
    }
  }
}

TEST_CASE("planner properties against a bitmap oracle (fixed seed)", "[planner][property]") {
  std::mt19937_64 rng(0x7e45f37c);  // fixed: failures reproduce
  auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {  // inclusive
    return lo + rng() % (hi - lo + 1);
  };
  auto random_ranges = [&](std::uint64_t max_count, std::uint64_t max_len) {
    Ranges out;
    const std::uint64_t n = uniform(0, max_count);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t off = uniform(0, kUniverse - 1);
      const std::uint64_t len = uniform(0, std::min(max_len, kUniverse - off));
      out.push_back(R(off, len));
    }
    return out;
  };

  constexpr int kCases = 4000;
  for (int c = 0; c < kCases; ++c) {
    const Ranges raw_wanted = random_ranges(8, 40);
    const Ranges raw_have = random_ranges(8, 30);
    const ByteRange probe = [&] {
      const std::uint64_t off = uniform(0, kUniverse - 1);
      return R(off, uniform(0, std::min<std::uint64_t>(50, kUniverse - off)));
    }();
    const std::uint64_t max_gap = uniform(0, 12);
    const std::uint64_t max_chunk = uniform(0, 3) == 0 ? 0 : uniform(1, 24);
    INFO("case " << c << ": wanted " << show(raw_wanted) << ", have " << show(raw_have) << ", probe "
                 << Catch::StringMaker<ByteRange>::convert(probe) << ", max_gap " << max_gap << ", max_chunk "
                 << max_chunk);

    const Bits wanted_bits = bits_of(raw_wanted), have_bits = bits_of(raw_have);

    // normalize: the canonical runs of the bytes.
    const Ranges wanted = td::normalize(raw_wanted), have = td::normalize(raw_have);
    REQUIRE(wanted == ranges_of(wanted_bits));
    REQUIRE(have == ranges_of(have_bits));
    REQUIRE(td::total_bytes(wanted) ==
            static_cast<std::uint64_t>(std::count(wanted_bits.begin(), wanted_bits.end(), true)));

    // add_range: the union, still normalized.
    {
      Ranges set = have;
      td::add_range(set, probe);
      Bits u = have_bits;
      for (std::uint64_t i = probe.offset; i < probe.end(); ++i) u[i] = true;
      REQUIRE(set == ranges_of(u));
    }
    // Building a set one range at a time equals normalizing all at once.
    {
      Ranges set;
      for (const auto& r : raw_wanted) td::add_range(set, r);
      REQUIRE(set == wanted);
    }

    // covers: every byte of the probe is cached.
    {
      bool all = true;
      for (std::uint64_t i = probe.offset; i < probe.end(); ++i) all = all && have_bits[i];
      REQUIRE(td::covers(have, probe) == all);
    }

    // subtract: wanted and not have.
    const Ranges missing = td::subtract(wanted, have);
    const Bits missing_bits = and_not(wanted_bits, have_bits);
    REQUIRE(missing == ranges_of(missing_bits));

    // coalesce: holes of at most max_gap between missing bytes are filled.
    const Ranges joined = td::coalesce(missing, max_gap);
    const Bits joined_bits = fill_gaps(missing_bits, max_gap);
    REQUIRE(joined == ranges_of(joined_bits));

    // split: the same bytes, in order, in bounded near-equal pieces.
    const Ranges pieces = td::split(joined, max_chunk);
    check_split_invariants(joined, pieces, max_chunk);
    REQUIRE(td::normalize(pieces) == joined);

    // plan_transfers is the composition, on the raw (unsorted, overlapping) wanted list.
    std::uint64_t held = 0;
    const Ranges plan = td::plan_transfers(raw_wanted, have, max_gap, max_chunk, &held);
    REQUIRE(plan == pieces);
    // already_held: the wanted bytes the cache covers, each counted once.
    std::uint64_t held_bits = 0;
    for (std::uint64_t i = 0; i < kUniverse; ++i) held_bits += wanted_bits[i] && have_bits[i] ? 1 : 0;
    REQUIRE(held == held_bits);
    // No planned byte is cached unless it sits in a hole of at most max_gap.
    const Bits plan_bits = bits_of(plan);
    for (std::uint64_t i = 0; i < kUniverse; ++i) {
      if (plan_bits[i] && !missing_bits[i]) {
        std::uint64_t lo = i, hi = i;
        while (lo > 0 && !missing_bits[lo - 1]) --lo;
        while (hi < kUniverse && !missing_bits[hi]) ++hi;
        INFO("byte " << i << " planned but not missing; hole [" << lo << ", " << hi << ")");
        REQUIRE(lo > 0);
        REQUIRE(hi < kUniverse);
        REQUIRE(hi - lo <= max_gap);
      }
    }
  }
  SUCCEED("checked " << kCases << " random cases");
}
