// SPDX-License-Identifier: Apache-2.0
// Private: range algebra. Pure functions on sorted, disjoint byte-range lists (a "range set");
// no I/O, so every rule is tested by tables. Used by the cache (what a blob holds) and the
// fetch planner (what to transfer).
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

}  // namespace tensorfetch::detail
