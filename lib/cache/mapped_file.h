// SPDX-License-Identifier: Apache-2.0
// Private: a read-only memory mapping of a whole local file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// A read-only, private mapping of a whole file. Owns the mapping; move-only; the bytes are
/// valid until it is destroyed. Reading concurrently from several threads is safe. (A file
/// truncated by another process while mapped raises SIGBUS on access, as with any mmap.)
class MappedFile {
 public:
  /// Maps `path`; a regular file is required. Errors name the path (`NotFound`, `Io`).
  [[nodiscard]] static Result<MappedFile> open(const std::string& path);

  /// Maps the regular file open as `fd` (the descriptor stays the caller's); `path` names it
  /// in errors.
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

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tensorfetch::detail
