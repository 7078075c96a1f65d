// SPDX-License-Identifier: Apache-2.0
// Shared by every test suite: temporary directories and whole-file reads and writes.
// Plain C++ (no Catch2): failures are thrown as std::runtime_error naming the path, which
// Catch2 reports as the failure of the test that called.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tftest {

namespace fs = std::filesystem;

/// A fresh directory from mkdtemp under $TMPDIR (or /tmp), named `<prefix>-XXXXXX`, removed
/// recursively on destruction (read-only entries, such as complete cache blobs, included).
/// Owns the directory; not copyable; not thread-safe.
class TempDir {
 public:
  /// Creates the directory; throws std::runtime_error (naming the template) when it cannot.
  explicit TempDir(const std::string& prefix = "tensorfetch-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The directory.
  [[nodiscard]] const fs::path& path() const { return path_; }
  /// A path inside the directory.
  [[nodiscard]] fs::path operator/(const fs::path& name) const { return path_ / name; }

 private:
  fs::path path_;
};

/// A tmpfs of `size` ("1M", "2M") mounted on `dir` (created when missing) for the life of the
/// object; mounting needs root, so a test checks mounted() and skips with error() otherwise.
class ScopedTmpfs {
 public:
  /// Mounts; never throws for a refused mount (see mounted()).
  ScopedTmpfs(fs::path dir, const std::string& size);
  /// Unmounts (lazily when busy).
  ~ScopedTmpfs();
  ScopedTmpfs(const ScopedTmpfs&) = delete;
  ScopedTmpfs& operator=(const ScopedTmpfs&) = delete;
  /// Whether the tmpfs is mounted.
  [[nodiscard]] bool mounted() const { return mounted_; }
  /// Why mounting failed (strerror), empty when mounted.
  [[nodiscard]] const std::string& error() const { return error_; }
  /// The mount point.
  [[nodiscard]] const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
  bool mounted_ = false;
  std::string error_;
};

/// The whole file as bytes; throws std::runtime_error naming the path when it cannot be read.
std::string read_file(const fs::path& path);

/// The whole file as bytes, or nothing when it cannot be opened or read (for files that may
/// legitimately be missing: a child's stderr, a cache entry that was never written).
std::optional<std::string> try_read_file(const fs::path& path);

/// Creates (or replaces) a file with these bytes, creating its parent directories; throws
/// std::runtime_error naming the path when it cannot be written.
void write_file(const fs::path& path, std::string_view bytes);

/// Copies every regular file directly in `from` into `to` (created when missing).
void copy_files(const fs::path& from, const fs::path& to);

/// Files under `dir` (recursively) whose name contains ".tmp-": what an interrupted atomic
/// write would leave behind.
std::vector<fs::path> temp_files(const fs::path& dir);

/// The reference checkpoints (TENSORFETCH_REFERENCE_DIR, set by meson test), or nothing when
/// the variable is unset or the directory holds no MANIFEST.json.
std::optional<fs::path> reference_dir();

}  // namespace tftest
