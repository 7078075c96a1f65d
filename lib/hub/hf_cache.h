// SPDX-License-Identifier: Apache-2.0
// Private: the Hugging Face cache layout, as huggingface_hub reads and writes it:
//
//   HF_HUB_CACHE/models--ORG--NAME/           (datasets--ORG--NAME for datasets)
//     blobs/<sha256>                          LFS files, named by their sha256
//     blobs/<git sha1>                        small git files (config.json, the index)
//     snapshots/<commit>/<path>               relative symlinks into ../../blobs/
//     refs/<revision>                         the commit a branch or tag pointed at
//
// Reading follows a snapshot's links only while they stay inside the repo's directory;
// writing reaches everything below it with O_NOFOLLOW from directory descriptors, and every
// name comes from a checked string (a 40-hex commit, a sha256, a checked revision and shard
// names), so nothing lands outside it. Modes follow the umask, as huggingface_hub's do.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "base/fs.h"
#include "hub/location.h"
#include "tensorfetch/error.hpp"

namespace tensorfetch::detail {

/// The Hugging Face cache directory of a Hub repo: `hub_cache` + `/models--ORG--NAME`
/// (`datasets--...` for datasets), named after the id as given, as huggingface_hub names it.
/// Empty when `hub_cache` is. Pure.
[[nodiscard]] std::string hf_repo_dir(const std::string& hub_cache, const HubRef& hub);

/// `snapshots/COMMIT/PATH`: where a repo file of a commit is, relative to the repo directory. Pure.
[[nodiscard]] std::string hf_snapshot_path(const std::string& commit, const std::string& path);

/// `blobs/NAME`: where a file whose name (sha256, or git sha1 for small files) is NAME is. Pure.
[[nodiscard]] std::string hf_blob_path(const std::string& name);

/// Opens the repo directory `repo_dir` of the Hugging Face cache for reading (following links,
/// the user's own configuration). `NotFound` when it does not exist.
[[nodiscard]] Result<UniqueFd> open_hf_repo(const std::string& repo_dir);

/// The commit `refs/REVISION` names in the repo directory open as `repo` (shown as
/// `repo_dir`): nullopt when there is no such ref; `Io` when it holds something other than a
/// commit id (40 lower-case hex digits).
[[nodiscard]] Result<std::optional<std::string>> read_hf_ref(int repo, const std::string& repo_dir,
                                                             const std::string& revision);

/// True when `snapshots/COMMIT` is a directory (not a link) in the repo directory open as `repo`.
[[nodiscard]] bool has_hf_snapshot(int repo, const std::string& commit);

/// Writes into one repo directory of the Hugging Face cache. Move-only; owns the directory's
/// descriptor; not thread-safe.
class HfCacheWriter {
 public:
  /// Opens (creating it and its parents as needed) the repo directory `repo_dir`.
  [[nodiscard]] static Result<HfCacheWriter> open(const std::string& repo_dir);

  /// `blobs/NAME` as a hard link to `source` (else a copy of the first `size` bytes of
  /// `source_fd`), unless a regular file of that size is there already.
  [[nodiscard]] Result<void> blob(const std::string& name, const std::string& source, int source_fd,
                                  std::uint64_t size) const;
  /// `blobs/NAME` holding `text`, unless a regular file of that size is there already.
  [[nodiscard]] Result<void> small_blob(const std::string& name, const std::string& text) const;
  /// `snapshots/COMMIT/PATH` -> `../../(..)/blobs/NAME`, a relative symlink replaced atomically.
  [[nodiscard]] Result<void> link(const std::string& commit, const std::string& path, const std::string& name) const;
  /// `refs/REVISION` holding `commit`.
  [[nodiscard]] Result<void> ref(const std::string& revision, const std::string& commit) const;

 private:
  HfCacheWriter() = default;
  [[nodiscard]] Result<UniqueFd> dir(const std::string& rel) const;

  UniqueFd root_;
  std::string root_path_;
  mode_t dir_mode_ = 0755;
  mode_t file_mode_ = 0644;
};

}  // namespace tensorfetch::detail
