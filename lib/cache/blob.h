// SPDX-License-Identifier: Apache-2.0
// Private: the persistent cache of remote files. One blob per remote identity and origin:
//
//   ROOT/blobs/ID/data       sparse file of the remote file's full size (read-only once complete)
//   ROOT/blobs/ID/meta.json  what is present: committed extents, size, origin, source, complete flag
//   ROOT/blobs/ID/lock       flock'd (exclusive) while meta.json is replaced
//   ROOT/blobs/ID.retired-SECONDS-PID-N   a retired blob (stale bytes): never served, pruned
//
// IDs: `SHA256-ORIGINHASH` for a file whose sha256 the Hub named (X-Linked-Etag), fetched from
// one origin (the endpoint's scheme://host:port); `SHA256` for such a file once it was verified
// whole against its sha256 (renamed there from its origin's blob: the only blobs every origin
// may read); `uHASH` for any other file (hash of URL without query, ETag and size: one origin
// by construction). Partial bytes are therefore only ever served to the origin that sent them.
//
// Data is written first, made durable (fdatasync), and only then is its extent recorded, by
// writing a new meta.json beside the old one, fsyncing it and renaming it over (then fsyncing
// the directory). A crash therefore loses at most extents not yet committed, and a reader that
// serves only committed extents never serves bytes that were not fully received. Several
// processes may share one cache: commits merge under the lock with whatever the others
// committed, and a process using a blob holds a shared flock on its data file so that
// `remove_blob` (and prune) never delete a blob in use.
//
// Every file is reached from directory descriptors with O_NOFOLLOW (fs_util.h): a symbolic link
// planted in the cache is refused, never followed; directories not owned by the user or
// writable by others are refused (CacheDir, Sharing).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/fs.h"
#include "base/hash.h"
#include "base/range_set.h"
#include "tensorfetch/error.hpp"
#include "base/thread_annotations.h"

namespace tensorfetch::detail {

/// The cache root: `$TENSORFETCH_CACHE`, else `$XDG_CACHE_HOME/tensorfetch`, else
/// `~/.cache/tensorfetch`.
[[nodiscard]] std::string default_cache_root();

/// The sharing the environment asks for: `Group` when `$TENSORFETCH_SHARED_CACHE` is `1`,
/// `true`, `yes` or `on` (any case), else `Private`.
[[nodiscard]] Sharing default_cache_sharing();

/// An opened cache root and its `blobs/` and `snapshots/` directories, each checked (not a
/// symbolic link; owner and mode as `sharing` allows). Immutable after `open`; thread-safe.
class CacheDir {
 public:
  /// Opens the cache root `path`. With `create`, it and its subdirectories are made when
  /// missing (modes_for(sharing)); without, a missing root is `NotFound` and missing
  /// subdirectories are left absent. Refusals (`Io`) name the path, say why and how to fix it.
  [[nodiscard]] static Result<std::shared_ptr<const CacheDir>> open(const std::string& path, Sharing sharing,
                                                                    bool create);

  /// The root as given.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// Who may write it.
  [[nodiscard]] Sharing sharing() const noexcept { return sharing_; }
  /// The modes of what is created in it.
  [[nodiscard]] const Modes& modes() const noexcept { return modes_; }
  /// ROOT itself.
  [[nodiscard]] int root_fd() const noexcept { return root_.get(); }
  /// ROOT/blobs (-1: absent).
  [[nodiscard]] int blobs_fd() const noexcept { return blobs_.get(); }
  /// ROOT/snapshots (-1: absent).
  [[nodiscard]] int snapshots_fd() const noexcept { return snapshots_.get(); }
  /// True when both subdirectories are open (what `open(..., create=true)` guarantees; an
  /// open without `create` may find a cache another process is still making).
  [[nodiscard]] bool complete() const noexcept { return blobs_fd() >= 0 && snapshots_fd() >= 0; }
  /// ROOT/blobs as a path, for messages.
  [[nodiscard]] std::string blobs_path() const { return path_ + "/blobs"; }
  /// ROOT/snapshots as a path, for messages.
  [[nodiscard]] std::string snapshots_path() const { return path_ + "/snapshots"; }

