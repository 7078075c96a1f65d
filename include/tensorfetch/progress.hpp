// SPDX-License-Identifier: Apache-2.0
/// @file
/// Progress of a fetch, as the fetcher counts it and `FetchOptions::progress` is told it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tensorfetch {

/// Progress of one file in a fetch. A plain value.
struct FileProgress {
  std::size_t file = 0;            ///< position in `Checkpoint::files()`
  std::uint64_t bytes_done = 0;    ///< bytes transferred so far
  std::uint64_t bytes_total = 0;   ///< bytes to transfer
};

/// Progress of a fetch. A plain value; `per_file` is valid during the callback only.
struct FetchProgress {
  std::uint64_t bytes_done = 0;    ///< bytes transferred so far
  std::uint64_t bytes_total = 0;   ///< bytes to transfer (what the cache did not hold)
  std::uint64_t bytes_cached = 0;  ///< wanted bytes the cache already held
  std::size_t files_done = 0;      ///< files with nothing left to transfer
  std::size_t files_total = 0;     ///< files involved
  double seconds = 0;              ///< since the fetch started
  std::span<const FileProgress> per_file;  ///< each file involved
  /// When a server asked for a wait (a rate limit): how long the retry waits, from now; else 0.
  double waiting_seconds = 0;
};

}  // namespace tensorfetch
