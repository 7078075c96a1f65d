// SPDX-License-Identifier: Apache-2.0
// Private to the mount binding: the sequential-read detector (Mountpoint's prefetcher shape: a
// window that grows while reads follow each other and resets on a seek), and the tensor-aware
// planning of what a read fetches. Pure: no I/O, tested by tests/unit/test_mount_reads.cc.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensorfetch/byte_range.hpp"

namespace tensorfetch::mount {

/// Detects sequential consumption of one open file and says what to fetch ahead of it. A read
/// that starts where the last one ended (or a little after: `kSlack`, readers with several
/// threads, the kernel's own read-ahead) continues a sequential run; any other read is a seek and
/// ends it. Once a run has read `trigger` bytes, each sequential read returns a window ahead of
/// it that starts at `initial` bytes and doubles with each read up to `max`; a seek resets it.
/// Each range returned starts where the last one ended, so nothing is asked for twice. (The
/// trigger keeps a reader of one tensor, whose pages come as several reads, from fetching the
/// tensors after it.) A plain value; not thread-safe (one per open file, under its owner's lock).
class Readahead {
 public:
  /// Reads this far past the expected offset still count as sequential.
  static constexpr std::uint64_t kSlack = 128 << 10;

  /// See the class comment; `max` below `initial` is `initial`.
  Readahead(std::uint64_t trigger, std::uint64_t initial, std::uint64_t max) noexcept
      : trigger_(trigger), initial_(initial), max_(max < initial ? initial : max) {}

  /// Told of a read of `read` in a file of `file_size` bytes; returns the bytes to fetch ahead
  /// of it (length 0: none: a seek, a run shorter than the trigger, or the window already asked
  /// for).
  [[nodiscard]] ByteRange on_read(ByteRange read, std::uint64_t file_size) noexcept;

  /// The current window (0 until a run reaches the trigger, and after a seek).
  [[nodiscard]] std::uint64_t window() const noexcept { return window_; }

 private:
  std::uint64_t trigger_, initial_, max_;
  bool started_ = false;
  std::uint64_t last_offset_ = 0, expected_ = 0;  // the last read's start, and the run's end
  std::uint64_t run_ = 0;                         // bytes read by the current sequential run
  std::uint64_t window_ = 0;
  std::uint64_t ahead_end_ = 0;  // the end of what was last returned
};

/// The byte ranges a read of `read` fetches in a safetensors file: every tensor it touches,
/// whole when the tensor has at most `window` bytes, else the `window`-aligned pieces of that
/// tensor (counted from its first byte) that the read touches, so that readers of one row of a
/// huge tensor fetch one window, and neighbouring readers share aligned pieces. `tensors` are the
/// file's tensors as byte ranges of the whole file, sorted by offset (a header's order); bytes
/// of `read` outside every tensor (the header) fetch nothing. When the read touches several
/// tensors, one it touches only in its first or last `page` bytes -- where a reader of the
/// neighbouring tensor reaches it because the kernel reads whole pages -- gets only the bytes
/// touched. Sorted, not overlapping.
[[nodiscard]] std::vector<ByteRange> tensor_ranges_for(std::span<const ByteRange> tensors, ByteRange read,
                                                       std::uint64_t window, std::uint64_t page = 4096);

}  // namespace tensorfetch::mount