 private:
  std::string path_;
  Sharing sharing_ = Sharing::Private;
  Modes modes_;
  UniqueFd root_, blobs_, snapshots_;
};

/// Git's blob id of `content`: hex sha1 of "blob SIZE\0" + content (the Hub's ETag of small
/// files, and the name huggingface_hub gives them in its cache).
[[nodiscard]] std::string git_blob_sha1(std::string_view content);

/// The 64 lower-case hex digits of a sha256 named in an X-Linked-Etag value (`"<hex>"`, weak
/// or not, any case), or nothing when it is not one. Pure.
[[nodiscard]] std::optional<std::string> sha256_of_linked_etag(const std::optional<std::string>& linked_etag);

/// A remote file's identity in the cache. A plain value.
struct BlobIdentity {
  std::string id;                     ///< directory name under ROOT/blobs holding this origin's bytes
  std::optional<std::string> sha256;  ///< the content's sha256, when the Hub named it (X-Linked-Etag)
  std::string origin;                 ///< scheme://host[:port] of the URL the file was asked from
};

/// The identity of a remote file asked for at `url` (the resolve URL, or the URL given): with a
/// sha256 in `linked_etag` (the Hub's X-Linked-Etag), `SHA256-H` where H is a short hash of the
/// URL's origin; else `u` + a hash of (URL without query, the ETag -- `linked_etag` if any,
/// else `etag` --, size). An `ETag`, however it looks, never gives a sha256 (the Xet CDN's is 64
/// hex digits and is not one). Pure.
[[nodiscard]] BlobIdentity blob_identity(std::string_view url, const std::optional<std::string>& linked_etag,
                                         const std::optional<std::string>& etag, std::uint64_t size);

/// What `meta.json` records. A plain value.
struct BlobMeta {
  std::uint64_t size = 0;             ///< the remote file's size
  std::optional<std::string> sha256;  ///< expected content hash, if known
  std::string url;                    ///< where it came from (query dropped), for `cache ls`
  std::optional<std::string> origin;  ///< scheme://host[:port] whose bytes these are (none: written before 0.2)
  std::optional<std::string> etag;    ///< the ETag it was pinned to
  bool complete = false;              ///< every byte present (and verified when sha256 is known)
  RangeSet extents;                   ///< committed byte ranges
  /// Set when the blob was retired (`Blob::retire`): why its bytes are stale. A retired blob
  /// records no extents (so that no process, also of an older version, serves its bytes), is
  /// never opened again for its identity, and `cache prune` removes it.
  std::optional<std::string> retired;
  std::int64_t retired_at = 0;        ///< when it was retired, seconds since the epoch
};

/// Whether `Blob::open` may create a blob.
enum class BlobCreate {
  IfMissing,  ///< create it when absent
  No,         ///< open an existing one only; `NotFound` when absent
};

/// A blob opened for reading and writing. Owns its file descriptors and mapping. Thread-safe:
/// every member may be called from any thread, also concurrently (`write_at` on one thread while
/// `commit` and `advance_hash` run on another, and `finish` while a late `advance_hash` runs).
///
/// Locking (checked by clang's -Wthread-safety, see thread_annotations.h): `mutex_` guards the
/// names, the recorded meta and the mapping, and the pointer to the streaming hasher; the
/// hasher's own state is guarded by its own mutex, which is taken without `mutex_` held (a
/// thread holding it may take `mutex_` for a message, never the reverse). The descriptors and
/// the size are set by `open` and never change.
class Blob {
 public:
  /// Opens the blob of `identity` in `cache`, of `size` bytes: for a sha256 identity, a blob
  /// verified whole against that sha256 when there is one (any origin's), else this origin's
  /// (`identity.id`), created when absent if `create` allows. An existing blob whose recorded
  /// size differs is refused (`Integrity`); one recorded for another origin holds nothing for
  /// this one. Symbolic links, and files or directories others could have changed, are refused
  /// (`Io`, naming the path). Takes a shared "in use" lock.
  [[nodiscard]] static Result<std::unique_ptr<Blob>> open(std::shared_ptr<const CacheDir> cache,
                                                          const BlobIdentity& identity, std::uint64_t size,
                                                          std::string_view url, const std::optional<std::string>& etag,
                                                          BlobCreate create = BlobCreate::IfMissing);
  ~Blob();
  Blob(const Blob&) = delete;
  Blob& operator=(const Blob&) = delete;

