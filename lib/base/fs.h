// SPDX-License-Identifier: Apache-2.0
// Private: file-system helpers for paths built from strings that someone else chose (a
// server's commit, a user's revision, an index's shard names, cache ids), and for directories
// other users of the machine might tamper with (the cache, the Hugging Face cache).
//
// Everything below a root is reached from a directory file descriptor with openat/mkdirat and
// O_NOFOLLOW on every component, so that a path cannot leave its root through `..`, and a
// symbolic link planted by someone else is refused rather than followed. The one place that
// follows links, open_file_within, does so by resolving them itself and refuses any that lead
// outside the root (the Hugging Face cache's snapshot links into ../../blobs/).
//
// The `base` layer: no types of the layers above. Also the one way to put a file in place
// atomically (PendingFile and the replace_* functions below), errors from errno, and flock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// An owning file descriptor, closed on destruction. Move-only; not thread-safe itself (the
/// descriptor it holds may be used from any thread).
class UniqueFd {
 public:
  UniqueFd() = default;
  /// Takes ownership of `fd` (-1: none).
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept;
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  /// The descriptor (-1: none); still owned by this object.
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// True when a descriptor is held.
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Closes the held descriptor (if any) and takes `fd`.
  void reset(int fd = -1) noexcept;
  /// Closes the held descriptor now and returns what close(2) returned (0, or -1 with errno
  /// set; 0 when none was held), for writers that must report a failed close.
  int close() noexcept;
  /// Gives up ownership: returns the descriptor (-1: none), which the caller must close.
  [[nodiscard]] int release() noexcept;

 private:
  int fd_ = -1;
};

/// The error for a failed system call on `path`: "PATH: WHAT: strerror(err)", plus "(the disk
/// is full)" for ENOSPC/EDQUOT. The one rule for its code: ENOENT is `NotFound` (something
/// that should be there is not), every other errno is `Io`. Pure.
[[nodiscard]] Error sys_error(const std::string& path, std::string_view what, int err);

/// `flock(fd, op)`, retried when a signal interrupts it. False (errno set) on any other
/// failure, including EWOULDBLOCK for a LOCK_NB request that someone else's lock refuses.
[[nodiscard]] bool lock_file(int fd, int op) noexcept;

/// The names in the directory `name` of `dirfd` ("." for `dirfd` itself), without `.` and
/// `..`, in no particular order; the directory is opened with O_NOFOLLOW. `shown` names it in
/// messages.
[[nodiscard]] Result<std::vector<std::string>> list_dir_at(int dirfd, std::string_view name, const std::string& shown);

/// Who besides the user may have written what tensorfetch reads from a directory it trusts.
enum class Sharing {
  Private,  ///< only the user (or root): owner must be the user or root, no group/other write
  Group,    ///< a shared cache: any owner, group write allowed, never writable by others
};

/// Permission bits tensorfetch gives what it creates under a trusted root.
struct Modes {
  mode_t dir = 0700;       ///< directories
  mode_t file = 0600;      ///< files (data being fetched, meta.json, locks, manifests)
  mode_t readonly = 0400;  ///< complete, verified data files
};

/// The modes for `sharing`: 0700/0600/0400 private; 02770/0660/0440 for a group (setgid
/// directories, so that what members create belongs to the directory's group).
[[nodiscard]] Modes modes_for(Sharing sharing) noexcept;

/// The process's umask, read without changing it (/proc/self/status; 022 if unknown): the
/// modes of what tensorfetch creates outside its own cache (outputs, the Hugging Face cache).
[[nodiscard]] mode_t current_umask() noexcept;

/// Checks one path component that is about to become a file or directory name: not empty,
/// not `.` or `..`, no `/`, no NUL or other control character. `InvalidArgument` naming
/// `what` and the (escaped) value otherwise. Pure.
[[nodiscard]] Result<void> check_path_component(std::string_view name, std::string_view what);

/// Checks a relative path of one or more `/`-separated components, each as
/// check_path_component (so not absolute, no empty segment, no `.`/`..`). Pure.
[[nodiscard]] Result<void> check_relative_path(std::string_view path, std::string_view what);

/// Checks who may have changed the file or directory open as `fd` (shown as `shown`), as ssh
/// checks its configuration: `Private`: owned by the user or root and not writable by group or
/// others; `Group`: not writable by others. `Io` otherwise, saying why and how to fix it.
[[nodiscard]] Result<void> check_trusted(int fd, const std::string& shown, Sharing sharing);

/// Opens (with `create`: first creating it and any missing parents, mode `mode`) the
/// directory `path` chosen by the user. Symbolic links in its parents are followed (the
/// user's own configuration); the last component must not be one (`Io` "is a symbolic link",
/// saying how to fix it). `NotFound` when it does not exist and `create` is false.
[[nodiscard]] Result<UniqueFd> open_root_dir(const std::string& path, bool create, mode_t mode);

/// Opens the directory `rel` (one or more components, as check_relative_path) below `dirfd`,
/// never following a symbolic link (O_DIRECTORY|O_NOFOLLOW on every component). With `create`,
/// missing components are made with `mode` (exactly: chmod'ed past the umask). `shown` is the
/// path of `dirfd` in messages. `NotFound` when a component is missing and `create` is false.
[[nodiscard]] Result<UniqueFd> open_dir_at(int dirfd, std::string_view rel, const std::string& shown, bool create,
                                           mode_t mode);

