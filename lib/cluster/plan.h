// SPDX-License-Identifier: Apache-2.0
// Private: the plan of a fetch over MPI. Pure: from what every rank lacks and holds, which rank
// moves each chunk (from the origin, or from its own cache) and which ranks receive it. Every
// rank computes the same plan from the same (allgathered) input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/range_set.h"
#include "tensorfetch/byte_range.hpp"

namespace tensorfetch::cluster {

/// What one rank reported: per file of the checkpoint, the byte ranges it wants and its cache
/// lacks (`need`), and those its cache holds (`held`). Both normalized.
struct RankState {
  std::vector<std::vector<ByteRange>> need;
  std::vector<std::vector<ByteRange>> held;
};

/// Bytes of a chunk passed on from its owner: `ranges` (inside the chunk, normalized) to every
/// rank of `ranks` (ascending, never the owner). Either one rank (point-to-point), or every rank
/// but the owner when all of them want the same bytes (a broadcast).
struct Delivery {
  std::vector<std::size_t> ranks;
  std::vector<ByteRange> ranges;
};

/// One unit of the plan: `range` of file `file`, held by rank `owner` -- fetched from the origin
/// into its cache first when `from_origin` -- and passed on to the ranks that want some of it.
struct ClusterChunk {
  std::size_t file = 0;
  ByteRange range;
  std::size_t owner = 0;
  bool from_origin = true;
  std::vector<Delivery> deliveries;
};

/// The union of every rank's needs, cut where the set of ranks holding the bytes changes and
/// into pieces of at most `max_chunk` bytes, in file and offset order. A piece some rank holds
/// whole is moved from the holder with the fewest bytes to send so far; the others are fetched
/// from the origin by the rank with the fewest origin bytes so far (ties: the lowest rank).
/// Each other rank that wants some of a piece receives exactly the bytes it wants (the piece's
/// intersection with its `need`). `ranks` must not be empty and every rank must report `files`
/// files.
[[nodiscard]] std::vector<ClusterChunk> plan_cluster(std::span<const RankState> ranks, std::size_t files,
                                                     std::uint64_t max_chunk);

/// The part of `set` (normalized) inside `range`, normalized. O(log |set| + the result).
[[nodiscard]] std::vector<ByteRange> clip(std::span<const ByteRange> set, ByteRange range);

/// Cuts `ranges` into consecutive groups of at most `limit` bytes each (a range longer than
/// what is left of a group is split), in order. Pure.
[[nodiscard]] std::vector<std::vector<ByteRange>> group(std::span<const ByteRange> ranges, std::uint64_t limit);

}  // namespace tensorfetch::cluster