  /// Its directory name under ROOT/blobs (changes when `finish` shares a verified blob).
  [[nodiscard]] std::string id() const;
  /// The remote file's size.
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  /// Path of the data file (for hard links and messages; changes with `id`).
  [[nodiscard]] std::string data_path() const;
  /// The data file's descriptor (read-only once complete).
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }

  /// Writes bytes at `offset` (pwrite; not yet committed). A full disk is an `Io` error that
  /// names the file and says so.
  [[nodiscard]] Result<void> write_at(std::uint64_t offset, std::span<const std::byte> data);

  /// Allocates disk space for `range` (fallocate), so that a full disk shows before any byte
  /// is transferred. File systems without fallocate: a no-op.
  [[nodiscard]] Result<void> reserve(ByteRange range);

  /// Makes every written byte durable, then records `ranges` as present (merged with what any
  /// process committed meanwhile).
  [[nodiscard]] Result<void> commit(std::span<const ByteRange> ranges);

  /// Starts writing `range`'s written bytes to disk without waiting (sync_file_range), so that
  /// a later `commit` has less to flush. Advice only: it records nothing and makes nothing
  /// durable; a failure is ignored (the commit's fdatasync reports it).
  void start_writeback(ByteRange range) const noexcept;

  /// Re-reads meta.json (another process may have committed more). Returns the extents.
  [[nodiscard]] Result<RangeSet> refresh();

  /// Committed extents as last read or written by this object.
  [[nodiscard]] RangeSet extents() const;

  /// Whether `range` is committed (re-reading meta.json if this object's copy lacks it). A
  /// meta.json that cannot be read (a disk error, a directory in its place: `Io`, naming it) is
  /// an error, never "not committed"; one that reads but is not ours holds nothing.
  [[nodiscard]] Result<bool> holds(ByteRange range);

  /// True when every byte is present and, for a sha256 identity, verified.
  [[nodiscard]] bool complete() const;

  /// True when this is a blob verified whole that every origin may read (`SHA256`): it is never
  /// written to.
  [[nodiscard]] bool shared_verified() const noexcept { return shared_verified_; }

  /// When every byte is committed but the blob is not yet marked complete: hashes it (sha256
  /// identities), marks it complete and read-only, and makes a sha256-verified blob readable by
  /// every origin (renamed to `SHA256` unless one exists). A mismatch discards every extent
  /// (the bytes are never served) and is an `Integrity` error naming `what`. Otherwise a no-op.
  [[nodiscard]] Result<void> finish(const std::string& what);

  /// The first byte where `bytes` -- the remote file's bytes from `offset`, as a server sent
  /// them just now -- differs from what this blob has committed (re-read from meta.json): every
  /// committed extent overlapping them is compared, nothing else. Nothing when all agree.
  [[nodiscard]] Result<std::optional<std::uint64_t>> first_difference(std::uint64_t offset,
                                                                     std::span<const std::byte> bytes);

  /// Retires this blob: its bytes are stale (the remote file changed while its identity -- URL,
  /// ETag, size -- did not). Under the lock, meta.json is replaced (write, fsync, rename) by one
  /// that records it retired with no extents: no process serves its bytes any more, and commits
  /// into it fail (`Integrity`). Then its directory is renamed out of the identity's name, to
  /// `ID.retired-SECONDS-PID-N`, so that the next open of the identity (any process) makes a
  /// fresh blob; a process that finds a retired blob under the identity's name (a crash
  /// between the two steps) moves it itself. Returns the name it now has. A blob verified
  /// whole against its sha256 (`shared_verified`) is never retired (`InvalidArgument`).
  [[nodiscard]] Result<std::string> retire(const std::string& reason);

  /// True once the blob was retired (by this object or, as meta.json last read says, another).
  [[nodiscard]] bool retired() const;

  /// Read-only view of the whole file (MAP_SHARED); only committed ranges may be read from it.
  [[nodiscard]] Result<std::span<const std::byte>> map();

  /// For a whole-file fetch of a sha256 blob: hash the committed prefix as it grows (call
  /// `advance_hash` after commits, e.g. on the committer thread), so that `finish` only hashes
  /// what is left instead of the whole file.
  void enable_streaming_hash() TF_EXCLUDES(mutex_);

  /// Hashes committed bytes from where the streaming hash stopped up to the end of the first
  /// extent (while it starts at 0). Reads from the page cache, where the bytes just landed. Any
  /// thread, at any time: once `finish` has taken the hasher, a no-op.
  [[nodiscard]] Result<void> advance_hash() TF_EXCLUDES(mutex_);

