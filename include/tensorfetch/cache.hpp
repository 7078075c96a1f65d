// SPDX-License-Identifier: Apache-2.0
/// @file
/// The local cache of remote files: listing, verification, removal and pruning. Safe to use
/// while other processes fetch into the same cache: a blob in use is never removed.
///
/// Every function takes the cache root (`dir`, empty: the default) and whether it is a cache
/// shared by a group (`shared`, unset: `$TENSORFETCH_SHARED_CACHE`). A private cache (the
/// default) must be owned by the user and writable by no one else; a shared one may belong to
/// other members of its group but never be writable by all users. Symbolic links inside the
/// cache are never followed (a link planted at a blob is removed by `cache_remove`, its target
/// left alone).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensorfetch/error.hpp"
#include "tensorfetch/export.hpp"

namespace tensorfetch {

/// One cached remote file ("blob"). A plain value.
struct CacheEntry {
  std::string id;                     ///< blob id: `SHA256` (verified, shared by every origin),
                                      ///< `SHA256-H` (one origin's bytes), or `u` + a hash of URL/ETag/size
  std::string url;                    ///< where it came from (query dropped)
  std::uint64_t size = 0;             ///< the remote file's size
  std::uint64_t present = 0;          ///< bytes committed to the cache
  std::uint64_t disk_bytes = 0;       ///< bytes it occupies on disk (the file is sparse)
  bool complete = false;              ///< every byte present (and verified when sha256 is known)
  std::optional<std::string> sha256;  ///< expected content hash, if the server named one
  std::int64_t last_used = 0;         ///< seconds since the epoch
  bool in_use = false;                ///< a process has it open right now
  std::string origin;                 ///< scheme://host[:port] whose bytes it holds ("" = unknown)
  /// Retired: its bytes were found stale (the remote file was rewritten while its URL, ETag and
  /// size stayed the same) and are never served again; `id` is then `ID.retired-...`, and
  /// `cache_prune` removes it whatever the size limit.
  bool retired = false;
};

/// What `cache_prune` did. A plain value.
struct PruneReport {
  std::size_t removed = 0;           ///< blobs removed
  std::uint64_t freed_bytes = 0;     ///< their disk bytes
  std::uint64_t remaining_bytes = 0; ///< disk bytes left in the cache
  std::size_t skipped_in_use = 0;    ///< blobs that would have been removed but were in use
};

/// The cache root in force: `dir` if not empty, else `$TENSORFETCH_CACHE`, else
/// `$XDG_CACHE_HOME/tensorfetch`, else `~/.cache/tensorfetch`.
[[nodiscard]] TENSORFETCH_API std::string cache_root(const std::string& dir = {});

/// Every blob, least recently used first.
[[nodiscard]] TENSORFETCH_API Result<std::vector<CacheEntry>> cache_list(const std::string& dir = {},
                                                                        std::optional<bool> shared = {});

/// Re-hashes a blob (complete blobs with a sha256); a mismatch discards its bytes and is an
/// `Integrity` error.
[[nodiscard]] TENSORFETCH_API Result<void> cache_verify(const std::string& id, const std::string& dir = {},
                                                      std::optional<bool> shared = {});

/// Removes a blob; refuses (`Busy`, "in use") while a process has it open.
[[nodiscard]] TENSORFETCH_API Result<void> cache_remove(const std::string& id, const std::string& dir = {},
                                                      std::optional<bool> shared = {});

/// Removes every retired blob (stale bytes, never served), then least recently used blobs until
/// the cache occupies at most `max_bytes` on disk. Blobs in use are kept.
[[nodiscard]] TENSORFETCH_API Result<PruneReport> cache_prune(std::uint64_t max_bytes, const std::string& dir = {},
                                                            std::optional<bool> shared = {});

}  // namespace tensorfetch
