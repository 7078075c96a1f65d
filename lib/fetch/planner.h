// SPDX-License-Identifier: Apache-2.0
// Private: range algebra and the fetch planner. Pure functions on sorted, disjoint range lists
// (a "range set"); no I/O, so every rule is tested by tables.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensorfetch/byte_range.hpp"

namespace tensorfetch::detail {

/// Sorted by offset, disjoint, non-adjacent, no empty ranges.
using RangeSet = std::vector<ByteRange>;

/// Sorts and merges overlapping or touching ranges; drops empty ones.
[[nodiscard]] RangeSet normalize(std::vector<ByteRange> ranges);

/// Adds `range` to `set`, merging as needed (set stays normalized).
void add_range(RangeSet& set, ByteRange range);

/// The parts of `wanted` (normalized) not covered by `have` (normalized).
[[nodiscard]] RangeSet subtract(std::span<const ByteRange> wanted, std::span<const ByteRange> have);

/// True when `set` covers all of `range` (an empty range is always covered).
[[nodiscard]] bool covers(std::span<const ByteRange> set, ByteRange range) noexcept;

/// Total bytes of a list of ranges.
[[nodiscard]] std::uint64_t total_bytes(std::span<const ByteRange> ranges) noexcept;

/// Joins neighbours of a normalized set whose gap is at most `max_gap` bytes (the gap is then
/// fetched too: one request instead of two).
[[nodiscard]] RangeSet coalesce(std::span<const ByteRange> set, std::uint64_t max_gap);

/// Cuts every range into pieces of at most `max_chunk` bytes (0: no limit), so that many
/// connections can share one large range. Pieces are as equal as possible: a 17 MiB range
/// with 8 MiB chunks becomes 3 pieces of about 5.7 MiB, not 8 + 8 + 1.
[[nodiscard]] std::vector<ByteRange> split(std::span<const ByteRange> set, std::uint64_t max_chunk);

/// What to transfer for one file: `wanted` minus `have`, coalesced across holes of at most
/// `max_gap`, split into chunks of at most `max_chunk`. `wanted` need not be normalized.
[[nodiscard]] std::vector<ByteRange> plan_transfers(std::vector<ByteRange> wanted,
                                                    std::span<const ByteRange> have,
                                                    std::uint64_t max_gap, std::uint64_t max_chunk);

}  // namespace tensorfetch::detail
