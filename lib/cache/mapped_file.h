// SPDX-License-Identifier: Apache-2.0
// Private: a read-only memory mapping of a whole local file, and private copy-on-write mappings
// of byte ranges of a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/fs.h"
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

}  // namespace tensorfetch::detail
