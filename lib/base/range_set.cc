// SPDX-License-Identifier: Apache-2.0
#include "base/range_set.h"

#include <algorithm>

namespace tensorfetch::detail {

RangeSet normalize(std::vector<ByteRange> ranges) {
  std::erase_if(ranges, [](const ByteRange& r) { return r.length == 0; });
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  RangeSet out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.offset <= out.back().end()) {
      out.back().length = std::max(out.back().end(), r.end()) - out.back().offset;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

void add_range(RangeSet& set, ByteRange range) {
  if (range.length == 0) return;
  // First range that ends at or after range.offset (may touch it).
  auto first = std::lower_bound(set.begin(), set.end(), range.offset,
                                [](const ByteRange& r, std::uint64_t off) { return r.end() < off; });
  auto last = first;
  std::uint64_t begin = range.offset, end = range.end();
  while (last != set.end() && last->offset <= end) {
    begin = std::min(begin, last->offset);
    end = std::max(end, last->end());
    ++last;
  }
  first = set.erase(first, last);
  set.insert(first, ByteRange{begin, end - begin});
}

RangeSet subtract(std::span<const ByteRange> wanted, std::span<const ByteRange> have) {
  RangeSet out;
  std::size_t h = 0;
  for (const auto& w : wanted) {
    std::uint64_t pos = w.offset;
    const std::uint64_t end = w.end();
    while (h < have.size() && have[h].end() <= pos) ++h;
    std::size_t k = h;
    while (pos < end) {
      if (k >= have.size() || have[k].offset >= end) {
        out.push_back(ByteRange{pos, end - pos});
        break;
      }
      if (have[k].offset > pos) out.push_back(ByteRange{pos, have[k].offset - pos});
      pos = std::max(pos, have[k].end());
      ++k;
    }
  }
  return out;
}

bool covers(std::span<const ByteRange> set, ByteRange range) noexcept {
  if (range.length == 0) return true;
  auto it = std::upper_bound(set.begin(), set.end(), range.offset,
                             [](std::uint64_t off, const ByteRange& r) { return off < r.offset; });
  if (it == set.begin()) return false;
  --it;
  return it->offset <= range.offset && it->end() >= range.end();
}

std::uint64_t total_bytes(std::span<const ByteRange> ranges) noexcept {
  std::uint64_t n = 0;
  for (const auto& r : ranges) n += r.length;
  return n;
}

}  // namespace tensorfetch::detail
