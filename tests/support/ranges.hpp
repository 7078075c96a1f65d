// SPDX-License-Identifier: Apache-2.0
// Shared by the suites that check what travelled: an independent, deliberately simple algebra
// of byte ranges (sets of [offset, end) as sorted vectors) to compute what a fetch or a plan
// must transfer, and the HTTP Range header text the test server logs. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensorfetch/byte_range.hpp"

namespace tftest {

using tensorfetch::ByteRange;
/// A list of byte ranges; "a set" where a function says it returns one: sorted by offset,
/// disjoint, not adjacent, none empty.
using Ranges = std::vector<ByteRange>;

/// The set covering the same bytes as `r`: empty ranges dropped, overlapping and adjacent
/// ones merged, sorted.
Ranges normalized(Ranges r);

/// The set of bytes of `wanted` not in `have`.
Ranges minus(const Ranges& wanted, const Ranges& have);

/// The set of `r`, with ranges separated by holes of at most `gap` bytes joined (holes
/// included): what FetchOptions::coalesce_gap does.
Ranges coalesced(const Ranges& r, std::uint64_t gap);

/// The documented plan of a fetch (lib/fetch/planner.h): `wanted` minus `cached`, holes of at
/// most `gap` joined, each run split into the fewest pieces of at most `chunk` bytes, as equal
/// as possible (the first ones one byte longer), in offset order.
Ranges plan(const Ranges& wanted, const Ranges& cached, std::uint64_t gap, std::uint64_t chunk);

/// The fewest pieces of at most `chunk` bytes that cover every range of `r` separately.
std::size_t min_pieces(const Ranges& r, std::uint64_t chunk);

/// Sum of the lengths.
std::uint64_t total(const Ranges& r);

/// Whether two ranges share a byte.
bool intersects(const ByteRange& a, const ByteRange& b);

/// Whether a range shares a byte with any range of `set`.
bool intersects(const Ranges& set, const ByteRange& r);

/// Whether every byte of `r` is in `set`.
bool covered(const Ranges& set, const ByteRange& r);

/// "bytes=OFFSET-LAST" for a non-empty range.
std::string range_header(const ByteRange& r);

/// "bytes=a-b" → {a, b - a + 1}; nothing for any other text.
std::optional<ByteRange> parse_range(const std::string& header);

/// "[a,b) [c,d) " for failure messages.
std::string describe(const Ranges& r);

}  // namespace tftest
