// SPDX-License-Identifier: Apache-2.0
#include "mount/readahead.h"

#include <algorithm>

namespace tensorfetch::mount {

ByteRange Readahead::on_read(ByteRange read, std::uint64_t file_size) noexcept {
  const bool sequential = started_ && read.offset >= last_offset_ && read.offset <= expected_ + kSlack;
  started_ = true;
  last_offset_ = read.offset;
  expected_ = std::max(read.end(), sequential ? expected_ : 0);
  if (!sequential) {
    window_ = 0;
    ahead_end_ = 0;
    return {};
  }
  window_ = window_ == 0 ? initial_ : std::min(window_ * 2, max_);
  const std::uint64_t begin = std::max(read.end(), ahead_end_);
  const std::uint64_t end = std::min(read.end() + window_, file_size);
  if (begin >= end) return {};
  ahead_end_ = end;
  return ByteRange{begin, end - begin};
}

std::vector<ByteRange> tensor_ranges_for(std::span<const ByteRange> tensors, ByteRange read, std::uint64_t window) {
  std::vector<ByteRange> out;
  if (read.length == 0 || window == 0) return out;
  // The first tensor that ends after the read's start.
  auto it = std::partition_point(tensors.begin(), tensors.end(),
                                 [&](const ByteRange& t) { return t.end() <= read.offset; });
  for (; it != tensors.end() && it->offset < read.end(); ++it) {
    const ByteRange& t = *it;
    if (t.length == 0) continue;
    ByteRange piece = t;
    if (t.length > window) {
      const std::uint64_t from = std::max(read.offset, t.offset) - t.offset;
      const std::uint64_t to = std::min(read.end(), t.end()) - t.offset;
      const std::uint64_t begin = from / window * window;
      const std::uint64_t end = std::min(t.length, (to + window - 1) / window * window);
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
