// SPDX-License-Identifier: Apache-2.0
#include "ranges.hpp"

#include <algorithm>
#include <charconv>

namespace tftest {

Ranges normalized(Ranges r) {
  std::erase_if(r, [](const ByteRange& x) { return x.length == 0; });
  std::sort(r.begin(), r.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  Ranges out;
  for (const auto& x : r) {
    if (!out.empty() && x.offset <= out.back().end()) {
      out.back().length = std::max(out.back().end(), x.end()) - out.back().offset;
    } else {
      out.push_back(x);
    }
  }
  return out;
}

Ranges minus(const Ranges& wanted, const Ranges& have) {
  const Ranges h = normalized(have);
  Ranges out;
  for (const auto& w : normalized(wanted)) {
    std::uint64_t pos = w.offset;
    for (const auto& x : h) {
      if (x.end() <= pos || x.offset >= w.end()) continue;
      if (x.offset > pos) out.push_back({pos, x.offset - pos});
      pos = std::max(pos, x.end());
    }
    if (pos < w.end()) out.push_back({pos, w.end() - pos});
  }
  return out;
}

Ranges coalesced(const Ranges& r, std::uint64_t gap) {
  Ranges out;
  for (const auto& x : normalized(r)) {
    if (!out.empty() && x.offset - out.back().end() <= gap) {
      out.back().length = x.end() - out.back().offset;
    } else {
      out.push_back(x);
    }
  }
  return out;
}

Ranges plan(const Ranges& wanted, const Ranges& cached, std::uint64_t gap, std::uint64_t chunk) {
  Ranges out;
  for (const auto& r : coalesced(minus(wanted, cached), gap)) {
    const std::uint64_t pieces = (r.length + chunk - 1) / chunk;
    const std::uint64_t base = r.length / pieces, extra = r.length % pieces;
    std::uint64_t pos = r.offset;
    for (std::uint64_t i = 0; i < pieces; ++i) {
      const std::uint64_t len = base + (i < extra ? 1 : 0);
      out.push_back({pos, len});
      pos += len;
    }
  }
  return out;
}

std::size_t min_pieces(const Ranges& r, std::uint64_t chunk) {
  std::size_t n = 0;
  for (const auto& x : r) n += static_cast<std::size_t>((x.length + chunk - 1) / chunk);
  return n;
}

std::uint64_t total(const Ranges& r) {
  std::uint64_t n = 0;
  for (const auto& x : r) n += x.length;
  return n;
}

bool intersects(const ByteRange& a, const ByteRange& b) { return a.offset < b.end() && b.offset < a.end(); }

bool intersects(const Ranges& set, const ByteRange& r) {
  return std::any_of(set.begin(), set.end(), [&](const ByteRange& x) { return intersects(x, r); });
}

bool covered(const Ranges& set, const ByteRange& r) { return minus({r}, set).empty(); }

std::string range_header(const ByteRange& r) {
  return "bytes=" + std::to_string(r.offset) + "-" + std::to_string(r.end() - 1);
}

std::optional<ByteRange> parse_range(const std::string& header) {
  if (!header.starts_with("bytes=")) return std::nullopt;
  const auto dash = header.find('-');
  if (dash == std::string::npos) return std::nullopt;
  std::uint64_t a = 0, b = 0;
  const char* first = header.data() + 6;
  const char* mid = header.data() + dash;
  const char* last = header.data() + header.size();
  auto ra = std::from_chars(first, mid, a);
  auto rb = std::from_chars(mid + 1, last, b);
  if (ra.ec != std::errc() || ra.ptr != mid || rb.ec != std::errc() || rb.ptr != last || b < a) return std::nullopt;
  return ByteRange{a, b - a + 1};
}

std::string describe(const Ranges& r) {
  std::string s;
  for (const auto& x : r) s += "[" + std::to_string(x.offset) + "," + std::to_string(x.end()) + ") ";
  return s;
}

}  // namespace tftest
