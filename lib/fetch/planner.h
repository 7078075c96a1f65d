// SPDX-License-Identifier: Apache-2.0
// Private: the fetch planner: wanted minus cached, coalesced across small holes, split into
// chunks. Pure functions on range sets (base/range_set.h); no I/O, so every rule is tested by
// tables.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/range_set.h"
#include "tensorfetch/byte_range.hpp"

namespace tensorfetch::detail {

/// Joins neighbours of a normalized set whose gap is at most `max_gap` bytes (the gap is then
/// fetched too: one request instead of two).
[[nodiscard]] RangeSet coalesce(std::span<const ByteRange> set, std::uint64_t max_gap);

/// Coalescing within an over-fetch budget, over the missing ranges of several files at once
/// (`sets[i]` normalized, one per file): holes of at most `max_gap` bytes are joined smallest
/// first (equal holes: earlier file, then lower offset first) while the holes joined add up to
/// at most `budget` bytes. Joining the smallest holes first makes the fewest requests the budget
/// allows. When every hole of at most `max_gap` fits, this is `coalesce` on each set.
[[nodiscard]] std::vector<RangeSet> coalesce_within(std::span<const RangeSet> sets, std::uint64_t max_gap,
                                                    std::uint64_t budget);

/// Holes adding up to this many bytes may always travel, whatever the percentage: far less than
/// a round trip carries on any link worth fetching over, so a small fetch coalesces as if there
/// were no budget.
inline constexpr std::uint64_t kOverfetchFloor = 64 << 10;

/// The over-fetch budget of a fetch of `missing` bytes: `percent`% of them, but at least
/// `min(max_gap, kOverfetchFloor)`. Saturates instead of overflowing. Pure.
[[nodiscard]] std::uint64_t overfetch_budget(std::uint64_t missing, std::uint64_t max_gap,
                                             std::uint32_t percent) noexcept;

/// Cuts every range into pieces of at most `max_chunk` bytes (0: no limit), so that many
/// connections can share one large range. Pieces are as equal as possible: a 17 MiB range
/// with 8 MiB chunks becomes 3 pieces of about 5.7 MiB, not 8 + 8 + 1.
[[nodiscard]] std::vector<ByteRange> split(std::span<const ByteRange> set, std::uint64_t max_chunk);

/// The chunk size that lets `connections` parallel transfers share `total` bytes: about
/// total / connections (rounded up), so a small fetch engages every connection as a large one
/// does, but at least `floor` (a request costs a round trip; tiny ones are not worth it) and at
/// most `ceiling` (0: no limit; a ceiling below the floor wins). Pure.
[[nodiscard]] std::uint64_t chunk_size_for(std::uint64_t total, std::size_t connections, std::uint64_t floor,
                                           std::uint64_t ceiling) noexcept;

/// How many equal pieces each of the ranges of `lengths` is cut into so that there are
/// `pieces` in all, each range's count in proportion to its length (largest remainder), every
/// range at least one piece (so more than `pieces` in all when there are more ranges). The plan
/// of a fetch that each connection does in one request. Pure.
[[nodiscard]] std::vector<std::uint64_t> pieces_per_range(std::span<const std::uint64_t> lengths, std::uint64_t pieces);

/// Cuts `range` into `pieces` pieces as equal as possible (at least one; no empty piece).
[[nodiscard]] std::vector<ByteRange> split_into(ByteRange range, std::uint64_t pieces);

/// What to transfer for one file: `wanted` minus `have`, coalesced across holes of at most
/// `max_gap` (every such hole, without a budget: see `coalesce_within`), split into chunks of at most `max_chunk`. `wanted` need not be normalized.
/// `already_held`, if given, receives the wanted bytes `have` covers (each counted once).
[[nodiscard]] std::vector<ByteRange> plan_transfers(std::vector<ByteRange> wanted,
                                                    std::span<const ByteRange> have,
                                                    std::uint64_t max_gap, std::uint64_t max_chunk,
                                                    std::uint64_t* already_held = nullptr);

}  // namespace tensorfetch::detail