/// Opens the regular file `name` (one component) in `dirfd` with `flags` | O_NOFOLLOW |
/// O_CLOEXEC | O_NONBLOCK (a FIFO planted there cannot block the open). A symbolic link or a
/// non-regular file is refused (`Io`, naming `shown`/`name` and what to do). With O_CREAT a new
/// file gets exactly `mode`. `NotFound` when absent (without O_CREAT).
[[nodiscard]] Result<UniqueFd> open_file_at(int dirfd, std::string_view name, int flags, mode_t mode,
                                            const std::string& shown);

/// Reads the whole regular file `name` in `dirfd` (as open_file_at), at most `max_bytes`
/// (`Io` beyond). `NotFound` when absent.
[[nodiscard]] Result<std::string> read_file_at(int dirfd, std::string_view name, std::uint64_t max_bytes,
                                               const std::string& shown);

/// A new file written under a unique temporary name beside its final name (`NAME.tmp-PID-N`,
/// created O_EXCL|O_NOFOLLOW with exactly `mode`) and put in place by `commit`: the data
/// fsync'd, the file renamed over `name` (replacing a file or a symbolic link there, never
/// following it), then the directory fsync'd, so that a reader or a crash sees the old file or
/// the new one, never a part. Dropped without `commit`, the temporary file is removed. The one
/// atomic file writer of the library: the replace_* functions below are built on it.
/// Move-only; owns a descriptor of the file and of its directory; not thread-safe.
class PendingFile {
 public:
  /// Creates the temporary file for `name` (one component) in `dirfd` (the directory stays
  /// open, duplicated, until the object goes). `shown` is the directory's path in messages.
  [[nodiscard]] static Result<PendingFile> create(int dirfd, std::string_view name, mode_t mode,
                                                  const std::string& shown);
  /// create() for a path chosen by the user: its directory must exist (links on the way are
  /// followed; the file itself is replaced, never followed).
  [[nodiscard]] static Result<PendingFile> create(const std::string& path, mode_t mode);

  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&&) = delete;
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  ~PendingFile();

  /// The open temporary file (-1 after `finish`); owned by this object.
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  /// The final path, for messages.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  /// Appends `bytes` at the file's position (retrying short writes and EINTR).
  [[nodiscard]] Result<void> write(std::string_view bytes);
  /// Appends the first `size` bytes of `source_fd` (copy_file_range, else read/write), which
  /// `source_shown` names in messages.
  [[nodiscard]] Result<void> copy_from(int source_fd, std::uint64_t size, const std::string& source_shown);
  /// Makes the data durable (fsync) and closes the file, still under its temporary name.
  /// Called by `commit` when not called before.
  [[nodiscard]] Result<void> finish();
  /// finish(), then renames the file over its final name and fsyncs the directory.
  [[nodiscard]] Result<void> commit();

 private:
  PendingFile() = default;
  UniqueFd dir_;
  UniqueFd fd_;
  std::string name_;
  std::string tmp_;
  std::string path_;
  bool finished_ = false;
  bool committed_ = false;
};

/// Replaces `name` in `dirfd` with a file holding `text` (a PendingFile: temporary name,
/// fsync, rename, directory fsync). A symbolic link at `name` is replaced, never followed.
[[nodiscard]] Result<void> write_file_atomically_at(int dirfd, std::string_view name, std::string_view text,
                                                    mode_t mode, const std::string& shown);

/// write_file_atomically_at for a path chosen by the user (its directory must exist; links in
/// the directory's path are followed, the file itself is replaced). Mode 0644 before umask.
[[nodiscard]] Result<void> write_file_atomically(const std::string& path, std::string_view text);

/// Replaces `name` in `dirfd` with a hard link to `source_path` when `try_link` and the file
/// system allows it, else with a copy of the first `size` bytes of `source_fd` (a
/// PendingFile, mode `mode`); either way through a temporary name, renamed over, the
/// directory fsync'd.
[[nodiscard]] Result<void> replace_with_link_or_copy_at(int dirfd, std::string_view name, const std::string& source_path,
                                                        int source_fd, std::uint64_t size, bool try_link, mode_t mode,
                                                        const std::string& shown);

/// Replaces `name` in `dirfd` with a symbolic link to `target` (created under a temporary name,
/// renamed over, the directory fsync'd).
[[nodiscard]] Result<void> replace_with_symlink_at(int dirfd, std::string_view name, const std::string& target,
                                                   const std::string& shown);

/// Opens for reading the regular file `rel` (a relative path, as check_relative_path) below
/// the directory `rootfd` (shown as `shown`), following symbolic links only while they stay
/// inside that directory: a link's target is resolved here, component by component, and one
/// that is absolute or climbs above the root is refused (`Io` "leads outside"). Every component
/// is then opened with O_NOFOLLOW, so a link swapped in meanwhile is refused too. At most 40
/// links. `NotFound` when a component is missing. `resolved`, if given, receives the file's
/// path relative to the root once every link is resolved (e.g. `blobs/<sha256>`).
[[nodiscard]] Result<UniqueFd> open_file_within(int rootfd, std::string_view rel, const std::string& shown,
                                                std::string* resolved = nullptr);

/// Removes `name` in `dirfd` and, when it is a directory, everything in it, never following a
/// symbolic link (a link is removed, its target left alone). A missing `name` is not an error.
/// Directories nested more than 32 levels below `name` are refused (`Io`), not walked.
[[nodiscard]] Result<void> remove_tree_at(int dirfd, std::string_view name, const std::string& shown);

}  // namespace tensorfetch::detail
