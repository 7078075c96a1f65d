// SPDX-License-Identifier: Apache-2.0
#include "fetch/planner.h"

#include <algorithm>

namespace tensorfetch::detail {

RangeSet coalesce(std::span<const ByteRange> set, std::uint64_t max_gap) {
  RangeSet out;
  for (const auto& r : set) {
    if (!out.empty() && r.offset - out.back().end() <= max_gap) {
      out.back().length = r.end() - out.back().offset;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<ByteRange> split(std::span<const ByteRange> set, std::uint64_t max_chunk) {
  std::vector<ByteRange> out;
  for (const auto& r : set) {
    if (max_chunk == 0 || r.length <= max_chunk) {
      out.push_back(r);
      continue;
    }
    const std::uint64_t pieces = r.length / max_chunk + (r.length % max_chunk != 0 ? 1 : 0);
    const std::uint64_t base = r.length / pieces, extra = r.length % pieces;
    std::uint64_t pos = r.offset;
    for (std::uint64_t i = 0; i < pieces; ++i) {
      const std::uint64_t len = base + (i < extra ? 1 : 0);
      out.push_back(ByteRange{pos, len});
      pos += len;
    }
  }
  return out;
}

std::uint64_t chunk_size_for(std::uint64_t total, std::size_t connections, std::uint64_t floor,
                             std::uint64_t ceiling) noexcept {
  const std::uint64_t n = std::max<std::uint64_t>(1, connections);
  std::uint64_t c = total / n + (total % n != 0 ? 1 : 0);
  c = std::max(c, floor);
  if (ceiling != 0) c = std::min(c, ceiling);
  return std::max<std::uint64_t>(c, 1);
}

std::vector<ByteRange> plan_transfers(std::vector<ByteRange> wanted, std::span<const ByteRange> have,
                                      std::uint64_t max_gap, std::uint64_t max_chunk, std::uint64_t* already_held) {
  const RangeSet want = normalize(std::move(wanted));
  const RangeSet missing = subtract(want, have);
  if (already_held) *already_held = total_bytes(want) - total_bytes(missing);
  return split(coalesce(missing, max_gap), max_chunk);
}

}  // namespace tensorfetch::detail
