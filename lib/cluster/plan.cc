// SPDX-License-Identifier: Apache-2.0
#include "cluster/plan.h"

#include <algorithm>

namespace tensorfetch::cluster {

namespace {

// The ranks whose `held` covers `range` of file `file`.
std::vector<std::size_t> holders(std::span<const RankState> ranks, std::size_t file, ByteRange range) {
  std::vector<std::size_t> out;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (detail::covers(ranks[r].held[file], range)) out.push_back(r);
  }
  return out;
}

// Who receives which bytes of `range` of file `file` from `owner`.
std::vector<Delivery> deliveries(std::span<const RankState> ranks, std::size_t file, ByteRange range,
                                 std::size_t owner) {
  std::vector<Delivery> out;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (r == owner) continue;
    auto wanted = clip(ranks[r].need[file], range);
    if (!wanted.empty()) out.push_back(Delivery{{r}, std::move(wanted)});
  }
  // Every other rank wants the same bytes: one broadcast.
  if (out.size() + 1 == ranks.size() && out.size() > 1 &&
      std::all_of(out.begin(), out.end(), [&](const Delivery& d) { return d.ranges == out.front().ranges; })) {
    Delivery all{{}, std::move(out.front().ranges)};
    for (const auto& d : out) all.ranks.push_back(d.ranks.front());
    out.assign(1, std::move(all));
  }
  return out;
}

// The position in `load` of the smallest value among `candidates` (ties: the first).
std::size_t least_loaded(std::span<const std::uint64_t> load, std::span<const std::size_t> candidates) {
  return *std::min_element(candidates.begin(), candidates.end(),
                           [&](std::size_t a, std::size_t b) { return load[a] < load[b]; });
}

}  // namespace

std::vector<ClusterChunk> plan_cluster(std::span<const RankState> ranks, std::size_t files, std::uint64_t max_chunk) {
  std::vector<ClusterChunk> plan;
  std::vector<std::uint64_t> origin_load(ranks.size(), 0), send_load(ranks.size(), 0);
  std::vector<std::size_t> everyone(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) everyone[r] = r;
  for (std::size_t file = 0; file < files; ++file) {
    std::vector<ByteRange> all;
    for (const auto& rank : ranks) all.insert(all.end(), rank.need[file].begin(), rank.need[file].end());
    const detail::RangeSet wanted = detail::normalize(std::move(all));
    // Cut points: the ends of the wanted ranges and of every rank's held ranges.
    std::vector<std::uint64_t> cuts;
    for (const auto& w : wanted) {
      cuts.push_back(w.offset);
      cuts.push_back(w.end());
    }
    for (const auto& rank : ranks) {
      for (const auto& h : rank.held[file]) {
        cuts.push_back(h.offset);
        cuts.push_back(h.end());
      }
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    // Runs of wanted bytes held by the same ranks.
    struct Run {
      ByteRange range;
      std::vector<std::size_t> holders;
    };
    std::vector<Run> runs;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      const ByteRange piece{cuts[i], cuts[i + 1] - cuts[i]};
      if (!detail::covers(wanted, piece)) continue;
      auto who = holders(ranks, file, piece);
      if (!runs.empty() && runs.back().range.end() == piece.offset && runs.back().holders == who) {
        runs.back().range.length += piece.length;
      } else {
        runs.push_back(Run{piece, std::move(who)});
      }
    }
    for (const auto& run : runs) {
      // As equal pieces of at most max_chunk bytes.
      const std::uint64_t n = max_chunk == 0 ? 1 : (run.range.length + max_chunk - 1) / max_chunk;
      for (std::uint64_t k = 0; k < n; ++k) {
        const std::uint64_t begin = run.range.offset + run.range.length * k / n;
        const std::uint64_t end = run.range.offset + run.range.length * (k + 1) / n;
        ClusterChunk c;
        c.file = file;
        c.range = ByteRange{begin, end - begin};
        c.from_origin = run.holders.empty();
        c.owner = c.from_origin ? least_loaded(origin_load, everyone) : least_loaded(send_load, run.holders);
        if (c.from_origin) origin_load[c.owner] += c.range.length;
        c.deliveries = deliveries(ranks, file, c.range, c.owner);
        for (const auto& d : c.deliveries) send_load[c.owner] += detail::total_bytes(d.ranges) * d.ranks.size();
        plan.push_back(std::move(c));
      }
    }
  }
  return plan;
}

std::vector<ByteRange> clip(std::span<const ByteRange> set, ByteRange range) {
  std::vector<ByteRange> out;
  // The first range ending after the start of `range`.
  auto it = std::upper_bound(set.begin(), set.end(), range.offset,
                             [](std::uint64_t at, const ByteRange& r) { return at < r.end(); });
  for (; it != set.end() && it->offset < range.end(); ++it) {
    const std::uint64_t begin = std::max(it->offset, range.offset);
    const std::uint64_t end = std::min(it->end(), range.end());
    if (end > begin) out.push_back(ByteRange{begin, end - begin});
  }
  return out;
}

std::vector<std::vector<ByteRange>> group(std::span<const ByteRange> ranges, std::uint64_t limit) {
  std::vector<std::vector<ByteRange>> out;
  std::uint64_t room = 0;
  for (ByteRange r : ranges) {
    while (r.length > 0) {
      if (room == 0) {
        out.emplace_back();
        room = limit;
      }
      const std::uint64_t take = std::min(room, r.length);
      out.back().push_back(ByteRange{r.offset, take});
      r = ByteRange{r.offset + take, r.length - take};
      room -= take;
    }
  }
  return out;
}

}  // namespace tensorfetch::cluster