 private:
  struct Hasher;
  Blob() = default;
  // One attempt of `open`: null when the identity's directory was a retired blob, which it
  // moved out of the way (`open` then tries again).
  static Result<std::unique_ptr<Blob>> open_once(const std::shared_ptr<const CacheDir>& cache,
                                                 const BlobIdentity& identity, std::uint64_t size,
                                                 std::string_view url, const std::optional<std::string>& etag,
                                                 BlobCreate create);
  Result<BlobMeta> read_meta() const TF_EXCLUDES(mutex_);
  std::string dir_path() const TF_EXCLUDES(mutex_);
  void promote() TF_EXCLUDES(mutex_);
  // End of the committed prefix [0, end) the streaming hash may read.
  std::uint64_t hashable_end() const TF_REQUIRES(mutex_);
  // Hashes `h` up to the committed prefix; takes `mutex_` (briefly) and then h's own mutex.
  Result<void> advance(Hasher& h) TF_EXCLUDES(mutex_);
  /// Under the blob's lock file: reads meta.json, applies `change`, writes it back, runs
  /// `while_locked` (if any), then keeps the result as this object's view.
  Result<void> update_meta(const std::function<void(BlobMeta&)>& change,
                           const std::function<void()>& while_locked = {}) TF_EXCLUDES(mutex_);

  // Set by `open` (before the blob is shared) and never changed: read without a lock.
  std::shared_ptr<const CacheDir> cache_;
  UniqueFd dir_fd_;
  std::optional<std::string> promote_to_;  // the sha256 of a per-origin sha256 blob
  bool shared_verified_ = false;
  std::uint64_t size_ = 0;
  UniqueFd fd_;

  mutable Mutex mutex_;
  std::string id_ TF_GUARDED_BY(mutex_);         // promote() changes the names
  std::string dir_path_ TF_GUARDED_BY(mutex_);
  std::string data_path_ TF_GUARDED_BY(mutex_);
  BlobMeta meta_ TF_GUARDED_BY(mutex_);
  void* map_ TF_GUARDED_BY(mutex_) = nullptr;
  // Streaming sha256 of [0, hashed); shared so that a running advance_hash keeps it alive while
  // finish takes it away (finish then waits for that run on the hasher's own mutex).
  std::shared_ptr<Hasher> hasher_ TF_GUARDED_BY(mutex_);
};

/// A blob as `cache ls` shows it.
struct BlobEntry {
  std::string id;
  BlobMeta meta;
  std::uint64_t present = 0;       ///< committed bytes
  std::uint64_t disk_bytes = 0;    ///< bytes the data file occupies on disk
  std::int64_t last_used = 0;      ///< seconds since the epoch (meta.json or data mtime/atime)
  bool in_use = false;             ///< another process holds it open
  bool retired = false;            ///< retired (stale bytes, never served): meta.json or its name says so
};

/// Every blob of `cache` (none if it has no blobs/). Entries that are not directories (a
/// planted symbolic link) are listed with nothing present, never followed. A blob whose
/// directory, meta.json or data file cannot be read (other than being gone) is an error naming
/// the path, not an empty entry.
[[nodiscard]] Result<std::vector<BlobEntry>> list_blobs(const CacheDir& cache);

/// Whether a blob directory name is that of a retired blob (`ID.retired-...`). Pure.
[[nodiscard]] bool is_retired_name(std::string_view name) noexcept;

/// Deletes a blob unless a process has it open (then `Busy`, "in use"). Never
/// follows a symbolic link: a link planted at ROOT/blobs/ID is removed, its target left alone.
[[nodiscard]] Result<void> remove_blob(const CacheDir& cache, const std::string& id);

/// Re-hashes a complete blob with a sha256 identity; a mismatch discards its extents and is
/// an `Integrity` error. Blobs without a known hash or not complete: checks the data file size.
[[nodiscard]] Result<void> verify_blob(const CacheDir& cache, const std::string& id);

/// Hashes `length` bytes of an open file from offset 0 with sha256, reading in 1 MiB blocks.
[[nodiscard]] Result<std::string> sha256_of_fd(int fd, std::uint64_t length, const std::string& what);

}  // namespace tensorfetch::detail
