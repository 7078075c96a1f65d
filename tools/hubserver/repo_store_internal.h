// SPDX-License-Identifier: Apache-2.0
// The repos of the test server: directories under the root, their refs (.commit, .refs,
// set_ref, move_ref_after), cached file digests, the CDN blob registry and URL signing.
// Private to tools/hubserver.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hub_server.hpp"

namespace tensorfetch::testing::detail {

/// A file served by the CDN under its sha256.
struct BlobInfo {
  std::filesystem::path path;
  std::string repo;  ///< the repo and file that last named this blob
  std::string file;
};

/// The repos. Thread-safe.
class RepoStore {
 public:
  /// Reads root, lfs_suffixes and lfs_threshold; makes a random signing secret.
  explicit RepoStore(const Options& opt);

  /// The directory of a repo id ("org/name", "datasets/org/name").
  std::filesystem::path dir(const std::string& repo) const;
  bool exists(const std::string& repo) const;
  /// The ids of every repo under the root (models, then datasets).
  std::vector<std::string> repo_ids() const;
  /// Every file of a repo, relative, sorted, without the control files.
  std::vector<std::string> list_files(const std::string& repo) const;
  /// Whether `file` (repo-relative) is a control file that is never served.
  static bool is_control_file(const std::string& file);

  /// The commit `rev` (a ref name or a known sha) names; "" = unknown repo or revision.
  std::string resolve_rev(const std::string& repo, const std::string& rev);
  /// Points REF at SHA. Throws std::invalid_argument (not 40 hex, unknown repo).
  void set_ref(const std::string& repo, const std::string& ref, const std::string& sha);
  /// Moves REF to SHA after `requests` more counted requests of the repo.
  void move_ref_after(const std::string& repo, const std::string& ref, const std::string& sha,
                      int requests);
  /// Counts a resolve/api request of `repo` for move_ref_after(); applies due moves.
  void count_request(const std::string& repo);

  /// Cached hex sha256 of a file (recomputed when its size or mtime changes).
  std::string sha256(const std::filesystem::path& path);
  /// Cached git blob id of a file.
  std::string git_blob(const std::filesystem::path& path);
  /// Whether a file is served through the CDN (suffix or size).
  bool is_lfs(const std::string& file, std::uint64_t size) const;
  /// Hashes every file of every repo; registers the LFS ones as blobs. Returns the count.
  std::size_t warm_up();

  /// Registers a file as a CDN blob; returns its sha256.
  std::string register_blob(const std::filesystem::path& path, const std::string& repo,
                            const std::string& file);
  std::optional<BlobInfo> blob(const std::string& sha256) const;
  /// "/cdn/SHA?expires=MS&sig=HEX", valid for ttl_ms.
  std::string signed_cdn_path(const std::string& sha256, std::int64_t ttl_ms) const;
  /// Whether `sig` is the signature of SHA + expires.
  bool signature_ok(const std::string& sha256, const std::string& expires,
                    const std::string& sig) const;

 private:
  struct Refs {
    std::map<std::string, std::string> refs;
    std::set<std::string> shas;
  };
  struct RefMove {
    std::string repo, ref, sha;
    int remaining;
  };
  struct HashEntry {
    std::mutex mu;
    bool done = false;
    std::uint64_t size = 0;
    std::int64_t mtime = 0;
    std::string value;
  };

  Refs* refs_of_locked(const std::string& repo);  // caller holds refs_mu_
  std::string cached_digest(const std::filesystem::path& path, bool git);
  std::string sign(const std::string& sha, const std::string& expires) const;

  const std::filesystem::path root_;
  const std::vector<std::string> lfs_suffixes_;
  const std::uint64_t lfs_threshold_;
  const std::string secret_;

  std::mutex refs_mu_;
  std::map<std::string, Refs> refs_;
  std::vector<RefMove> moves_;
  std::mutex hash_mu_;
  std::map<std::string, std::shared_ptr<HashEntry>> hashes_;
  mutable std::mutex blob_mu_;
  std::map<std::string, BlobInfo> blobs_;
};

}  // namespace tensorfetch::testing::detail
