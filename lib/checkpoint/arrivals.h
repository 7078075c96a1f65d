// SPDX-License-Identifier: Apache-2.0
// Private: what a running fetch has written so far, for a writer that copies each tensor out
// as soon as its bytes are there (Checkpoint::fetch_and_write).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <span>

#include "base/range_set.h"
#include "tensorfetch/byte_range.hpp"

namespace tensorfetch::detail {

/// Byte ranges of a checkpoint's files that a fetch wrote to their cache blobs (durable or not
/// yet), plus whether the fetch has ended. The fetch's thread adds; a writer's thread waits.
/// Thread-safe.
class Arrivals {
 public:
  /// What `wait` found.
  enum class Outcome {
    Here,         ///< every needed byte was written by the fetch (or present when it began)
    NotTracked,   ///< the file is not part of the fetch: read it as usual
    FetchEnded,   ///< the fetch ended without writing them all: read as usual (and fail there)
    FetchFailed,  ///< the fetch failed
    Stopped,      ///< `stop` said so
  };

  /// Makes file `file` part of the fetch, with `present` (normalized) already in its blob.
  void track(std::size_t file, RangeSet present);

  /// `range` of file `file` was written (any thread; a file not tracked is ignored).
  void add(std::size_t file, ByteRange range);

  /// The fetch ended: `ok` when it succeeded. Wakes every wait.
  void finish(bool ok);

  /// True when `wait` would not block on the fetch: every range of `needed` was written, the
  /// file is not tracked, or the fetch has ended.
  [[nodiscard]] bool here(std::size_t file, std::span<const ByteRange> needed);

  /// Waits until every range of `needed` (of file `file`) was written, the fetch ends, or
  /// `stop()` returns true (asked every `poll_ms`).
  [[nodiscard]] Outcome wait(std::size_t file, std::span<const ByteRange> needed, const std::function<bool()>& stop,
                             long poll_ms = 50);

  /// Waits until the fetch ends (true: it succeeded) or `stop()` returns true (false).
  [[nodiscard]] bool wait_end(const std::function<bool()>& stop, long poll_ms = 50);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::size_t, RangeSet> written_;  // per tracked file
  bool ended_ = false;
  bool ok_ = false;
};

}  // namespace tensorfetch::detail
