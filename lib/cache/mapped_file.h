// SPDX-License-Identifier: Apache-2.0
// Private: a read-only memory mapping of a whole local file, and private copy-on-write mappings
// of byte ranges of a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/fs.h"
#include "base/thread_annotations.h"
#include "tensorfetch/byte_range.hpp"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// A read-only, private mapping of a whole file, and the file's descriptor (kept open, read-only,
/// so that `map_private` can map parts of the same file later without opening its path again).
/// Owns both; move-only; the bytes are valid until it is destroyed. Reading concurrently from
/// several threads is safe. (A file truncated by another process while mapped raises SIGBUS on
/// access, as with any mmap.)
class MappedFile {
 public:
  /// Maps `path`; a regular file is required. Errors name the path (`NotFound`, `Io`).
  [[nodiscard]] static Result<MappedFile> open(const std::string& path);

  /// Maps the regular file open as `fd` (the descriptor stays the caller's: this object keeps a
  /// duplicate); `path` names it in errors.
  [[nodiscard]] static Result<MappedFile> map_fd(int fd, const std::string& path);

  /// Maps `path` only if it lies inside the directory `root` (both as the user gave them):
  /// `path` must be `root/REL`, and symbolic links below `root` are followed only while they
  /// stay inside it (fs_util.h, open_file_within). An empty `root` maps `path` as `open` does.
  [[nodiscard]] static Result<MappedFile> open_within(const std::string& root, const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  /// The file's bytes (empty for an empty file).
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(data_), size_};
  }
  /// The file's size in bytes.
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  /// The mapped file's descriptor, open read-only (-1 for a default-constructed object).
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }

 private:
  static Result<MappedFile> map_owned(UniqueFd fd, const std::string& path);

  UniqueFd fd_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Bytes of a private copy-on-write mapping (see `map_private`) and the owner of that mapping:
/// the bytes stay valid while a copy of `owner` lives (it unmaps them when the last copy goes).
struct PrivateBytes {
  std::span<std::byte> bytes;   ///< the range asked for (empty for an empty range; `owner` null)
  std::shared_ptr<void> owner;  ///< keeps the mapping
};

/// Maps `range` of the file open as `fd` (readable; the descriptor stays the caller's) privately:
/// MAP_PRIVATE, readable and writable. A write copies the page it touches into this process's
/// anonymous memory: it never reaches the file, its page cache, or any other mapping of it (each
/// call makes its own mapping). Pages never written are the file's page cache, which shows the
/// file's current bytes: serve only bytes that no longer change (a local file, committed cache
/// ranges). No swap space is reserved (MAP_NORESERVE), so a tensor larger than memory maps. Each
/// live mapping is one memory area of the process (`vm.max_map_count`, 65530 by default); when
/// the kernel refuses one, the `Io` error says so. Errors name `path` and the byte range. Any
/// thread.
[[nodiscard]] Result<PrivateBytes> map_private(int fd, ByteRange range, const std::string& path);

/// `range` widened to whole pages, and cut at `size` (a file's end): the bytes that share a page
/// with `range`. Pure.
[[nodiscard]] ByteRange page_hull(ByteRange range, std::uint64_t size);

/// One private copy-on-write mapping (see `map_private`) of each whole file of a checkpoint,
/// made on first use and shared by every caller, as PyTorch's `from_file(shared=False)` storage
/// is shared by safetensors' tensors of one file: a write through one range is seen by later
/// callers of the same range. Only for bytes that never change (a local file; a cache blob's
/// committed ranges): a page copied on write would keep whatever the file held then, so a range
/// whose pages (`page_hull`) hold bytes that may still change must be mapped on its own.
/// Thread-safe.
class PrivateMaps {
 public:
  /// `range` of file number `file` (open as `fd`, `size` bytes) in that file's mapping, made now
  /// if this is the first use; `path` names the file in errors.
  [[nodiscard]] Result<PrivateBytes> get(std::size_t file, int fd, std::uint64_t size, ByteRange range,
                                         const std::string& path) TF_EXCLUDES(mutex_);

 private:
  Mutex mutex_;
  std::vector<PrivateBytes> maps_ TF_GUARDED_BY(mutex_);  // by file; empty: not made yet
};

}  // namespace tensorfetch::detail
