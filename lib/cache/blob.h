// SPDX-License-Identifier: Apache-2.0
// Private: the persistent cache of remote files. One blob per remote identity:
//
//   ROOT/blobs/ID/data       sparse file of the remote file's full size (read-only once complete)
//   ROOT/blobs/ID/meta.json  what is present: committed extents, size, source, complete flag
//   ROOT/blobs/ID/lock       flock'd (exclusive) while meta.json is replaced
//
// Data is written first, made durable (fdatasync), and only then is its extent recorded, by
// writing a new meta.json beside the old one, fsyncing it and renaming it over (then fsyncing
// the directory). A crash therefore loses at most extents not yet committed, and a reader that
// serves only committed extents never serves bytes that were not fully received. Several
// processes may share one cache: commits merge under the lock with whatever the others
// committed, and a process using a blob holds a shared flock on its data file so that
// `remove_blob` (and prune) never delete a blob in use.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fetch/planner.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// The cache root: `$TENSORFETCH_CACHE`, else `$XDG_CACHE_HOME/tensorfetch`, else
/// `~/.cache/tensorfetch`.
[[nodiscard]] std::string default_cache_root();

/// Replaces `path` with `text` so that a reader sees the old or the new file, never a part:
/// written to a temporary name beside it, fsync'd, renamed over, and the directory fsync'd.
/// The directory must exist.
[[nodiscard]] Result<void> write_file_atomically(const std::string& path, std::string_view text);

/// Lower-case hex sha256 of `bytes` (OpenSSL).
[[nodiscard]] std::string sha256_hex(std::string_view bytes);

/// Git's blob id of `content`: hex sha1 of "blob SIZE\0" + content (the Hub's ETag of small
/// files, and the name huggingface_hub gives them in its cache).
[[nodiscard]] std::string git_blob_sha1(std::string_view content);

/// A remote file's identity in the cache.
struct BlobIdentity {
  std::string id;                     ///< directory name under ROOT/blobs
  std::optional<std::string> sha256;  ///< the content's sha256, when the ETag is one (Hub LFS)
};

/// The identity of a remote file: its sha256 when `etag` is one (`"<64 hex>"`, as the Hub's
/// X-Linked-Etag), else a hash of (URL without query, ETag, size). Pure.
[[nodiscard]] BlobIdentity blob_identity(std::string_view url, const std::optional<std::string>& etag,
                                         std::uint64_t size);

/// What `meta.json` records. A plain value.
struct BlobMeta {
  std::uint64_t size = 0;             ///< the remote file's size
  std::optional<std::string> sha256;  ///< expected content hash, if known
  std::string url;                    ///< where it came from (query dropped), for `cache ls`
  std::optional<std::string> etag;    ///< the ETag it was pinned to
  bool complete = false;              ///< every byte present (and verified when sha256 is known)
  RangeSet extents;                   ///< committed byte ranges
};

/// A blob opened for reading and writing. Owns its file descriptors and mapping. Thread-safe:
/// `write_at` may run on one thread while `commit` runs on another.
class Blob {
 public:
  /// Opens (creating if needed) the blob `identity.id` under `root`, of `size` bytes. An existing
  /// blob whose recorded size differs is refused (`Integrity`). Takes a shared "in use" lock.
  [[nodiscard]] static Result<std::unique_ptr<Blob>> open(const std::string& root, const BlobIdentity& identity,
                                                          std::uint64_t size, std::string_view url,
                                                          const std::optional<std::string>& etag);
  ~Blob();
  Blob(const Blob&) = delete;
  Blob& operator=(const Blob&) = delete;

  [[nodiscard]] const std::string& id() const noexcept { return id_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& data_path() const noexcept { return data_path_; }
  [[nodiscard]] int fd() const noexcept { return fd_; }

  /// Writes bytes at `offset` (pwrite; not yet committed). A full disk is an `Io` error that
  /// names the file and says so.
  [[nodiscard]] Result<void> write_at(std::uint64_t offset, std::span<const std::byte> data);

  /// Allocates disk space for `range` (fallocate), so that a full disk shows before any byte
  /// is transferred. File systems without fallocate: a no-op.
  [[nodiscard]] Result<void> reserve(ByteRange range);

  /// Makes every written byte durable, then records `ranges` as present (merged with what any
  /// process committed meanwhile).
  [[nodiscard]] Result<void> commit(std::span<const ByteRange> ranges);

  /// Re-reads meta.json (another process may have committed more). Returns the extents.
  [[nodiscard]] Result<RangeSet> refresh();

  /// Committed extents as last read or written by this object.
  [[nodiscard]] RangeSet extents() const;

  /// True when `range` is committed (re-reading meta.json if this object's copy lacks it).
  [[nodiscard]] bool has(ByteRange range);

  /// True when every byte is present and, for a sha256 identity, verified.
  [[nodiscard]] bool complete() const;

  /// When every byte is committed but the blob is not yet marked complete: hashes it (sha256
  /// identities), marks it complete and read-only. A mismatch discards every extent (the bytes
  /// are never served) and is an `Integrity` error naming `what`. Otherwise a no-op.
  [[nodiscard]] Result<void> finish(const std::string& what);

  /// Read-only view of the whole file (MAP_SHARED); only committed ranges may be read from it.
  [[nodiscard]] Result<std::span<const std::byte>> map();

  /// For a whole-file fetch of a sha256 blob: hash the committed prefix as it grows (call
  /// `advance_hash` after commits, e.g. on the committer thread), so that `finish` only hashes
  /// what is left instead of the whole file.
  void enable_streaming_hash();

  /// Hashes committed bytes from where the streaming hash stopped up to the end of the first
  /// extent (while it starts at 0). Reads from the page cache, where the bytes just landed.
  [[nodiscard]] Result<void> advance_hash();

 private:
  Blob() = default;
  Result<void> write_meta_locked(const BlobMeta& meta);
  Result<BlobMeta> read_meta() const;

  std::string dir_, id_, data_path_, meta_path_, lock_path_;
  std::uint64_t size_ = 0;
  int fd_ = -1;
  mutable std::mutex mutex_;
  BlobMeta meta_;
  void* map_ = nullptr;
  struct Hasher;
  std::unique_ptr<Hasher> hasher_;  // streaming sha256 of [0, hashed)
};

/// A blob as `cache ls` shows it.
struct BlobEntry {
  std::string id;
  BlobMeta meta;
  std::uint64_t present = 0;       ///< committed bytes
  std::uint64_t disk_bytes = 0;    ///< bytes the data file occupies on disk
  std::int64_t last_used = 0;      ///< seconds since the epoch (meta.json or data mtime/atime)
  bool in_use = false;             ///< another process holds it open
};

/// Every blob under `root` (none if the directory does not exist).
[[nodiscard]] Result<std::vector<BlobEntry>> list_blobs(const std::string& root);

/// Deletes a blob unless a process has it open (then `InvalidArgument`, "in use").
[[nodiscard]] Result<void> remove_blob(const std::string& root, const std::string& id);

/// Re-hashes a complete blob with a sha256 identity; a mismatch discards its extents and is
/// an `Integrity` error. Blobs without a known hash or not complete: checks the data file size.
[[nodiscard]] Result<void> verify_blob(const std::string& root, const std::string& id);

/// Hashes `length` bytes of an open file from offset 0 with sha256, reading in 1 MiB blocks.
[[nodiscard]] Result<std::string> sha256_of_fd(int fd, std::uint64_t length, const std::string& what);

}  // namespace tensorfetch::detail
