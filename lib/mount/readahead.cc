// SPDX-License-Identifier: Apache-2.0
#include "mount/readahead.h"

#include <algorithm>

namespace tensorfetch::mount {

ByteRange Readahead::on_read(ByteRange read, std::uint64_t file_size) noexcept {
  const bool sequential = started_ && read.offset >= last_offset_ && read.offset <= expected_ + kSlack;
  started_ = true;
  last_offset_ = read.offset;
  if (!sequential) {
    expected_ = read.end();
    run_ = read.length;
    window_ = 0;
    ahead_end_ = 0;
    return {};
  }
  run_ += read.end() > expected_ ? read.end() - std::max(expected_, read.offset) : 0;
  expected_ = std::max(expected_, read.end());
  if (run_ < trigger_) return {};
  window_ = window_ == 0 ? initial_ : std::min(window_ * 2, max_);
  const std::uint64_t begin = std::max(read.end(), ahead_end_);
  const std::uint64_t end = std::min(read.end() + window_, file_size);
  if (begin >= end) return {};
  ahead_end_ = end;
  return ByteRange{begin, end - begin};
}

std::vector<ByteRange> tensor_ranges_for(std::span<const ByteRange> tensors, ByteRange read, std::uint64_t window,
                                         std::uint64_t page) {
  std::vector<ByteRange> out;
  if (read.length == 0 || window == 0) return out;
  // The first tensor that ends after the read's start.
  auto it = std::partition_point(tensors.begin(), tensors.end(),
                                 [&](const ByteRange& t) { return t.end() <= read.offset; });
  const auto last = std::partition_point(it, tensors.end(), [&](const ByteRange& t) { return t.offset < read.end(); });
  const bool several = last - it > 1;
  for (; it != last; ++it) {
    const ByteRange& t = *it;
    if (t.length == 0) continue;
    ByteRange piece = t;
    const std::uint64_t from = std::max(read.offset, t.offset), to = std::min(read.end(), t.end());
    const bool head_edge = t.offset < read.offset && t.end() <= read.end() && t.end() - read.offset <= page;
    const bool tail_edge = t.offset > read.offset && t.end() > read.end() && read.end() - t.offset <= page;
    if (several && (head_edge || tail_edge)) {
      piece = ByteRange{from, to - from};
    } else if (t.length > window) {
      const std::uint64_t begin = (from - t.offset) / window * window;
      const std::uint64_t end = std::min(t.length, (to - t.offset + window - 1) / window * window);
      piece = ByteRange{t.offset + begin, end - begin};
    }
    if (!out.empty() && out.back().end() == piece.offset) {
      out.back().length += piece.length;
    } else {
      out.push_back(piece);
    }
  }
  return out;
}

}  // namespace tensorfetch::mount
