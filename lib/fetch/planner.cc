// SPDX-License-Identifier: Apache-2.0
#include "fetch/planner.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

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

std::vector<RangeSet> coalesce_within(std::span<const RangeSet> sets, std::uint64_t max_gap,
                                     std::uint64_t budget) {
  struct Hole {
    std::uint64_t size;
    std::size_t set, after;  // the hole after range `after` of set `set`
  };
  std::vector<Hole> holes;
  std::uint64_t sum = 0;
  for (std::size_t s = 0; s < sets.size(); ++s) {
    for (std::size_t i = 1; i < sets[s].size(); ++i) {
      const std::uint64_t gap = sets[s][i].offset - sets[s][i - 1].end();
      if (gap > max_gap) continue;
      holes.push_back(Hole{gap, s, i - 1});
      sum += gap;  // no overflow: holes of one file are disjoint parts of a 64-bit offset space
    }
  }
  std::vector<RangeSet> out;
  out.reserve(sets.size());
  if (sum <= budget) {  // all of them fit: plain coalescing
    for (const auto& set : sets) out.push_back(coalesce(set, max_gap));
    return out;
  }
  // Smallest first (stable: file, then offset order among equal holes), while they fit.
  std::stable_sort(holes.begin(), holes.end(), [](const Hole& a, const Hole& b) { return a.size < b.size; });
  std::vector<std::vector<bool>> join(sets.size());
  for (std::size_t s = 0; s < sets.size(); ++s) join[s].assign(sets[s].size(), false);
  std::uint64_t spent = 0;
  for (const auto& h : holes) {
    if (h.size > budget - spent) break;  // sorted: no later hole fits either
    spent += h.size;
    join[h.set][h.after] = true;
  }
  for (std::size_t s = 0; s < sets.size(); ++s) {
    RangeSet joined;
    for (std::size_t i = 0; i < sets[s].size(); ++i) {
      if (i > 0 && join[s][i - 1]) {
        joined.back().length = sets[s][i].end() - joined.back().offset;
      } else {
        joined.push_back(sets[s][i]);
      }
    }
    out.push_back(std::move(joined));
  }
  return out;
}

std::uint64_t overfetch_budget(std::uint64_t missing, std::uint64_t max_gap, std::uint32_t percent) noexcept {
  // missing * percent / 100 without overflow: (q * 100 + r) * p / 100 = q * p + r * p / 100.
  const std::uint64_t q = missing / 100, r = missing % 100;
  std::uint64_t share = r * percent / 100;
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  if (q != 0 && percent > (kMax - share) / q) {
    share = kMax;
  } else {
    share += q * percent;
  }
  return std::max(share, std::min(max_gap, kOverfetchFloor));
}

std::vector<ByteRange> split(std::span<const ByteRange> set, std::uint64_t max_chunk) {
  std::vector<ByteRange> out;
  for (const auto& r : set) {
    if (max_chunk == 0 || r.length <= max_chunk) {
      out.push_back(r);
      continue;
    }
    const std::uint64_t pieces = r.length / max_chunk + (r.length % max_chunk != 0 ? 1 : 0);
    for (const auto& piece : split_into(r, pieces)) out.push_back(piece);
  }
  return out;
}

std::vector<std::uint64_t> pieces_per_range(std::span<const std::uint64_t> lengths, std::uint64_t pieces) {
  std::vector<std::uint64_t> out(lengths.size(), 1);
  if (lengths.empty()) return out;
  std::uint64_t total = 0;
  for (auto l : lengths) total += l;
  if (pieces <= lengths.size() || total == 0) return out;
  // Each range's exact share of the pieces is pieces * length / total; the floors (at least 1)
  // first, then one more to the ranges with the largest remainders until `pieces` are given.
  std::vector<std::pair<long double, std::size_t>> remainders;
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const long double exact = static_cast<long double>(pieces) * static_cast<long double>(lengths[i]) /
                              static_cast<long double>(total);
    const auto whole = static_cast<std::uint64_t>(exact);
    out[i] = std::clamp<std::uint64_t>(whole, 1, std::max<std::uint64_t>(1, lengths[i]));
    given += out[i];
    remainders.emplace_back(exact - static_cast<long double>(whole), i);
  }
  std::stable_sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; given < pieces && k < remainders.size(); ++k) {
    const std::size_t i = remainders[k].second;
    if (out[i] >= lengths[i]) continue;  // no empty pieces
    ++out[i];
    ++given;
  }
  return out;
}

std::vector<ByteRange> split_into(ByteRange range, std::uint64_t pieces) {
  pieces = std::clamp<std::uint64_t>(pieces, 1, std::max<std::uint64_t>(1, range.length));
  std::vector<ByteRange> out;
  const std::uint64_t base = range.length / pieces, extra = range.length % pieces;
  std::uint64_t pos = range.offset;
  for (std::uint64_t i = 0; i < pieces; ++i) {
    const std::uint64_t len = base + (i < extra ? 1 : 0);
    out.push_back(ByteRange{pos, len});
    pos += len;
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
